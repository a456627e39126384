"""What a job reported beside its steps and figures, typed: ``JobExtras`` (``JobResult.extra``) and the records it
holds (the compiler's settings, the steady steps' scheduling, the all-reduce summary, another rank's end, the
gradient noise scale). JSON is only how the store keeps them (``to_dict`` / ``from_dict``; a stored key this
version does not know is left out when read).

The job's messages (``tcbench.job.protocol``) that carry one of these records extend it, as ``Step`` extends
``StepRecord``: one list of fields for the sender, the runner and the store.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from typing import Any



def optional_field(default: Any = None) -> Any:
    """A field a job's message leaves out while it is None (``tcbench.job.protocol.encode``)."""
    return field(default=default, metadata={"optional": True})


@dataclass(frozen=True)
class CompilePhases:
    """Where a compiled job's compile time went, as its compiler timed it during the warmup steps (torch.compile:
    ``torch._dynamo.utils.compile_times``; XLA: its ``CompileTime`` metric); None where the compiler does not say,
    and for eager.

    ``compile_dynamo_s``: Dynamo tracing Python bytecode into graphs; ``compile_aot_s``: AOTAutograd (tracing the
    joint forward/backward graph, partitioning it, the backward's lazy compile) outside the backend;
    ``compile_backend_s``: the backend's code generation and compile (Inductor's ``compile_fx_inner`` for every
    graph, a C++ compile or a load from its FX graph cache; XLA's compile). The cache state of each phase: Dynamo
    traces again in every process (torch 2.9 keeps no Dynamo cache; on torch ≥ 2.14 a loaded loss is not traced,
    ``precompiled``); ``aot_cache_hits`` / ``aot_cache_misses``
    count the graphs found in / missing from AOTAutograd's cache, ``fx_cache_hits`` / ``fx_cache_misses`` those of
    Inductor's FX graph cache. ``artifact_key`` / ``artifact_state``: the compile artifacts of the job's key
    (``tcbench.job.artifacts``) and what became of them. ``precompiled``: whether the loss was loaded without
    tracing (``tcbench.job.precompiled``).
    """

    compile_dynamo_s: float | None = None
    compile_aot_s: float | None = None
    compile_backend_s: float | None = None
    aot_cache_hits: int | None = None
    aot_cache_misses: int | None = None
    fx_cache_hits: int | None = None
    fx_cache_misses: int | None = None
    compiled_regions: str | None = None   # compile_scope="blocks": the blocks compiled ("transformer.h: 2 × GPT2Block")
    artifact_key: str | None = None     # the key of the job's compile artifacts (tcbench.job.artifacts)
    artifact_state: str | None = None   # loaded / saved / refused / none stored, in words
    # the loss loaded without tracing (torch >= 2.14, tcbench.job.precompiled): "loaded …", "saved …", "refused …",
    # or "not used: why"; None where the job compiles no model (eager, xla, compile_scope='blocks'/'step')
    precompiled: str | None = None


@dataclass(frozen=True)
class CompilerSettings:
    """A compiled backend's configuration, as the job announced it before training."""

    backend: str
    mode: str
    precision: str
    debug: bool
    scope: str = "model"   # JobSpec.compile_scope
    optimizer: bool = True   # JobSpec.compile_optimizer
    cpp_wrapper: bool = False


@dataclass(frozen=True)
class SchedTimes:
    """Over the steady steps: wall, CPU and run-queue wait seconds and the hypervisor's steal share."""

    wall_s: float
    cpu_s: float
    wait_s: float | None
    steal_share: float | None
    wait_main_only: bool = False   # the wait is the main thread's alone (a runtime with threads of its own)
    cpus: list[int] | None = optional_field()   # the CPUs the steady steps were pinned to (None: not pinned)
    others_share: float | None = optional_field()   # the share of those CPUs' time other processes used


@dataclass(frozen=True)
class AllReduceSummary:
    """A data-parallel job's gradient all-reduce over its steady steps (rank 0's view): bytes and milliseconds per
    step (median and quartiles), the bucket count and its share of the step (it bounds what overlap could hide)."""

    bytes_per_step: int
    ms_median: float
    ms_q1: float
    ms_q3: float
    buckets: int | None
    steps: int
    share_of_step: float | None


@dataclass(frozen=True)
class RankEnd:
    """How another rank of a data-parallel job ended (its own ``end`` message)."""

    status: str
    error: str = ""


@dataclass(frozen=True)
class NoiseScale:
    """A measured gradient noise scale B_simple (in samples) with its 95 % interval (``high`` None: unbounded);
    ``tcbench.measure.noise_scale`` measures it."""

    b_simple: float | None   # tr(Σ) / |G|², samples; None when |G|² came out <= 0 (noise-dominated)
    low: float | None        # None: nearly every resample had |G|² <= 0 (far beyond what this batch resolves)
    high: float | None       # None: unbounded above
    tr_sigma: float          # mean per-sample gradient variance trace over the steps used
    g2: float                # mean estimated |G|² (the true gradient's squared norm)
    batch_size: int          # B: the job's batch
    micro_batch: int         # b: the micro-batch size (B / k)
    steps: int               # the steady steps the estimate uses
    run_id: int | None = None
    precision: str = "fp32"  # the job's: bf16/fp16 measured under autocast, on the fp32 parameters' gradients

    @property
    def bounded(self) -> bool:
        """Whether the interval has an upper end (|G|² resolved above 0)."""
        return self.high is not None

    def describe(self) -> str:
        if self.b_simple is None:
            bound = f"at least {fmt_samples(self.low)} samples" if self.low is not None else "no finite bound either"
            return (f"gradient noise scale not resolved (|G|² ≤ 0 over {self.steps} steps): the gradient is noise-"
                    f"dominated at batch {self.batch_size} ({bound}); the rules' large-B_noise limits apply")
        high = "∞" if self.high is None else fmt_samples(self.high)
        under = "" if self.precision == "fp32" else f"; under {self.precision} autocast, fp32 gradients"
        return (f"gradient noise scale B_simple ≈ {fmt_samples(self.b_simple)} samples (95 % interval "
                f"{fmt_samples(self.low)}–{high}; {self.steps} steps, micro-batches of {self.micro_batch} in batches "
                f"of {self.batch_size}{under})")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "NoiseScale":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class EvalPoint:
    """One held-out evaluation during training (``JobSpec.eval_every``): after ``steps`` steps and ``samples``
    samples, ``wall_s`` seconds after training began (at the first step: compiling included, loading the model and
    data not; the evaluations' own time
    left out), the mean held-out ``loss``; ``eval_s``: the evaluations' own seconds so far, this one included
    (reported apart, never counted in ``wall_s``)."""

    steps: int
    samples: int
    wall_s: float
    loss: float
    eval_s: float = 0.0


def fmt_samples(value: float | None) -> str:
    """A count of samples: 3 significant digits below 1000, whole thousands-separated above."""
    if value is None:
        return "—"
    return f"{value:.3g}" if value < 1000 else f"{value:,.0f}"


@dataclass
class JobExtras:
    """What a job reported beside its steps and figures (``JobResult.extra``), and what became of its run.

    Filled as the job's messages arrive (``tcbench.runner.inbox``), at its end (``tcbench.runner.ending``) and by
    the runner (``tcbench.runner.process``); every field keeps its default where the job did not say.
    """

    # how the job was started and how far it got
    launcher: str = ""                 # "fork" (the warm launcher) or "spawn"
    launcher_pid: int | None = None    # the launcher that forked it: the rounds of a comparison never share one
    start_s: float | None = None       # from the request to a running process (a fork's wait for its launcher)
    turns: int = 0                     # lock-step rounds: the turns it took (blocks of measured steps)
    phase: str = ""                    # the last phase the job announced (the stall clock's words)
    compiler: CompilerSettings | None = None
    # the model and data, after loading
    n_params: int | None = None
    flops_per_step: float | None = None
    tokenizer: str = ""                # where the tokenizer came from (tcbench's worker on text data)
    probe: dict = field(default_factory=dict)   # the MFU reference: flops, source, disturbed or error
    # data parallel
    world_size: int | None = None
    dist_backend: str = ""             # torch.distributed's backend: gloo, nccl, xla
    allreduce_steps: list[list] = field(default_factory=list)   # [step, bytes, seconds, buckets] per step
    allreduce: AllReduceSummary | None = None
    rank_ends: dict[str, RankEnd] = field(default_factory=dict)   # by rank, the other ranks that sent their end
    # the compiler
    counters_after_warmup: dict[str, int] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)   # at the end: compiles, graph breaks, ...
    compile_phases: CompilePhases | None = None
    diagnostics: dict = field(default_factory=dict)   # tcbench.job.diagnostics.Collector.collect: entries, summary
    sched: SchedTimes | None = None
    # held-out loss per batch before the first step ("initial") and after the last, with its standard error
    eval_loss_initial: float | None = None
    eval_losses_initial: list[float] = field(default_factory=list)
    eval_loss_initial_se: float | None = None
    eval_loss: float | None = None
    eval_losses: list[float] = field(default_factory=list)
    eval_loss_se: float | None = None
    eval_curve: list[EvalPoint] = field(default_factory=list)   # every eval_every steps (time to quality)
    # the gradient noise scale (noise_micro_batches > 1)
    noise_samples: list[dict] = field(default_factory=list)   # per step: the micro-batch gradient norms
    noise_scale: NoiseScale | None = None
    noise_scale_error: str = ""        # why there is no estimate (too few steady steps)
    # how it ended and where it was written
    traceback: str = ""
    store_error: str = ""              # the store refused the result ...
    spooled: str = ""                  # ... so it waits in this spool file
    store_artifacts: str = ""          # the team store's compile artifacts fetched or kept, in words

    def to_dict(self) -> dict[str, Any]:
        """The fields the job set (those not at their default), nested records as dicts: what the store keeps."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            if value != default:
                out[f.name] = _plain(value)
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), default=str)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> "JobExtras":
        """Extras from their stored dict; nested records get their types back, keys this version lacks are
        left out."""
        hints = typing.get_type_hints(cls)
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: _typed(hints[k], v) for k, v in (data or {}).items() if k in names})

    @classmethod
    def from_json(cls, text: str | None) -> "JobExtras":
        return cls.from_dict(json.loads(text) if text else {})


RECORDS = (CompilerSettings, SchedTimes, AllReduceSummary, RankEnd, NoiseScale, CompilePhases, EvalPoint)


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _record(cls: type, value: Any) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in value.items() if k in names})


def _typed(hint: Any, value: Any) -> Any:
    """A stored value back as its field's type: a record (or ``X | None``), a dict or list of records, else as
    stored."""
    if value is None:
        return None
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    kind = next(a for a in typing.get_args(hint) if a is not type(None)) if union else hint
    if kind in RECORDS and isinstance(value, dict):
        return _record(kind, value)
    if typing.get_origin(kind) is dict and isinstance(value, dict):
        item = typing.get_args(kind)[1]
        return {k: _record(item, v) if item in RECORDS and isinstance(v, dict) else v for k, v in value.items()}
    if typing.get_origin(kind) is list and isinstance(value, list):
        item = typing.get_args(kind)[0]
        return [_record(item, v) if item in RECORDS and isinstance(v, dict) else v for v in value]
    return value
