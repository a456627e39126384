"""compare(): the native job and each compiled job, in separate processes and alternating rounds,
summarised side by side with intervals and verdicts; noise_floor(): the same job against itself (A/A);
compare_script(): a training script of your own, the same way (inside it, ``tcbench.track()`` or ``tcbench.hf``)."""

from __future__ import annotations

import dataclasses
import json
import math
import socket
import statistics
import threading
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import pandas as pd

from tcbench.measure.interval import (MIN_EARLIER, PILOT_ROUNDS, RoundsRule, between_spread, log_ratios,
                                      ratio_interval, resolution, value_interval)
from tcbench.measure.metrics import (advice, break_even_range, break_even_steps, drift, loss_parity, steady, verdict,
                                     warnings_for)
from tcbench.core.results import (AA, JobResult, SummaryRow, aa_label, backend_of, compile_cache_text,
                                  compile_phases_text)
from tcbench.runner.preflight import check as preflight
from tcbench.runner.process import Observer, run
from tcbench.runner.session import ComparisonSession, comparison_session
from tcbench.core.spec import BACKENDS, JobSpec
from tcbench.store.api import Store, StoreMissing

DEFAULT_ROUNDS = 3          # a fixed number of rounds (noise_floor, and compare(rounds=...))
DEFAULT_RESOLVE = 0.05      # compare()'s default: rounds are added until the interval is within ±5 % ...
DEFAULT_BUDGET_S = 60.0     # ... or 60 s have passed
MAX_ROUNDS = 30


def median_of(values: Sequence[Any]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


@dataclass
class Comparison:
    """A native job and its compiled counterparts, ``rounds`` alternating rounds each.

    ``backends`` holds the job labels in order: the native backend first, then each compared backend
    (an A/A twin of the native one is labelled ``"<backend> (A/A)"``). Jobs are paired by round.
    ``rule``: the adaptive rounds' stopping rule (None: a fixed number of rounds); ``stop_reason`` says why the
    rounds ended. ``between``: per compared label, the spread of the speedup between comparisons on this machine
    (τ in log units) and how many earlier comparisons of the same spec it comes from (``earlier_spreads``); the
    interval includes it.
    """

    spec: JobSpec
    backends: list[str]
    results: list[JobResult] = field(default_factory=list)
    rounds: int = DEFAULT_ROUNDS
    comparison_id: int | None = None
    kind: str = "compare"
    rule: RoundsRule | None = None
    stop_reason: str = ""
    between: dict[str, tuple[float, int]] = field(default_factory=dict)
    created: float | None = None   # when it started (seconds since the epoch)
    # a label that is not a backend's: the spec its jobs run (``compare_configs``: compiled configurations)
    variants: dict[str, JobSpec] = field(default_factory=dict)

    def spec_for(self, label: str) -> JobSpec:
        """The spec the jobs labelled ``label`` run: a variant's own, else the comparison's with its backend."""
        return self.variants.get(label) or dataclasses.replace(self.spec, backend=backend_of(label))

    def by_backend(self, label: str) -> list[JobResult]:
        return [r for r in self.results if r.name == label]

    @property
    def native(self) -> list[JobResult]:
        return self.by_backend(self.backends[0])

    def pairs(self, label: str) -> list[tuple[JobResult, JobResult]]:
        """(native, compiled) jobs of the same round, for every round where both ran."""
        nat = {r.round: r for r in self.native}
        return [(nat[r.round], r) for r in self.by_backend(label) if r.round in nat]

    def complete_pairs(self, label: str) -> list[tuple[JobResult, JobResult]]:
        """The rounds where both jobs ended ok with steady steps: the ones the speedup is measured on."""
        return [(a, b) for a, b in self.pairs(label) if a.ok and b.ok and steady(a.records) and steady(b.records)]

    def resolved(self) -> bool:
        """Whether every compared label's interval is within the rule's resolution (adaptive rounds)."""
        return self.rule is not None and all(self.rule.resolved(self._logs(label), self._tau(label))
                                             for label in self.backends[1:])

    def _tau(self, label: str) -> float | None:
        return self.between[label][0] if label in self.between else None

    def _logs(self, label: str) -> list[float]:
        return log_ratios([([s.step_s for s in steady(a.records)], [s.step_s for s in steady(b.records)])
                           for a, b in self.complete_pairs(label)])

    def row(self, label: str) -> SummaryRow:
        """One job label summed over its rounds (the baseline's row has no pair figures)."""
        jobs = self.by_backend(label)
        oks = [r for r in jobs if r.ok]
        status = "ok" if len(oks) == len(jobs) and jobs else ", ".join(sorted({r.status for r in jobs})) or "not run"
        med = median_of([r.median_step_s for r in oks])
        mfus = [r for r in oks if r.mfu is None and r.mfu_note]
        noise = "; ".join(f"round {r.round}: {r.noise_reason}" for r in jobs if r.noisy)
        fields: dict[str, Any] = dict(
            label=label, backend=backend_of(label) if not jobs else jobs[0].spec.backend, status=status,
            rounds=len(jobs), median_step_ms=None if med is None else med * 1e3,
            step_cv=median_of([r.step_cv for r in oks]), samples_s=median_of([r.samples_s for r in oks]),
            tokens_s=median_of([r.tokens_s for r in oks]), compile_latency_s=median_of([r.compile_latency_s for r in oks]),
            cache=",".join(sorted({r.cache_state for r in oks if r.cache_state})),
            **{name: median_of([getattr(r, name) for r in oks])
               for name in ("compile_dynamo_s", "compile_aot_s", "compile_backend_s")},
            compile_phases=compile_phases_text(oks), compile_cache=compile_cache_text(oks),
            peak_mem_mb=median_of([r.peak_mem_bytes / 2**20 for r in oks if r.peak_mem_bytes is not None]),
            mfu=None if mfus else median_of([r.mfu for r in oks]), mfu_note=mfus[0].mfu_note if mfus else "",
            noisy=any(r.noisy for r in jobs), noise=noise, final_loss=median_of([r.final_loss for r in oks]),
            recompiles=max((r.recompiles_after_warmup or 0 for r in oks), default=None),
            graph_breaks=max((r.graph_breaks or 0 for r in oks), default=None),
            diagnosis=next((d["summary"] for r in jobs if (d := r.extra.get("diagnostics")) and "summary" in d), ""),
            error="; ".join(r.error for r in jobs if r.error)[:500])
        if label == self.backends[0]:
            text = "baseline (native PyTorch)" + (f"; noisy — {noise}" if fields["noisy"] else "")
            return SummaryRow(**fields, verdict_kind="baseline", verdict=text)
        return SummaryRow(**fields, **self._pair_fields(label, med))

    def _pair_fields(self, label: str, med: float | None) -> dict[str, Any]:
        pairs = self.pairs(label)
        complete = self.complete_pairs(label)
        sp, lo, hi = ratio_interval([([s.step_s for s in steady(a.records)], [s.step_s for s in steady(b.records)])
                                     for a, b in complete], pilot=self.rule.pilot if self.rule else None,
                                    tau=self._tau(label))
        mem, mem_lo, mem_hi = value_interval([a.peak_mem_bytes / b.peak_mem_bytes for a, b in complete
                                              if a.peak_mem_bytes and b.peak_mem_bytes])
        problems = [f"{r.name} round {r.round} ended {r.status}: {r.error.strip().splitlines()[-1][:160] if r.error else ''}"
                    for a, b in pairs for r in (a, b) if not r.ok]
        if not pairs:
            problems.append("no round ran both jobs")
        noisy = sorted({f"{r.name} round {r.round}: {r.noise_reason}" for a, b in complete for r in (a, b) if r.noisy})
        what_to_do = advice(self.spec.threads, self.rounds, self.rule and self.rule.resolve,
                            self.rule and self.rule.budget_s)
        if label in self.between and 2 * self.between[label][0] > math.log1p(self.rule.resolve if self.rule
                                                                            else DEFAULT_RESOLVE):
            what_to_do = ("the speedup itself moves between comparisons on this machine, so more rounds will not "
                          "narrow this interval: measure on cores no other tenant shares")
        kind, text = verdict(sp, lo, hi, noisy, problems, len(complete) or self.rounds, what_to_do)
        nat_med = median_of([a.median_step_s for a, _ in complete])
        # what compiling adds to the warmup: the compiled job's warmup overhead minus native's own (eager warms up too)
        compile_s = median_of([max(b.compile_latency_s - (a.compile_latency_s or 0.0), 0.0) for a, b in complete
                             if b.compile_latency_s is not None])
        be_lo, be_hi = break_even_range(compile_s, nat_med, lo, hi) if kind == "faster" else (None, None)
        be = {"faster": break_even_steps(compile_s, nat_med, med), "slower": float("inf")}.get(kind)
        if label in self.between and lo is not None:
            tau, k = self.between[label]
            text += (f" (the interval includes how far the speedup moved between {k} earlier comparisons on this "
                     f"machine: ±{math.expm1(tau):.1%})")
        elif kind in ("faster", "slower") and len(complete) >= 2:
            text += (f" (from this comparison's rounds alone: with {MIN_EARLIER} earlier comparisons of this spec the "
                     "interval would also include how far the speedup moves between comparisons on this machine)")
        if kind == "faster" and be_lo is not None:
            text += f"; compiling pays off after {be_lo:,.0f}–{be_hi:,.0f} steps"
        elif kind == "slower":
            text += "; compiling never pays off here"
        parity = [loss_parity(a.records, b.records, self.spec_for(label).precision, self.spec.dropout == 0.0)
                  for a, b in complete]
        verdicts = [p for p, _, _ in parity if p is not None]
        failed = [note for p, _, note in parity if p is False]
        loss_ok = None if not verdicts else all(verdicts)
        recompiles = max((b.recompiles_after_warmup or 0 for _, b in complete), default=None)
        warnings = warnings_for(kind, sp, compile_s, mem, mem_hi, recompiles)
        warnings += [w for w in (drift(self.backends[0], [a.median_step_s for a, _ in complete]),
                                 drift(label, [b.median_step_s for _, b in complete])) if w]
        if loss_ok is False:
            warnings.append(f"loss parity failed: {failed[0]}")
        return dict(speedup=sp, speedup_ci_low=lo, speedup_ci_high=hi, resolution=resolution(sp, lo, hi),
                    memory_ratio=mem, memory_ci_low=mem_lo,
                    memory_ci_high=mem_hi, extra_warmup_s=compile_s, break_even_steps=be, break_even_low=be_lo,
                    break_even_high=be_hi, loss_parity=loss_ok, loss_diff=median_of([d for _, d, _ in parity]),
                    loss_parity_note=(failed or [n for _, _, n in parity] or ["not judged: no complete pair"])[0],
                    verdict_kind=kind, verdict=text, warnings=tuple(warnings))

    def rows(self) -> list[SummaryRow]:
        """One ``SummaryRow`` per job label, the baseline first: the data behind ``summary()``."""
        return [self.row(b) for b in self.backends]

    def summary(self) -> pd.DataFrame:
        """One row per job label: step time and its spread, throughput, compile latency, memory, speedup with
        its 95 % interval, memory ratio, break-even range, MFU, noise, loss parity, warnings and the verdict."""
        return pd.DataFrame([r.record() for r in self.rows()])

    def diagnostics(self) -> pd.DataFrame:
        """What each compiler did and where: one row per job, kind (graph break / recompile / fallback / host
        transfer), place (``where``: "file:line function") and reason (``why``), with ``count`` and ``advice``."""
        from tcbench.job.diagnostics import table

        return table(self)

    def steps(self) -> pd.DataFrame:
        """Every step record of every job (with run_id, backend label and round)."""
        frames = []
        for r in self.results:
            df = r.steps()
            df.insert(2, "round", r.round)
            frames.append(df)
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def environment(self) -> dict[str, Any]:
        """The stored environment of the comparison's first job (each job's is in ``result.env``)."""
        return next((r.env for r in self.results if r.env), {})

    def costs(self, profile: str | None = None, dataset_size: int = 100_000) -> pd.DataFrame:
        """$ per 1,000 steps, per epoch of ``dataset_size`` samples and per 1M tokens on ``profile`` (default:
        the spec's), from the measured throughput, and the % saved by compiling (``saved_pct``).

        Measured here and priced at the profile's rate: the ``basis`` column says so.
        """
        from tcbench.core.cost import cost_table

        s = self.summary()
        rows = s[["backend", "samples_s"]].assign(batch_size=self.spec.batch_size, seq_len=self.spec.seq_len)
        return cost_table(rows, profile or self.spec.profile, dataset_size=dataset_size, baseline=self.backends[0])

    @property
    def rounds_note(self) -> str:
        """How many rounds ran and why they stopped: ``"6 rounds (until ±5% or 60 s): resolution reached: …"``."""
        ran = len({r.round for r in self.results})
        how = "fixed" if self.rule is None else (
            f"until ±{self.rule.resolve:.0%}" + (f" or {self.rule.budget_s:g} s" if self.rule.budget_s else ""))
        return f"{ran} round{'' if ran == 1 else 's'} ({how})" + (f": {self.stop_reason}" if self.stop_reason else "")

    @property
    def warnings(self) -> list[str]:
        return [f"{row.label}: {w}" for row in self.rows() for w in row.warnings]

    def to_json(self) -> str:
        """The spec, the environment, the summary and every step, as JSON text."""
        return json.dumps({"comparison_id": self.comparison_id, "kind": self.kind, "spec": self.spec.to_dict(),
                           "backends": self.backends, "rounds": self.rounds,
                           "environment": {r.name + f"#{r.round}": r.env for r in self.results},
                           "summary": json.loads(self.summary().to_json(orient="records")),
                           "steps": json.loads(self.steps().to_json(orient="records"))}, indent=1)

    def to_dict(self) -> dict[str, Any]:
        """What ``tcbench show`` prints, as plain data (``json.dumps`` takes it; missing figures are None): each
        compared label's verdict with its 95 % interval (``backend``: the job label, as in ``summary()``), the
        summary rows, the diagnostics, the spec and the rounds (how many, why they stopped). Every step: ``to_json``."""
        records = lambda df: json.loads(df.to_json(orient="records")) if len(df) else []   # NaN -> None
        summary = records(self.summary())
        keys = ("backend", "verdict_kind", "verdict", "speedup", "speedup_ci_low", "speedup_ci_high",
                "resolution", "memory_ratio", "memory_ci_low", "memory_ci_high", "break_even_low", "break_even_high",
                "loss_parity", "warnings")
        return {"comparison_id": self.comparison_id, "kind": self.kind, "spec": self.spec.to_dict(),
                "backends": list(self.backends), "rounds": self.rounds,
                "rounds_note": self.rounds_note, "stop_reason": self.stop_reason,
                "rule": None if self.rule is None else dataclasses.asdict(self.rule),
                "verdicts": [{k: row.get(k) for k in keys} for row in summary if row.get("verdict_kind") != "baseline"],
                "summary": summary, "diagnostics": records(self.diagnostics())}

    def to_html(self, path: str | None = None, profile: str | None = None, plotlyjs: str = "directory") -> str:
        """The HTML report; written to ``path`` when given. ``profile``: add a cost section priced at that instance
        profile (default: the spec's, when it is not this machine). ``plotlyjs``: where the page gets plotly.js —
        "directory" (default: ``plotly.min.js`` beside the report, written next to ``path`` unless already there;
        without ``path`` the caller puts it there, ``tcbench.view.report.write_plotlyjs``), "cdn" (plotly's CDN,
        needs the network to view) or "inline" (self-contained, about 5 MB). Any other value is a ValueError."""
        from pathlib import Path

        from tcbench.view.report import comparison_html, write_plotlyjs

        html = comparison_html(self, profile=profile, plotlyjs=plotlyjs)
        if path:
            with open(path, "w", encoding="utf-8") as f:
                f.write(html)
            if plotlyjs == "directory":
                write_plotlyjs(Path(path).resolve().parent)
        return html

    def __repr__(self) -> str:
        return (f"Comparison(id={self.comparison_id}, model={self.spec.model!r}, size={self.spec.size!r}, "
                f"backends={self.backends}, rounds={self.rounds}, jobs={[r.status for r in self.results]})")


def _check(spec: JobSpec, backends: Sequence[str], rounds: Any) -> None:
    if not isinstance(spec, JobSpec):
        raise TypeError(f"spec={spec!r} is not a tcbench.JobSpec")
    for b in backends:
        if b not in BACKENDS:
            raise ValueError(f"backends contains {b!r}; allowed: {', '.join(BACKENDS)}")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds={rounds!r} is not allowed; it must be a whole number >= 1")


def rounds_rule(rounds: int | None, resolve: float | None, budget_s: float | None,
                max_rounds: int = MAX_ROUNDS) -> RoundsRule | None:
    """The adaptive rounds' rule for compare()'s arguments (None: exactly ``rounds`` rounds); a bad value is a
    ValueError naming it and what is allowed, before anything runs."""
    def number(name: str, value: Any, low: float, high: float) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low < value <= high:
            raise ValueError(f"{name}={value!r} is not allowed; it must be a number above {low:g} and at most {high:g}")
        return float(value)

    if resolve is None and budget_s is None:
        if rounds is not None:
            return None
        resolve, budget_s = DEFAULT_RESOLVE, DEFAULT_BUDGET_S
    if isinstance(max_rounds, bool) or not isinstance(max_rounds, int) or max_rounds < 2:
        raise ValueError(f"max_rounds={max_rounds!r} is not allowed; it must be a whole number >= 2")
    whole = isinstance(rounds, int) and not isinstance(rounds, bool)
    if rounds is not None and not (whole and 2 <= rounds <= max_rounds):
        raise ValueError(f"rounds={rounds!r} is not allowed with resolve/budget_s: it is the first stage of adaptive "
                         f"rounds, a whole number from 2 to max_rounds={max_rounds}")
    return RoundsRule(resolve=number("resolve", DEFAULT_RESOLVE if resolve is None else resolve, 0, 1),
                      budget_s=None if budget_s is None else number("budget_s", budget_s, 0, 7 * 24 * 3600),
                      pilot=min(rounds or PILOT_ROUNDS, max_rounds), max_rounds=max_rounds)


def compare(spec: JobSpec, backends: Sequence[str] = ("inductor",), rounds: int | None = None,
            observer: Observer | None = None, stop: threading.Event | None = None,
            store: Store | None = None, kind: str = "compare", resolve: float | None = None,
            budget_s: float | None = None, max_rounds: int = MAX_ROUNDS) -> Comparison:
    """Run ``spec`` natively and with each backend in ``backends``, in alternating rounds, until the answer is known.

    Rounds alternate the order (A B, then B A, ...) so a drift of the machine does not favour one side.

    - Default: rounds are added until every speedup's 95 % interval is within ±5 % (``DEFAULT_RESOLVE``) or
      60 s (``DEFAULT_BUDGET_S``) have passed, at most ``max_rounds``. ``resolve=0.03, budget_s=120`` asks for
      another resolution or budget (``budget_s=None`` with a ``resolve``: no time limit); ``rounds`` is then the
      first stage (default 4: ``PILOT_ROUNDS``). The interval stays valid under this stopping rule (Stein's two-stage
      procedure: ``tcbench.measure.interval``). ``Comparison.stop_reason`` says why the rounds ended.
    - ``rounds=3`` alone: exactly 3 rounds.

    ``spec.backend`` inside ``backends`` runs the job against itself (A/A, labelled ``"eager (A/A)"``); its interval
    excludes 1 in about 5 % of comparisons, as any 95 % interval does when nothing differs.
    """
    cmp = _prepared(spec, backends, rounds, kind, rounds_rule(rounds, resolve, budget_s, max_rounds))
    store = store or Store()
    cmp.between = earlier_spreads(store, cmp)
    with _session(cmp, store, stop) as session:
        _play(cmp, session, observer, store)
    return cmp


def compare_configs(native: JobSpec, variants: Mapping[str, JobSpec], rounds: int | None = None,
                    observer: Observer | None = None, stop: threading.Event | None = None, store: Store | None = None,
                    kind: str = "compare", resolve: float | None = None, budget_s: float | None = None,
                    max_rounds: int = MAX_ROUNDS) -> Comparison:
    """``compare`` for jobs that differ in more than their backend: ``native`` against each labelled spec of
    ``variants`` (``{"inductor: default": spec_a, "inductor: bf16": spec_b}``), in the same alternating rounds, with
    the same rule, intervals and verdicts; each variant's jobs are stored under its label."""
    if not isinstance(native, JobSpec) or not variants or not all(isinstance(v, JobSpec) for v in variants.values()):
        raise TypeError("compare_configs takes a JobSpec and a non-empty mapping of labels to JobSpecs")
    rule = rounds_rule(rounds, resolve, budget_s, max_rounds)
    rounds = rule.pilot if rule is not None else rounds
    _check(native, [], rounds)
    spec = preflight(native)
    taken = {spec.backend, *BACKENDS}
    for label in variants:
        if not isinstance(label, str) or not label.strip() or label in taken or label.endswith(AA) or "," in label:
            raise ValueError(f"variants has the label {label!r}; allowed: a non-empty name other than a backend's, "
                             "without commas or ' (A/A)'")
    cmp = Comparison(spec=spec, backends=[spec.backend, *variants], rounds=rounds, kind=kind, rule=rule,
                     variants={label: preflight(v) for label, v in variants.items()})
    store = store or Store()
    cmp.between = earlier_spreads(store, cmp)
    with _session(cmp, store, stop) as session:
        _play(cmp, session, observer, store)
    return cmp


def earlier_spreads(store: Store, cmp: Comparison, days: float = 30.0,
                    limit: int = 20) -> dict[str, tuple[float, int]]:
    """Per compared label: (τ, k), the spread of its speedup between the ``limit`` newest earlier comparisons of the
    same kind and spec on this host in the last ``days`` (k of them, ``MIN_EARLIER`` at least), from their stored
    per-round median steps (``interval.between_spread``). Empty where there are too few."""
    rows = store.query(
        "SELECT r.comparison_id, r.round, r.backend, r.label, r.median_step_s FROM runs r JOIN comparisons c "
        "ON r.comparison_id = c.comparison_id WHERE c.comparison_id IN (SELECT comparison_id FROM comparisons "
        "WHERE kind = :kind AND status = 'done' AND spec_json = :spec AND created > :since "
        "ORDER BY comparison_id DESC LIMIT :limit) AND r.status = 'ok' AND r.host = :host AND r.median_step_s > 0",
        {"kind": cmp.kind, "spec": cmp.spec.to_json(), "since": time.time() - days * 86400, "limit": limit,
         "host": socket.gethostname()})
    steps: dict[tuple[int, int, str], float] = {}
    for r in rows.itertuples():
        name = r.label or r.backend   # a job's label is stored only for an A/A twin
        steps[(int(r.comparison_id), int(r.round), name)] = float(r.median_step_s)
    out = {}
    for label in cmp.backends[1:]:
        earlier: dict[int, list[float]] = {}
        for (cid, rnd, name), step in steps.items():
            native = steps.get((cid, rnd, cmp.backends[0]))
            if name == label and native:
                earlier.setdefault(cid, []).append(math.log(native / step))
        tau = between_spread(list(earlier.values()))
        if tau is not None:
            out[label] = (tau, len(earlier))
    return out


def _prepared(spec: JobSpec, backends: Sequence[str], rounds: int | None, kind: str,
              rule: RoundsRule | None = None) -> Comparison:
    """The checked comparison, its spec preflighted (once, before the comparison is stored or any job starts)."""
    backends = list(backends)
    rounds = rule.pilot if rule is not None else rounds
    _check(spec, backends, rounds)
    spec = preflight(spec)
    labels = [spec.backend, *[aa_label(b) if b == spec.backend else b for b in dict.fromkeys(backends)]]
    return Comparison(spec=spec, backends=labels, rounds=rounds, kind=kind, rule=rule)


def _session(cmp: Comparison, store: Store,
             stop: threading.Event | None) -> AbstractContextManager[ComparisonSession]:
    """The comparison's row: any error leaves it ``interrupted`` with the summary measured until then."""
    info = {} if cmp.rule is None else {"rule": dataclasses.asdict(cmp.rule)}
    return comparison_session(store, cmp.kind, cmp.spec, cmp.backends, cmp.rounds, info, stop,
                              error_status="interrupted")


def _play(cmp: Comparison, session: ComparisonSession, observer: Observer | None, store: Store) -> None:
    """Every round of the comparison, alternating the order, until its rule says stop; the row's info is its
    summary (and, for adaptive rounds, the rule, the rounds that ran and why they stopped)."""
    cmp.comparison_id, cmp.created = session.comparison_id, time.time()
    session.info_at_finish = lambda: {"summary": json.loads(cmp.summary().to_json(orient="records")),
                                      **({} if cmp.rule is None else {"rule": dataclasses.asdict(cmp.rule),
                                                                      "stop_reason": cmp.stop_reason}),
                                      **({"between": cmp.between} if cmp.between else {})}
    labels, started = cmp.backends, time.monotonic()
    rnd = 0
    while not session.stopped:
        reason = _stop_reason(cmp, rnd, time.monotonic() - started)
        if reason:
            cmp.stop_reason = reason
            break
        for label in (labels if rnd % 2 == 0 else labels[::-1]):
            if session.stopped:
                break
            cmp.results.append(run(cmp.spec_for(label), observer, session.stop, store, cmp.comparison_id, rnd,
                                   f"{label}#{rnd}", label=label if label.endswith(AA) or label in cmp.variants else ""))
        rnd += 1
        if cmp.rule is not None:
            cmp.rounds = session.rounds = rnd
    if session.stopped:
        cmp.stop_reason = "stopped by the user"


def _stop_reason(cmp: Comparison, done: int, elapsed_s: float) -> str:
    """Why no further round starts ("" to run one more): the fixed count, or the adaptive rule — the resolution
    reached, the budget (a round is not started when the rounds so far say it would end past it; never before two
    rounds), the maximum, or a
    job that cannot run (failed, out of memory, unavailable: another round would end the same way)."""
    rule = cmp.rule
    if rule is None:
        return "all rounds ran" if done >= cmp.rounds else ""
    broken = [r for r in cmp.results if r.status in ("failed", "oom", "unavailable", "diverged")]
    if broken:
        return f"{broken[0].name} round {broken[0].round} ended {broken[0].status}"
    if done and cmp.resolved():
        return f"resolution reached: every interval within ±{rule.resolve:.0%} after {done} rounds"
    moving = [label for label in cmp.backends[1:] if not rule.reachable(cmp._tau(label))]
    if moving and done >= rule.pilot:
        tau, k = cmp.between[moving[0]]
        return (f"the speedup of {moving[0]} moved ±{math.expm1(tau):.1%} between {k} earlier comparisons on this "
                f"machine: more rounds now cannot resolve ±{rule.resolve:.0%}")
    if done >= rule.max_rounds:
        return f"max_rounds={rule.max_rounds} reached"
    # a single round says nothing about the spread between processes: the budget ends the rounds after two at the
    # earliest (a first round's cold compile would otherwise leave "0.91× (single round)" as the answer)
    if rule.budget_s is not None and done >= 2 and elapsed_s + elapsed_s / done > rule.budget_s:
        return (f"budget spent: {elapsed_s:.0f} s of budget_s={rule.budget_s:g} s ran {done} rounds, and another "
                f"would end past it")
    return ""


def compare_script(script: str, args: Sequence[str] = (), backends: Sequence[str] = ("inductor",),
                   rounds: int | None = DEFAULT_ROUNDS, observer: Observer | None = None,
                   stop: threading.Event | None = None, store: Store | None = None, resolve: float | None = None,
                   budget_s: float | None = None, **spec_fields: Any) -> Comparison:
    """Run ``python script *args`` natively (eager) and with each backend in ``backends``, ``rounds``
    alternating rounds, each job in its own process; the same ``Comparison`` as ``compare``. A script's rounds are
    fixed (3) unless ``resolve`` / ``budget_s`` ask for adaptive rounds as ``compare`` has them.

    ``spec_fields`` are JobSpec fields: ``steps`` (the cap the script is measured for), ``warmup_steps``,
    ``loss_every``, ``threads``, ``batch_size`` / ``seq_len`` (only used when the script does not report its
    batch), ``model`` (the name the runs are shown under; default the script's file name), ``stall_s``, ...
    A missing script, one that is not a ``.py`` file or arguments that are not a list of strings are a
    ``SpecError`` naming ``script`` / ``script_args`` before any process starts.
    """
    spec = JobSpec(script=script, script_args=args, **spec_fields)
    if resolve is not None or budget_s is not None:
        rounds = None if rounds == DEFAULT_ROUNDS else rounds
    return compare(spec, backends=backends, rounds=rounds, observer=observer, stop=stop, store=store, resolve=resolve,
                   budget_s=budget_s)


def load_comparison(comparison_id: int, store: Store | None = None) -> Comparison:
    """Rebuild a stored comparison (figures, steps and environment from the store, no rerun)."""
    from tcbench.store.history import result_from_row

    store = store or Store(create=False)   # reading never creates a store
    row = store.comparison_row(comparison_id)
    info = json.loads(row.get("info_json") or "{}")
    rule = RoundsRule(**info["rule"]) if isinstance(info.get("rule"), dict) else None
    cmp = Comparison(spec=JobSpec.from_stored(row["spec_json"]), backends=row["backends"].split(","),
                     rounds=int(row["rounds"]), comparison_id=int(comparison_id), kind=row["kind"] or "compare",
                     rule=rule, stop_reason=str(info.get("stop_reason") or ""),
                     between={k: (float(v[0]), int(v[1])) for k, v in (info.get("between") or {}).items()},
                     created=None if row.get("created") is None else float(row["created"]))
    for _, r in store.comparison_runs(comparison_id).iterrows():
        cmp.results.append(result_from_row(r.to_dict(), store))
    cmp.variants = {r.label: r.spec for r in cmp.results if r.label and not r.label.endswith(AA)}
    return cmp


@dataclass
class NoiseFloor:
    """The smallest speedup this machine can currently resolve for a spec, from an A/A comparison.

    ``resolvable``: a compiled job must be at least this many times faster (or 1/this slower) for the
    95 % interval to exclude 1 under the noise measured now; ``verdict_kind`` must be
    "no measurable difference" on a machine that measures honestly.
    """

    comparison: Comparison
    speedup: float | None
    low: float | None
    high: float | None
    verdict_kind: str
    verdict: str

    @property
    def resolvable(self) -> float | None:
        if self.low is None or self.high is None:
            return None
        return max(self.high, 1 / self.low)

    def summary(self) -> dict[str, Any]:
        return dict(comparison_id=self.comparison.comparison_id, backend=self.comparison.spec.backend,
                    rounds=self.comparison.rounds, speedup=self.speedup, speedup_ci_low=self.low,
                    speedup_ci_high=self.high, resolvable=self.resolvable, verdict_kind=self.verdict_kind,
                    verdict=self.verdict)

    def __repr__(self) -> str:
        res = "unknown" if self.resolvable is None else f"{self.resolvable:.3f}×"
        return f"NoiseFloor(resolvable={res}, verdict_kind={self.verdict_kind!r}, comparison_id={self.comparison.comparison_id})"


def noise_floor(spec: JobSpec, rounds: int = DEFAULT_ROUNDS, observer: Observer | None = None,
                stop: threading.Event | None = None, store: Store | None = None) -> NoiseFloor:
    """Run ``spec`` against itself (A/A, ``rounds`` rounds) and report the smallest speedup resolvable now."""
    store = store or Store()
    cmp = _prepared(spec, [spec.backend], rounds, "noise-floor")
    with _session(cmp, store, stop) as session:
        _play(cmp, session, observer, store)
        row = cmp.row(cmp.backends[1])
        nf = NoiseFloor(cmp, row.speedup, row.speedup_ci_low, row.speedup_ci_high, row.verdict_kind, row.verdict)
        session.info_at_finish = None   # measured to the end: the row keeps the noise floor, not the summary
        session.finish_info = {"noise_floor": nf.summary()}
    return nf


def latest_noise_floor(spec: JobSpec, store: Store | None = None) -> dict[str, Any] | None:
    """The newest stored noise floor for the same model, size, batch, sequence, precision and threads (or None)."""
    try:
        store = store or Store(create=False)   # reading never creates a store
    except StoreMissing:
        return None   # nothing measured yet
    df = store.query("SELECT spec_json, info_json, created FROM comparisons WHERE kind='noise-floor' "
                     "AND status='done' ORDER BY comparison_id DESC")
    keys = ("model", "size", "backend", "batch_size", "seq_len", "precision", "threads")
    for row in df.itertuples():
        other = json.loads(row.spec_json)
        if all(other.get(k) == getattr(spec, k) for k in keys):
            info = json.loads(row.info_json or "{}").get("noise_floor")
            if info:
                return {**info, "created": row.created}
    return None
