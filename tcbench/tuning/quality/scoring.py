"""How a candidate's runs toward a target quality are scored, as MLPerf Training scores a benchmark's runs.

- **Time to target** of one run: the first held-out evaluation at or below the target (``first_at``), its wall time
  from the first training step with the compile included (loading the model and data is not, as MLPerf leaves
  initialisation untimed) and the evaluations' own time left out, and the samples and steps
  it took. A run that never gets there within its budget "did not converge" (None) and is kept.
- **The score** over seeds (``olympic``): drop the fastest and the slowest run, average the rest. One run that did not
  converge counts as the slowest (and is dropped); two or more invalidate the candidate. Fewer than three runs
  cannot be scored.
- **Against the reference** (``paired_ratio``): per seed, log(reference's time ÷ candidate's time) (the same seed
  starts from the same initialisation and data order), the t-interval over the seeds both reached the target
  (``tcbench.measure.interval.log_interval``): above 1, the candidate gets there sooner. The same for samples to
  target says whether a bigger batch needs more samples (MLPerf's reference convergence points, turned the other
  way).

MLPerf Training rules, "Benchmark Results": https://github.com/mlcommons/training_policies (training_rules.adoc).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Mapping, Sequence

from tcbench.core.extras import EvalPoint
from tcbench.measure.interval import Interval, log_interval

MIN_RUNS = 3   # the olympic mean drops two runs: three is the fewest that leaves one


def first_at(points: Sequence[EvalPoint], target: float) -> EvalPoint | None:
    """The first evaluation at or below ``target`` (None: the run did not get there)."""
    return next((p for p in points if math.isfinite(p.loss) and p.loss <= target), None)


@dataclass(frozen=True)
class Score:
    """A candidate's olympic mean over its runs (``value`` None when it cannot be scored, ``reason`` says why),
    from ``used`` runs, with ``not_converged`` runs that never reached the target."""

    value: float | None
    used: int
    not_converged: int
    reason: str = ""

    @property
    def valid(self) -> bool:
        return self.value is not None


def olympic(values: Sequence[float | None]) -> Score:
    """MLPerf's score: the mean of the runs left when the fastest and the slowest are dropped; one run that did not
    converge (None) is the slowest, two invalidate the candidate."""
    done = sorted(v for v in values if v is not None)
    missing = len(values) - len(done)
    if len(values) < MIN_RUNS:
        return Score(None, 0, missing, f"{len(values)} run(s): the score needs at least {MIN_RUNS}")
    if missing >= 2:
        return Score(None, 0, missing, f"{missing} of {len(values)} runs did not reach the target (one is allowed)")
    kept = done[1:] if missing else done[1:-1]   # a run that did not converge is the slowest, and is dropped
    return Score(statistics.fmean(kept), len(kept), missing)


@dataclass(frozen=True)
class PairedRatio:
    """reference ÷ candidate over the seeds both runs reached the target: the geometric mean with its 95 % interval
    (``low``/``high`` None with fewer than two seeds), from ``seeds`` pairs."""

    point: float | None
    low: float | None
    high: float | None
    seeds: int

    @classmethod
    def of(cls, interval: Interval, seeds: int) -> "PairedRatio":
        return cls(*interval, seeds=seeds)


def paired_ratio(reference: Mapping[int, float | None], candidate: Mapping[int, float | None]) -> PairedRatio:
    """Per seed log(reference ÷ candidate), the t-interval over the seeds where both have a value."""
    logs = [math.log(reference[s] / candidate[s]) for s in sorted(reference)
            if s in candidate and reference[s] and candidate[s]]
    return PairedRatio.of(log_interval(logs), len(logs))
