"""The results of a comparison: ``Comparison`` (a native job and its compiled counterparts, paired by round; its
figures — one summary row per job label with the speedup's interval, verdict, break-even and warnings — and its
exports: summary, steps, diagnostics, costs, JSON, HTML) and ``NoiseFloor`` (an A/A comparison read as the smallest
speedup the machine resolves now). Nothing here runs a job: ``running`` fills them, ``stored`` rebuilds them."""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Sequence, TypeVar

import pandas as pd

from tcbench.comparison.rounds import DEFAULT_RESOLVE, DEFAULT_ROUNDS
from tcbench.core.results import JobResult, SummaryRow, compile_cache_text, compile_phases_text, standing_for
from tcbench.core.spec import BACKENDS, JobSpec
from tcbench.host.paths import check_output
from tcbench.measure.interval import (EQUIVALENCE_CONFIDENCE, RoundsRule, log_ratios, ratio_interval, resolution,
                                     value_interval)
from tcbench.measure.metrics import (advice, break_even_range, break_even_steps, drift, loss_parity, voided,
                                     steady, verdict, warnings_for)
from tcbench.job.diagnostics import table
from tcbench.core.cost import cost_table
from tcbench.view.report import comparison_html, write_plotlyjs


T = TypeVar("T")
MIN_WARM_ROUNDS = 2   # a cold round is left out of the ratio once this many other rounds are complete (ratio_pairs)


def cold_round(states: dict[int, str], shared: bool) -> int | None:
    """The one round whose job filled the empty shared compile cache while the others loaded it warm (``states``:
    each round's ``cache_state``; ``shared``: the jobs ran with ``cache="shared"``), else None
    (``Comparison.cold_round``)."""
    cold = [rnd for rnd, state in states.items() if state == "cold"]
    return cold[0] if shared and len(cold) == 1 and "warm" in states.values() else None


def without_cold_round(by_round: dict[int, T], cold: int | None) -> list[T]:
    """The rounds' values in their order, the ``cold`` round's left out once ``MIN_WARM_ROUNDS`` others remain (the
    rule ``Comparison.ratio_pairs`` and the stored comparisons' heterogeneity test both read)."""
    kept = [value for rnd, value in by_round.items() if rnd != cold]
    return kept if cold in by_round and len(kept) >= MIN_WARM_ROUNDS else list(by_round.values())


def one_off_compile_s(results: Sequence[Any], together: bool = False) -> float:
    """The seconds of compiling that no later round pays again: each label's first job's compile, when it filled an
    empty cache (``cache_state == "cold"``). The rounds' budget does not count them: on an H200 gpt2 base's cold
    Inductor compile (63 s) spent compare's whole 60 s, and the rule stopped at two rounds, inconclusive at 1.94×
    (0.27-14.3×). ``together``: the jobs ran at once (lock-step), so their compiles overlapped: the longest."""
    return _total([r.compile_latency_s or 0.0 for r in _first_jobs(results).values() if r.cache_state == "cold"],
                  together)


def _first_jobs(results: Sequence[Any]) -> dict[str, Any]:
    """Each label's first job."""
    first: dict[str, Any] = {}
    for r in results:
        first.setdefault(r.label or r.spec.backend, r)
    return first


def first_launch_s(results: Sequence[Any], together: bool = False) -> float:
    """The seconds the first round's jobs waited for their processes: the first launcher of each job environment
    importing torch and transformers (5-10 s each), which later rounds' launchers do beside the running round. The
    rounds' budget does not count them. ``together``: the jobs started at once (lock-step): the longest wait."""
    return _total([r.extra.start_s or 0.0 for r in results if r.round == 0], together)


def _total(seconds: list[float], together: bool) -> float:
    return max(seconds, default=0.0) if together else sum(seconds)


def round_s(results: Sequence[JobResult], together: bool = False) -> float | None:
    """What a round took, as the adaptive rule's budget counts it: the median over rounds of its jobs' wall time
    (summed; the longest for lock-step rounds, ``together``), less the one-off costs no later round pays again
    (``one_off_compile_s``, ``first_launch_s``). None before any job reported its wall time."""
    cold = {id(r) for r in _first_jobs(results).values() if r.cache_state == "cold"}
    by_round: dict[int, list[float]] = {}
    for r in results:
        if r.wall_s is not None:
            compiled = (r.compile_latency_s or 0.0) if id(r) in cold else 0.0
            one_off = compiled + ((r.extra.start_s or 0.0) if r.round == 0 else 0.0)
            by_round.setdefault(r.round, []).append(max(r.wall_s - one_off, 0.0))
    return median_of([_total(s, together) for s in by_round.values()])


def median_of(values: Sequence[Any]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


@dataclass
class Comparison:
    """A native job and its compiled counterparts, ``rounds`` alternating rounds each.

    ``backends`` holds the job labels in order: the native backend first, then each compared backend
    (an A/A twin of the native one is labelled ``"<backend> (A/A)"``). Jobs are paired by round.
    ``rule``: the adaptive rounds' stopping rule (None: a fixed number of rounds); ``stop_reason`` says why the
    rounds ended. ``pairing``: how a round's jobs share the machine (``PAIRINGS``). ``between``: per compared label
    whose speedup moved between earlier comparisons of the same spec
    on this machine beyond their own rounds, that spread (τ in log units) and how many comparisons it comes from
    (``earlier_spreads``): a warning; the interval is this comparison's rounds alone.
    """

    spec: JobSpec
    backends: list[str]
    results: list[JobResult] = field(default_factory=list)
    rounds: int = DEFAULT_ROUNDS
    comparison_id: int | None = None
    kind: str = "compare"
    rule: RoundsRule | None = None
    stop_reason: str = ""
    stop_kind: str = ""   # the same as one of measure.metrics.STOP_KINDS ("" for a comparison stored before it)
    between: dict[str, tuple[float, int]] = field(default_factory=dict)
    created: float | None = None   # when it started (seconds since the epoch)
    # a label that is not a backend's: the spec its jobs run (``compare_configs``: compiled configurations)
    variants: dict[str, JobSpec] = field(default_factory=dict)
    # "sequential": a round's jobs one after the other; "lockstep": alive together, taking turns of a few measured
    # steps on the same CPUs (``tcbench.runner.turns``)
    pairing: str = "sequential"

    def spec_for(self, label: str) -> JobSpec:
        """The spec the jobs labelled ``label`` run: a variant's own, else the comparison's with its backend."""
        return self.variants.get(label) or dataclasses.replace(self.spec, backend=self.backend_of(label))

    def backend_of(self, label: str) -> str:
        """The backend of the jobs labelled ``label``: their spec's, else a variant's, else the backend the label
        stands for (its name or its A/A twin's label)."""
        jobs = self.by_backend(label)
        if jobs:
            return jobs[0].spec.backend
        if label in self.variants:
            return self.variants[label].backend
        return standing_for(BACKENDS).get(label, label)

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
        """The rounds where both jobs ended ok with steady steps (memory, loss parity and compile figures read
        them; the speedup reads ``ratio_pairs``)."""
        return [(a, b) for a, b in self.pairs(label) if a.ok and b.ok and steady(a.records) and steady(b.records)]

    def ratio_pairs(self, label: str) -> list[tuple[JobResult, JobResult]]:
        """The complete rounds the speedup is measured on: all of them, except a round whose compiled job filled the
        empty shared compile cache (``cold_round``), left out once ``MIN_WARM_ROUNDS`` others are complete."""
        return without_cold_round({b.round: (a, b) for a, b in self.complete_pairs(label)}, self.cold_round(label))

    def cold_round(self, label: str) -> int | None:
        """The round whose ``label`` job compiled into the empty shared compile cache (``cache_state == "cold"`` with
        ``cache="shared"``) while the label's other jobs loaded warm; None when there is none. Its steps are not those
        of the warm jobs that every later round runs: on fresh stores its log ratio landed 0.059 below the later
        rounds' on average in 9 sequential demos and 0.064-0.093 below in all 4 lock-step ones (AMD EPYC,
        2026-11-27/28; its native job ran faster), where warm first comparisons' round 0 lay 0.001 (sequential, 13)
        and 0.020 (lock-step, 9) from theirs (benchmarks/first_comparisons_amd.json, lockstep.json). A label whose
        every job compiles cold (``cache="cold"``, or xla, whose jobs each compile) has no such round."""
        jobs = [r for r in self.by_backend(label) if r.ok]
        return cold_round({r.round: r.cache_state for r in jobs}, all(r.spec.cache == "shared" for r in jobs))

    def resolved(self) -> bool:
        """Whether every compared label's interval is narrow enough to decide at the rule's resolution (adaptive
        rounds, ``RoundsRule.resolved``)."""
        return self.rule is not None and all(self.rule.resolved(self._logs(label)) for label in self.backends[1:])

    def next_labels(self) -> list[str]:
        """The labels the next round runs, the baseline first. Fixed rounds: all of them. Adaptive rounds
        (``RoundsRule.running``): a compared label whose interval is within the resolution, or already decided (its
        99.9 % interval excludes 1), sits out while another label is neither. In the demo, xla (0.35×) is decided
        after 3 rounds; its 13 s of each 20 s round then go to the eager/inductor pair, the open question."""
        if self.rule is None:
            return list(self.backends)
        compared = self.backends[1:]
        disturbed = {label for label in compared
                     if any(self.voids(r) for pair in self.ratio_pairs(label) for r in pair)}
        return [self.backends[0], *self.rule.running({label: self._logs(label) for label in compared}, disturbed)]

    def voids(self, job: JobResult) -> bool:
        """Whether ``job``'s disturbance voids its pair's verdict (inconclusive, whatever the interval): a noisy job,
        unless the comparison ran lock-step rounds and the disturbance is one both jobs of a round share
        (``measure.metrics.shared_noise``); that one is a warning, and the interval over rounds counts it."""
        return voided(job.figures, self.pairing)

    def sat_out(self, label: str) -> int:
        """How many of the comparison's rounds ran without ``label`` (``next_labels``); a round the user stopped
        midway is not counted."""
        if self.rule is None:
            return 0
        whole = self.rounds - (self.stop_kind == "stopped")
        return whole - len({r.round for r in self.by_backend(label) if r.round < whole})

    def _logs(self, label: str) -> list[float]:
        return log_ratios([([s.step_s for s in steady(a.records)], [s.step_s for s in steady(b.records)])
                           for a, b in self.ratio_pairs(label)])

    def row(self, label: str) -> SummaryRow:
        """One job label summed over its rounds (the baseline's row has no pair figures)."""
        jobs = self.by_backend(label)
        oks = [r for r in jobs if r.ok]
        status = "ok" if len(oks) == len(jobs) and jobs else ", ".join(sorted({r.status for r in jobs})) or "not run"
        med = median_of([r.median_step_s for r in oks])
        mfus = [r for r in oks if r.mfu is None and r.mfu_note]
        noise = "; ".join(f"round {r.round}: {r.noise_reason}" for r in jobs if r.noisy)
        fields: dict[str, Any] = dict(
            label=label, backend=self.backend_of(label), status=status,
            rounds=len(jobs), median_step_ms=None if med is None else med * 1e3,
            step_cv=median_of([r.step_cv for r in oks]), samples_s=median_of([r.samples_s for r in oks]),
            tokens_s=median_of([r.tokens_s for r in oks]),
            compile_latency_s=median_of([r.compile_latency_s for r in oks]),
            cache=",".join(sorted({r.cache_state for r in oks if r.cache_state})),
            **{name: median_of([getattr(r, name) for r in oks])
               for name in ("compile_dynamo_s", "compile_aot_s", "compile_backend_s")},
            compile_phases=compile_phases_text(oks), compile_cache=compile_cache_text(oks),
            peak_mem_mb=median_of([r.peak_mem_bytes / 2**20 for r in oks if r.peak_mem_bytes is not None]),
            mfu=None if mfus else median_of([r.mfu for r in oks]), mfu_note=mfus[0].mfu_note if mfus else "",
            noisy=any(r.noisy for r in jobs), noise=noise, final_loss=median_of([r.final_loss for r in oks]),
            recompiles=max((r.recompiles_after_warmup or 0 for r in oks), default=None),
            graph_breaks=max((r.graph_breaks or 0 for r in oks), default=None),
            diagnosis=next((d["summary"] for r in jobs if "summary" in (d := r.extra.diagnostics)), ""),
            error="; ".join(r.error for r in jobs if r.error)[:500])
        if label == self.backends[0]:
            text = "baseline (native PyTorch)" + (f"; noisy — {noise}" if fields["noisy"] else "")
            return SummaryRow(**fields, verdict_kind="baseline", verdict=text)
        return SummaryRow(**fields, **self._pair_fields(label, med))

    def _pair_fields(self, label: str, med: float | None) -> dict[str, Any]:
        pairs = self.pairs(label)
        complete, measured = self.complete_pairs(label), self.ratio_pairs(label)
        steps = [([s.step_s for s in steady(a.records)], [s.step_s for s in steady(b.records)]) for a, b in measured]
        pilot = self.rule.pilot if self.rule else None
        sp, lo, hi = ratio_interval(steps, pilot=pilot)
        _, eq_lo, eq_hi = ratio_interval(steps, pilot=pilot, confidence=EQUIVALENCE_CONFIDENCE)
        mem, mem_lo, mem_hi = value_interval([a.peak_mem_bytes / b.peak_mem_bytes for a, b in complete
                                              if a.peak_mem_bytes and b.peak_mem_bytes])
        problems = [f"{r.name} round {r.round} ended {r.status}: "
                    f"{r.error.strip().splitlines()[-1][:160] if r.error else ''}"
                    for a, b in pairs for r in (a, b) if not r.ok]
        if not pairs:
            problems.append("no round ran both jobs")
        noisy = sorted({f"{r.name} round {r.round}: {r.noise_reason}" for a, b in measured for r in (a, b)
                        if self.voids(r)})
        shared = sorted({f"{r.name} round {r.round}: {r.noise_reason}" for a, b in measured for r in (a, b)
                         if r.noisy and not self.voids(r)})
        what_to_do = advice(self.spec.threads, self.rounds, self.rule and self.rule.resolve,
                            self.rule and self.rule.budget_s, self.stop_kind, bool(noisy),
                            self.rule and self.rule.max_rounds,
                            gpu=any(r.device.startswith("cuda") for a, b in pairs for r in (a, b)),
                            round_s=round_s(self.results, self.pairing == "lockstep"),
                            pilot=self.rule and self.rule.pilot)
        kind, text = verdict(sp, lo, hi, noisy, problems, len(measured) or self.rounds, what_to_do,
                             self.rule.resolve if self.rule else DEFAULT_RESOLVE, equivalence=(eq_lo, eq_hi))
        nat_med = median_of([a.median_step_s for a, _ in complete])
        # what compiling adds to the warmup: the compiled job's warmup overhead minus native's own (eager warms up too)
        compile_s = median_of([max(b.compile_latency_s - (a.compile_latency_s or 0.0), 0.0) for a, b in complete
                             if b.compile_latency_s is not None])
        be_lo, be_hi = break_even_range(compile_s, nat_med, lo, hi) if kind == "faster" else (None, None)
        be = {"faster": break_even_steps(compile_s, nat_med, med), "slower": float("inf")}.get(kind)
        if self.sat_out(label):
            text += (f" (from the {self.rounds - self.sat_out(label)} of {self.rounds} rounds it ran: decided or "
                     "resolved early, it sat out the rest while another label was not)")
        if len(measured) < len(complete):
            text += (f" (round {self.cold_round(label)} left out of the ratio: its compiled job filled the empty "
                     "compile cache, and a cold-compiled round's steps are not the warm jobs' of every later round)")
        if kind == "faster" and be_hi is not None and round(be_hi) == 0:   # a variant that compiles no longer
            text += "; it pays off from the first step (no longer a warmup than the baseline's)"
        elif kind == "faster" and be_lo is not None:
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
        if shared:
            warnings.append(f"{len(shared)} of {2 * len(measured)} jobs ran beside other work (e.g. {shared[0]}); "
                            "lock-step rounds gave both jobs of a round the same machine, so the interval counts what "
                            "it moved")
        if label in self.between:
            tau, k = self.between[label]
            warnings.append(f"drift between comparisons: the speedup moved ±{math.expm1(tau):.1%} between {k} "
                            "earlier comparisons of this spec on this machine, more than their own rounds allow; this "
                            "interval holds for the machine as it was during these rounds")
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
        def records(df: pd.DataFrame) -> list:
            return json.loads(df.to_json(orient="records")) if len(df) else []   # NaN -> None

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

        if path:
            check_output(path, "path")   # never over the store, a SQLite file, or into a missing folder
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
        return (f"NoiseFloor(resolvable={res}, verdict_kind={self.verdict_kind!r}, "
                f"comparison_id={self.comparison.comparison_id})")
