"""Result dataclasses: StepRecord (one optimizer step), JobFigures (what a job's steps add up to) and
JobResult (one job: its spec, how it ended, its figures, its environment and its typed extras,
``tcbench.core.extras.JobExtras``). ``CompilePhases``, the compile-time figures a job reports, lives with the other
reported records in ``tcbench.core.extras``.

Each has one list of fields; the store's columns and the history readers are derived from them
(``tcbench.store.api``). A new figure is added here; to be shown, it also needs its entry (label, unit,
formatter) in the one column table, ``tcbench.view.format.COLUMNS``.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable


from tcbench.core.extras import CompilePhases, JobExtras
from tcbench.core.spec import JobSpec

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class StepRecord:
    """One optimizer step, measured after the device was synchronised.

    ``loss`` is None on steps where the loss tensor was not read on the host (see
    ``JobSpec.loss_every``); ``mem_bytes`` is the peak memory so far above the post-load baseline;
    ``cpu_s`` is the CPU time the job's process used during the step (all its threads), so
    ``cpu_s / (step_s * threads)`` is the share of the step's wall time the job had the CPU.
    """

    step: int
    step_s: float
    samples_s: float
    tokens_s: float
    mem_bytes: int
    loss: float | None = None
    warmup: bool = False
    seq_len: int = 0
    cpu_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


COMPILE_PHASE_NAMES = tuple(f.name for f in dataclasses.fields(CompilePhases))
# debug=True: a compiled job's structured compile trace (TORCH_TRACE) and tlparse's HTML report of it, in its run folder
TRACE_DIR, TRACE_REPORT_DIR = "torch_trace", "tlparse"


@dataclass(frozen=True)
class JobFigures(CompilePhases):
    """What a job's step records add up to (``tcbench.measure.metrics.job_figures``); None when the job ended first.

    ``median_step_s`` (and the throughputs from it): what a run of this job sees; ``fast_step_s``: the 10th percentile
    of its steady steps, the step a comparison's round ratio reads (``tcbench.measure.interval.fast_step``).

    Spread of the steady steps: ``step_iqr_s`` (interquartile range) and ``step_cv`` (coefficient of
    variation). ``cpu_share``: CPU time ÷ (wall time × threads) over the steady steps; ``wait_share``:
    the share of that time the job's threads were runnable but waiting for a CPU (Linux schedstat);
    ``steal_share``: the share of the machine's CPU time a hypervisor took meanwhile (/proc/stat);
    ``others_share``: the share of the pinned CPUs' time other processes used (None: not pinned).
    ``noisy`` with ``noise_reason`` in words when the machine interfered or the steps scatter.
    ``mfu`` is None when it cannot be reported honestly; ``mfu_note`` then says why.
    """

    median_step_s: float | None = None
    fast_step_s: float | None = None
    samples_s: float | None = None
    tokens_s: float | None = None
    steady_steps: int = 0
    step_iqr_s: float | None = None
    step_cv: float | None = None
    cpu_share: float | None = None
    wait_share: float | None = None
    steal_share: float | None = None
    others_share: float | None = None
    noisy: bool = False
    noise_reason: str = ""
    warmup_s: float | None = None
    compile_latency_s: float | None = None
    peak_mem_bytes: int | None = None
    flops_per_step: float | None = None
    peak_flops: float | None = None
    mfu: float | None = None
    mfu_note: str = ""
    n_params: int | None = None
    final_loss: float | None = None
    recompiles_after_warmup: int | None = None
    graph_breaks: int | None = None


FIGURE_NAMES = tuple(f.name for f in dataclasses.fields(JobFigures))


PHASE_WORDS = (("Dynamo", "compile_dynamo_s"), ("AOTAutograd", "compile_aot_s"), ("backend", "compile_backend_s"))


def compile_phases_text(jobs: "list[JobResult]") -> str:
    """Each compile phase over ``jobs`` (their rounds), its median and, with two rounds or more, its range: "Dynamo
    2.1 s (2.0–2.3) · AOTAutograd 1.3 s (1.3–1.4) · backend 0.0 s (0.0–0.0)"; "" when no job reported them."""
    parts = []
    for word, name in PHASE_WORDS:
        values = sorted(v for r in jobs if (v := getattr(r, name)) is not None)
        if values:
            mid = (values[(len(values) - 1) // 2] + values[len(values) // 2]) / 2
            spread = f" ({values[0]:.1f}–{values[-1]:.1f})" if len(values) > 1 else ""
            parts.append(f"{word} {mid:.1f} s{spread}")
    return " · ".join(parts)


def compile_cache_text(jobs: "list[JobResult]") -> str:
    """What was compiled and each compile phase's cache state over ``jobs`` (their rounds), in words: "compiled
    transformer.h: 2 × GPT2Block · Dynamo traced · AOTAutograd 0 of 2 graphs from its cache · Inductor 4 of 4 graphs
    from the FX graph cache · compile artifacts saved bb49…" (on torch ≥ 2.14, "the loss loaded precompiled, not
    traced" where it was: ``tcbench.job.precompiled``); "" when no job reported its phases."""
    def count(hits: str, misses: str) -> tuple[int, int] | None:
        pairs = [(getattr(r, hits), getattr(r, misses)) for r in jobs if getattr(r, hits) is not None]
        return None if not pairs else (sum(h for h, _ in pairs), sum(h + (m or 0) for h, m in pairs))

    aot, fx = count("aot_cache_hits", "aot_cache_misses"), count("fx_cache_hits", "fx_cache_misses")
    if aot is None and fx is None and not any(r.artifact_state for r in jobs):
        return ""
    regions = sorted({r.compiled_regions for r in jobs if r.compiled_regions})
    parts = [f"compiled {'; '.join(regions)}"] if regions else []
    loaded = sum((r.precompiled or "").startswith("loaded") for r in jobs)   # torch >= 2.14: tcbench.job.precompiled
    parts.append("Dynamo traced" if not loaded else "the loss loaded precompiled, not traced" if loaded == len(jobs)
                 else f"the loss loaded precompiled in {loaded} of {len(jobs)} jobs, traced in the others")
    made = sorted({p for r in jobs if (p := r.precompiled) and not p.startswith(("loaded", "not used"))})
    if made:   # "saved <key> …", "refused <key>: why …", "not precompiled: aot_compile failed …"
        parts.append("precompiled loss " + "; ".join(made))
    if aot is not None:
        parts.append(f"AOTAutograd {aot[0]} of {aot[1]} graphs from its cache")
    if fx is not None:
        parts.append(f"Inductor {fx[0]} of {fx[1]} graphs from the FX graph cache")
    states = sorted({f"{r.artifact_state}" for r in jobs if r.artifact_state})
    if states:   # the key is in the state's words ("loaded bb49…", "saved bb49…", "refused: …")
        parts.append("compile artifacts " + "; ".join(states))
    return " · ".join(parts)


AA = " (A/A)"   # the label of the native job's twin in an A/A pair: "eager (A/A)"


def aa_label(backend: str) -> str:
    """The label of ``backend``'s A/A twin (the same job again, compared with itself)."""
    return backend + AA


def default_label(backend: str) -> str:
    """The label of ``backend``'s default configuration among searched ones (``tune_compile``): "inductor · default"."""
    return f"{backend} · default"


def standing_for(backends: Iterable[str]) -> dict[str, str]:
    """The job labels that stand for a backend itself, each with its backend: the backend's own name, its A/A twin
    and its default configuration (figures give them the backend's colour). A lookup of the labels tcbench makes,
    never a parse of one."""
    return {label: b for b in backends for label in (b, aa_label(b), default_label(b))}


def _figure(name: str) -> Any:
    """A ``JobFigures`` field read as a ``JobResult``'s own attribute (read-only: set ``result.figures``)."""
    return property(lambda self: getattr(self.figures, name), doc=f"``figures.{name}``")


@dataclass
class JobResult:
    """What one job measured. Its figures are also readable as attributes (``result.median_step_s``).

    ``env``: the environment the job ran in (versions, CPU, threads, load at start and end, host),
    stored with the run; reports are built from it, never from the machine that renders them.
    ``round`` and ``label`` place the job in its comparison (``label`` is e.g. ``"eager (A/A)"``). ``extra``: what
    the job reported beside its steps (``JobExtras``: the held-out loss, counters, diagnostics, the noise scale, ...).
    """

    spec: JobSpec
    status: str
    run_id: int | None = None
    error: str = ""
    records: list[StepRecord] = field(default_factory=list)
    figures: JobFigures = field(default_factory=JobFigures)
    # "cold" (it compiled a graph its caches lacked) / "warm" / "artifacts" (a fresh cache, its artifacts loaded) / ""
    cache_state: str = ""
    device: str = ""
    wall_s: float | None = None
    artifacts: str = ""
    log_tail: str = ""
    round: int = 0
    label: str = ""
    env: dict = field(default_factory=dict)
    extra: JobExtras = field(default_factory=JobExtras)

    # the figures, read as the result's own attributes: result.median_step_s is result.figures.median_step_s
    compile_dynamo_s = _figure("compile_dynamo_s")
    compile_aot_s = _figure("compile_aot_s")
    compile_backend_s = _figure("compile_backend_s")
    aot_cache_hits = _figure("aot_cache_hits")
    aot_cache_misses = _figure("aot_cache_misses")
    fx_cache_hits = _figure("fx_cache_hits")
    fx_cache_misses = _figure("fx_cache_misses")
    compiled_regions = _figure("compiled_regions")
    artifact_key = _figure("artifact_key")
    artifact_state = _figure("artifact_state")
    precompiled = _figure("precompiled")
    median_step_s = _figure("median_step_s")
    fast_step_s = _figure("fast_step_s")
    samples_s = _figure("samples_s")
    tokens_s = _figure("tokens_s")
    steady_steps = _figure("steady_steps")
    step_iqr_s = _figure("step_iqr_s")
    step_cv = _figure("step_cv")
    cpu_share = _figure("cpu_share")
    wait_share = _figure("wait_share")
    steal_share = _figure("steal_share")
    others_share = _figure("others_share")
    noisy = _figure("noisy")
    noise_reason = _figure("noise_reason")
    warmup_s = _figure("warmup_s")
    compile_latency_s = _figure("compile_latency_s")
    peak_mem_bytes = _figure("peak_mem_bytes")
    flops_per_step = _figure("flops_per_step")
    peak_flops = _figure("peak_flops")
    mfu = _figure("mfu")
    mfu_note = _figure("mfu_note")
    n_params = _figure("n_params")
    final_loss = _figure("final_loss")
    recompiles_after_warmup = _figure("recompiles_after_warmup")
    graph_breaks = _figure("graph_breaks")

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def name(self) -> str:
        """The job's label in its comparison (the backend's name unless it is an A/A twin)."""
        return self.label or self.spec.backend

    def steps(self) -> pd.DataFrame:
        """Every recorded step of this job as a DataFrame."""
        import pandas as pd   # here, not at the top: a job's process imports this module and never needs pandas

        cols = [f.name for f in dataclasses.fields(StepRecord)]
        df = pd.DataFrame([r.to_dict() for r in self.records], columns=cols)
        df.insert(0, "backend", self.name)
        df.insert(0, "run_id", self.run_id)
        return df

    def losses(self) -> list[tuple[int, float]]:
        return [(r.step, r.loss) for r in self.records if r.loss is not None and math.isfinite(r.loss)]

    def summary_row(self) -> dict[str, Any]:
        """One job in the units people read (ms, MiB), with its spread and noise verdict."""
        s, f = self.spec, self.figures

        def ms(v: float | None) -> float | None:
            return None if v is None else v * 1e3

        return dict(run_id=self.run_id, model=s.model, size=s.size, backend=self.name, batch_size=s.batch_size,
                    seq_len=s.seq_len, precision=s.precision, threads=self.env.get("threads", s.threads),
                    status=self.status, median_step_ms=ms(f.median_step_s), step_iqr_ms=ms(f.step_iqr_s),
                    step_cv=f.step_cv, samples_s=f.samples_s, tokens_s=f.tokens_s,
                    compile_latency_s=f.compile_latency_s, cache=self.cache_state,
                    peak_mem_mb=None if f.peak_mem_bytes is None else f.peak_mem_bytes / 2**20,
                    mfu=f.mfu, cpu_share=f.cpu_share, noisy=f.noisy, noise=f.noise_reason or f.mfu_note,
                    final_loss=f.final_loss, recompiles=f.recompiles_after_warmup, error=self.error)

    def __repr__(self) -> str:
        f = self.figures
        fig = "" if f.median_step_s is None else f", median_step_ms={f.median_step_s * 1e3:.1f}"
        noisy = f", noisy={f.noise_reason!r}" if f.noisy else ""
        err = f", error={self.error[:80]!r}" if self.error else ""
        return f"JobResult(run_id={self.run_id}, job={self.name!r}, status={self.status!r}{fig}{noisy}{err})"


@dataclass(frozen=True)
class SummaryRow:
    """One job label of a comparison, summed over its rounds: what ``Comparison.summary()`` shows as a row.

    ``label`` is the job's name in the comparison ("eager (A/A)" for the native job's twin), ``backend`` the
    backend that ran it. The pair fields (speedup … loss parity) are None on the baseline's row.
    """

    label: str
    backend: str
    status: str
    rounds: int
    median_step_ms: float | None
    step_cv: float | None
    samples_s: float | None
    tokens_s: float | None
    compile_latency_s: float | None
    cache: str
    compile_dynamo_s: float | None     # CompilePhases, median over the rounds
    compile_aot_s: float | None
    compile_backend_s: float | None
    compile_phases: str                # the phases' medians and ranges over the rounds, in words
    compile_cache: str                 # each phase's cache state in words (``compile_cache_text``)
    peak_mem_mb: float | None
    mfu: float | None
    mfu_note: str
    noisy: bool
    noise: str
    final_loss: float | None
    recompiles: int | None
    graph_breaks: int | None
    diagnosis: str
    error: str
    speedup: float | None = None
    speedup_ci_low: float | None = None
    speedup_ci_high: float | None = None
    resolution: float | None = None        # the interval's half-width as a share: max(high/speedup, speedup/low) - 1
    memory_ratio: float | None = None
    memory_ci_low: float | None = None
    memory_ci_high: float | None = None
    extra_warmup_s: float | None = None
    break_even_steps: float | None = None
    break_even_low: float | None = None
    break_even_high: float | None = None
    loss_parity: bool | None = None
    loss_diff: float | None = None
    loss_parity_note: str = ""
    verdict_kind: str = ""
    verdict: str = ""
    warnings: tuple[str, ...] = ()

    def record(self) -> dict[str, Any]:
        """The row as ``summary()``'s DataFrame has it, in field order: the job label in the column "backend" (as
        it always was; the backend itself is not a column), warnings as a list."""
        out = {}
        for f in dataclasses.fields(self):
            if f.name != "backend":
                value = getattr(self, f.name)
                out["backend" if f.name == "label" else f.name] = list(value) if f.name == "warnings" else value
        return out


def field_type(cls: type, name: str) -> type:
    """A dataclass field's type, ``X`` for ``X | None`` (from the resolved annotations, never their text)."""
    hint = typing.get_type_hints(cls)[name]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if len(args) == 1 else typing.get_origin(hint) or hint


def sql_type(cls: type, name: str) -> str:
    """The SQLite column type for a dataclass field (REAL / INTEGER / TEXT), from its type."""
    kind = field_type(cls, name)
    if kind is float:
        return "REAL"
    if kind in (int, bool):
        return "INTEGER"
    return "TEXT"
