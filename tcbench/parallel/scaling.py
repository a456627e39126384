"""Measured data-parallel scaling: the same job at 1, 2, … processes on this machine, in alternating rounds.

Scaling factor (the reference chapter's definition) = throughput of n processes ÷ (n × throughput of one). With the
same batch per process, n processes take n× the samples per step, so the factor is the step-time ratio
t(1) ÷ t(n): its 95 % interval is computed as every speedup's (``tcbench.measure.interval.ratio_interval``: a
t-interval over rounds), and a disturbed job makes the answer "inconclusive". Beside it: the all-reduce bytes
and milliseconds per step, its share of the step (compute / communication split), and — with ``parity=True`` —
loss parity against one process at the same global batch (batch_size × n in one process).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any, Sequence

import pandas as pd

from tcbench.core.events import Observer
from tcbench.comparison import median_of as med
from tcbench.measure.interval import ratio_interval
from tcbench.measure.metrics import fmt_ratio, loss_parity, steady
from tcbench.runner.preflight import check as preflight
from tcbench.runner.session import comparison_session
from tcbench.core.results import JobResult
from tcbench.core.spec import JobSpec, SpecError
from tcbench.store.api import Store
from tcbench.store.history import result_from_row
from tcbench.view.plots import LAYOUT

COLUMNS = ["nproc", "global_batch", "ok_runs", "median_step_ms", "samples_s", "scaling_factor", "ci_low", "ci_high",
           "allreduce_mib", "allreduce_ms", "comm_share", "parity", "parity_note", "verdict"]


@dataclass
class ScalingResult:
    """What :func:`scaling` measured: every run, and the table derived from them."""

    spec: JobSpec
    nprocs: tuple
    rounds: int
    results: list = field(default_factory=list)          # JobResult per (round, nproc)
    parity_runs: dict = field(default_factory=dict)      # nproc -> JobResult of one process at the same global batch
    comparison_id: int | None = None

    def _runs(self, n: int) -> list[JobResult]:
        return [r for r in self.results if r.spec.nproc == n]

    def _row(self, n: int) -> dict:
        runs, base = self._runs(n), self._runs(self.nprocs[0])
        ok = [r for r in runs if r.ok and r.figures.median_step_s]
        pairs = [([s.step_s for s in steady(b.records)], [s.step_s for s in steady(r.records)])
                 for b, r in zip(base, runs) if b.ok and r.ok]
        # same batch per process: throughput(n) ÷ ((n/first) × throughput(first)) = t(first) ÷ t(n)
        factor, low, high = ratio_interval(pairs) if n != self.nprocs[0] else (1.0, None, None)
        ar = [r.extra.allreduce for r in ok]
        parity, note = None, ""
        if n in self.parity_runs and ok:
            one = self.parity_runs[n]
            # the last windows only: rank 0 logs the loss of its own shard's batch, not the one process's batch
            parity, _, note = (loss_parity(one.records, ok[0].records, self.spec.precision)
                               if one.ok else (None, None, one.error))
        return dict(nproc=n, global_batch=self.spec.batch_size * n, ok_runs=f"{len(ok)}/{len(runs)}",
                    median_step_ms=med([r.figures.median_step_s * 1e3 for r in ok]),
                    samples_s=med([r.figures.samples_s for r in ok]), scaling_factor=factor, ci_low=low, ci_high=high,
                    allreduce_mib=med([a.bytes_per_step / 2**20 if a else None for a in ar]),
                    allreduce_ms=med([a.ms_median if a else None for a in ar]),
                    comm_share=med([a.share_of_step if a else None for a in ar]), parity=parity, parity_note=note,
                    verdict=self._verdict(n, runs, factor, low, high))

    def _verdict(self, n: int, runs: list, factor: Any, low: Any, high: Any) -> str:
        if n == self.nprocs[0]:
            return "baseline"
        failed = [r for r in runs + self._runs(self.nprocs[0]) if not r.ok]
        noisy = [r for r in runs + self._runs(self.nprocs[0]) if r.ok and r.figures.noisy]
        if failed:
            return f"inconclusive: a run ended {failed[0].status} ({failed[0].error[:120]})"
        if factor is None or low is None:
            return "inconclusive: no steady steps to compare"
        ci = f"{fmt_ratio(factor)} (95 % interval {fmt_ratio(low)}–{fmt_ratio(high)})"
        if noisy:
            return f"inconclusive: a job was disturbed ({noisy[0].figures.noise_reason}); measured {ci}"
        slower = high < self.nprocs[0] / n   # the whole job's throughput fell below the baseline's
        return f"scaling factor {ci}" + (f" — {n} processes are slower than {self.nprocs[0]}" if slower else "")

    def table(self) -> pd.DataFrame:
        """One row per process count: global batch, step time, throughput, scaling factor with its interval,
        all-reduce MiB and ms per step, its share of the step, loss parity and the verdict."""
        return pd.DataFrame([self._row(n) for n in self.nprocs], columns=COLUMNS)

    def describe(self) -> str:
        rows = self.table().to_dict("records")
        parts = [f"{r['nproc']} processes (global batch {r['global_batch']}): {r['verdict']}" for r in rows[1:]]
        return (f"Data-parallel scaling of {self.spec.model} ({self.spec.size}, batch {self.spec.batch_size} per "
                f"process, {self.spec.backend}) against {self.nprocs[0]} process(es), {self.rounds} rounds: "
                + "; ".join(parts) + ".")

    def plot(self) -> Any:
        """Scaling factor per process count with its interval, and the ideal (1.0)."""
        import plotly.graph_objects as go

        t = self.table()
        fig = go.Figure(layout={**LAYOUT, "title": "Measured scaling factor (throughput n ÷ (n × throughput 1))",
                                "xaxis_title": "processes", "yaxis_title": "scaling factor"})
        err = dict(type="data", symmetric=False, array=(t.ci_high - t.scaling_factor).fillna(0),
                   arrayminus=(t.scaling_factor - t.ci_low).fillna(0))
        fig.add_scatter(x=t.nproc, y=t.scaling_factor, mode="lines+markers", name="measured", error_y=err)
        fig.add_scatter(x=t.nproc, y=[1.0] * len(t), mode="lines", name="ideal", line=dict(dash="dot", color="grey"))
        return fig


def _check(nprocs: Sequence[int], rounds: Any) -> tuple:
    values = tuple(nprocs)
    if (len(values) < 2 or len(set(values)) != len(values)
            or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in values)):
        raise SpecError("nprocs", list(values), "two or more different whole numbers >= 1, e.g. [1, 2]")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise SpecError("rounds", rounds, "a whole number >= 1")
    return values


def scaling(spec: JobSpec, nprocs: Sequence[int] = (1, 2), rounds: int = 3, parity: bool = True,
            observer: Observer | None = None, stop: threading.Event | None = None,
            store: Store | None = None) -> ScalingResult:
    """Run ``spec`` at each process count in ``nprocs`` (``batch_size`` per process), ``rounds`` alternating
    rounds, and measure the scaling factor against the first count (see the module docstring). ``parity``: also
    run one process at each larger global batch once, for loss parity."""
    from tcbench.runner.process import run

    counts = _check(nprocs, rounds)
    if spec.nnodes != 1:
        raise SpecError("nnodes", spec.nnodes, "1 (tc.scaling measures process counts on this machine; a job over "
                        "several machines runs with tc.run on each, and tc.project_scaling estimates more nodes)")
    for n in counts:   # every process count is checked before any job starts (cores, XLA on CPU, ...)
        preflight(spec.replace(nproc=n))
    store = store or Store()
    result = ScalingResult(spec=spec, nprocs=counts, rounds=rounds)
    with comparison_session(store, "scaling", spec, [f"nproc={n}" for n in counts], rounds, {"nprocs": list(counts)},
                            stop, error_status="interrupted") as session:
        result.comparison_id = session.comparison_id
        session.info_at_finish = lambda: {"summary": json.loads(result.table().to_json(orient="records"))}
        for rnd in range(rounds):
            for n in (counts if rnd % 2 == 0 else counts[::-1]):
                if session.stopped:
                    break
                result.results.append(run(spec.replace(nproc=n), observer, stop, store, result.comparison_id, rnd,
                                          f"nproc={n}#{rnd}", label=f"nproc={n}"))
        for n in counts[1:] if parity else ():
            if not session.stopped:
                one = spec.replace(nproc=1, batch_size=spec.batch_size * n)
                result.parity_runs[n] = run(one, observer, stop, store, result.comparison_id, 0,
                                            f"one process at {one.batch_size}",
                                            label=f"1 process, batch {one.batch_size}")
    return result


def load_scaling(comparison_id: int, store: Store | None = None) -> ScalingResult:
    """Rebuild a stored ``scaling`` measurement (its runs, steps and parity runs from the store; nothing rerun)."""

    store = store or Store(create=False)   # reading never creates a store
    row = store.comparison_row(comparison_id)
    if row["kind"] != "scaling":
        raise ValueError(f"comparison_id={comparison_id!r} is a {row['kind']!r} comparison; allowed: the id of a "
                         "tc.scaling measurement (kind 'scaling')")
    spec = JobSpec.from_stored(row["spec_json"])
    counts = tuple(int(b.split("=", 1)[1]) for b in store.comparison_labels(comparison_id))
    result = ScalingResult(spec=spec, nprocs=counts, rounds=int(row["rounds"]), comparison_id=int(comparison_id))
    for _, r in store.comparison_runs(comparison_id).iterrows():
        res = result_from_row(r.to_dict(), store)
        if res.spec.nproc == 1 and res.spec.batch_size != spec.batch_size:   # one process at a larger global batch
            result.parity_runs[res.spec.batch_size // spec.batch_size] = res
        else:
            result.results.append(res)
    return result
