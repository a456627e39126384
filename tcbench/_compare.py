"""compare(): the native job and each compiled job, as separate processes, summarised side by side."""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import threading
from dataclasses import dataclass, field
from typing import Any, Sequence

import pandas as pd

from ._metrics import break_even_steps, loss_parity, warnings_for
from ._results import JobResult, StepRecord
from ._runner import Observer, run
from ._spec import BACKENDS, JobSpec
from ._store import Store


def _median(values: Sequence[float]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


@dataclass
class Comparison:
    """A native job and its compiled counterparts (several rounds each when rounds > 1)."""

    spec: JobSpec
    backends: list[str]
    results: list[JobResult] = field(default_factory=list)
    rounds: int = 1
    comparison_id: int | None = None
    rounds_of: list[int] = field(default_factory=list)

    def by_backend(self, backend: str) -> list[JobResult]:
        return [r for r in self.results if r.spec.backend == backend]

    @property
    def native(self) -> list[JobResult]:
        return self.by_backend(self.spec.backend)

    def _round_ratios(self, backend: str, attr: str) -> list[float]:
        out = []
        for i, (a, b) in enumerate(zip(self.native, self.by_backend(backend))):
            x, y = getattr(a, attr), getattr(b, attr)
            if x and y and a.ok and b.ok:
                out.append(x / y)
        return out

    def _row(self, backend: str) -> dict[str, Any]:
        jobs = self.by_backend(backend)
        oks = [r for r in jobs if r.ok]
        nat = [r for r in self.native if r.ok]
        status = "ok" if len(oks) == len(jobs) and jobs else ", ".join(sorted({r.status for r in jobs})) or "not run"
        med = _median([r.median_step_s for r in oks])
        row: dict[str, Any] = dict(
            backend=backend, status=status, rounds=len(jobs), median_step_ms=None if med is None else med * 1e3,
            samples_s=_median([r.samples_s for r in oks]), tokens_s=_median([r.tokens_s for r in oks]),
            compile_latency_s=_median([r.compile_latency_s for r in oks]),
            cache=",".join(sorted({r.cache_state for r in oks if r.cache_state})),
            peak_mem_mb=None if not oks else _median([r.peak_mem_bytes / 2**20 for r in oks if r.peak_mem_bytes is not None]),
            mfu=_median([r.mfu for r in oks]), final_loss=_median([r.final_loss for r in oks]),
            recompiles=max((r.recompiles_after_warmup or 0 for r in oks), default=None),
            error="; ".join(r.error for r in jobs if r.error)[:500])
        ratios = self._round_ratios(backend, "median_step_s")
        row.update(speedup=_median(ratios), speedup_min=min(ratios, default=None), speedup_max=max(ratios, default=None))
        mem = [a.peak_mem_bytes / b.peak_mem_bytes for a, b in zip(nat, oks) if a.peak_mem_bytes and b.peak_mem_bytes]
        row["memory_ratio"] = _median(mem)
        nat_med = _median([r.median_step_s for r in nat])
        be = break_even_steps(row["compile_latency_s"], nat_med, med) if backend != self.spec.backend else None
        row["break_even_steps"] = be
        parity = [loss_parity(a.records, b.records) for a, b in zip(nat, oks)]
        diffs = [d for _, d in parity if d is not None]
        row["loss_diff"] = _median(diffs)
        row["loss_parity"] = None if not diffs or backend == self.spec.backend else all(p for p, _ in parity if p is not None)
        row["warnings"] = [] if backend == self.spec.backend else warnings_for(
            row["speedup"], row["compile_latency_s"], row["memory_ratio"], row["recompiles"])
        if row["loss_parity"] is False:
            row["warnings"].append(f"loss differs from native by {row['loss_diff']:.3f} (beyond tolerance)")
        row["verdict"] = verdict(backend, row, self.spec.backend)
        return row

    def summary(self) -> pd.DataFrame:
        """One row per backend: step time, throughput, compile latency, memory, speedup, break-even, MFU, parity, warnings."""
        return pd.DataFrame([self._row(b) for b in self.backends])

    def steps(self) -> pd.DataFrame:
        """Every step record of every job (with run_id, backend and round)."""
        frames = []
        for r, rnd in zip(self.results, self.rounds_of or [0] * len(self.results)):
            df = r.steps()
            df.insert(2, "round", rnd)
            frames.append(df)
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def costs(self, profile: str | None = None, dataset_size: int = 100_000) -> pd.DataFrame:
        """$ per 1,000 steps, per epoch of ``dataset_size`` samples and per 1M tokens on ``profile`` (default:
        the spec's), from the measured throughput, and the % saved by compiling (``saved_pct``).

        Measured here and priced at the profile's rate: the ``basis`` column says so.
        """
        from ._cost import cost_table

        s = self.summary()
        rows = s[["backend", "samples_s"]].assign(batch_size=self.spec.batch_size, seq_len=self.spec.seq_len)
        return cost_table(rows, profile or self.spec.profile, dataset_size=dataset_size, baseline=self.spec.backend)

    @property
    def warnings(self) -> list[str]:
        return [f"{row['backend']}: {w}" for _, row in self.summary().iterrows() for w in row["warnings"]]

    def to_json(self) -> str:
        """The spec, the summary and every step, as JSON text."""
        return json.dumps({"comparison_id": self.comparison_id, "spec": self.spec.to_dict(), "backends": self.backends,
                           "rounds": self.rounds, "summary": json.loads(self.summary().to_json(orient="records")),
                           "steps": json.loads(self.steps().to_json(orient="records"))}, indent=1)

    def to_html(self, path: str | None = None) -> str:
        """A self-contained HTML report (plotly inline); written to ``path`` when given."""
        from ._report import comparison_html

        html = comparison_html(self)
        if path:
            with open(path, "w", encoding="utf-8") as f:
                f.write(html)
        return html

    def __repr__(self) -> str:
        return (f"Comparison(id={self.comparison_id}, model={self.spec.model!r}, size={self.spec.size!r}, "
                f"backends={self.backends}, jobs={[r.status for r in self.results]})")


def verdict(backend: str, row: dict[str, Any], native: str) -> str:
    """One plain sentence about a backend's row."""
    if backend == native:
        return "baseline (native PyTorch)"
    if row["status"] != "ok":
        return f"did not finish: {row['status']} — {row['error'][:160]}"
    sp, be = row["speedup"], row["break_even_steps"]
    if sp is None:
        return "no speedup figure (the native job did not finish)"
    if sp < 1.0:
        return f"compiling does not pay here: {sp:.2f}× the native speed, so it never catches up"
    tail = f"; it pays off after {be:.0f} steps" if be is not None and math.isfinite(be) else ""
    return f"{sp:.2f}× faster than native{tail}"


def compare(spec: JobSpec, backends: Sequence[str] = ("inductor",), rounds: int = 1,
            observer: Observer | None = None, stop: threading.Event | None = None,
            store: Store | None = None) -> Comparison:
    """Run ``spec`` natively and with each compiled backend (A B A B ... for rounds > 1)."""
    backends = [b for b in backends if b != spec.backend]
    for b in backends:
        if b not in BACKENDS:
            raise ValueError(f"backends contains {b!r}; allowed: {', '.join(BACKENDS)}")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds={rounds!r} is not allowed; it must be a whole number >= 1")
    store = store or Store()
    order = [spec.backend, *backends]
    cmp = Comparison(spec=spec, backends=order, rounds=rounds)
    cmp.comparison_id = store.insert_comparison("compare", spec, order, rounds, {})
    for rnd in range(rounds):
        for backend in order:
            if stop is not None and stop.is_set():
                break
            job_spec = dataclasses.replace(spec, backend=backend)
            cmp.results.append(run(job_spec, observer, stop, store, cmp.comparison_id, rnd, f"{backend}#{rnd}"))
            cmp.rounds_of.append(rnd)
    status = "interrupted" if stop is not None and stop.is_set() else "done"
    store.finish_comparison(cmp.comparison_id, status, {"summary": json.loads(cmp.summary().to_json(orient="records"))})
    return cmp


def load_comparison(comparison_id: int, store: Store | None = None) -> Comparison:
    """Rebuild a stored comparison (figures and steps from the store, no rerun)."""
    from ._history import result_from_row

    store = store or Store()
    row = store.comparison_row(comparison_id)
    spec = JobSpec.from_json(row["spec_json"])
    runs = store.comparison_runs(comparison_id)
    cmp = Comparison(spec=spec, backends=row["backends"].split(","), rounds=int(row["rounds"]),
                     comparison_id=int(comparison_id))
    for _, r in runs.iterrows():
        cmp.results.append(result_from_row(r.to_dict(), store))
        cmp.rounds_of.append(int(r["round"]))
    return cmp
