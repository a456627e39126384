"""The speedup's 95 % interval, and the rounds an asked resolution needs.

**The unit is the round.** A round runs the native job and the compiled job back to back, each in its own process,
and gives one log ratio ``r = log(median native step ÷ median compiled step)``. Process-to-process spread (the same
job lands ±5 % apart from one process to the next here) dwarfs the step-to-step spread inside a job, and the steps
of one process are not independent, so only the spread between rounds says how far the next round may land.

- **n ≥ 2 rounds** (a fixed number): the t-interval on the per-round log ratios,
  ``exp(mean r ± t(0.975, n−1)·s/√n)``; exact for normally distributed log ratios, whatever the number of rounds.
  Measured coverage: tests/measure/test_interval.py simulates 1,000 comparisons of a job with itself, with a
  between-round effect; benchmarks/trust.py runs real ones, quiet and beside a bursty busy process.
- **Adaptive rounds** (``compare(resolve=0.05)``): Stein's two-stage procedure (C. Stein, "A two-sample test for a
  linear hypothesis whose power is independent of the variance", Ann. Math. Statist. 16 (1945) 243–258). The first
  ``pilot`` rounds give the spread ``s0``; rounds are added until the interval's half-width is within the asked
  resolution, the interval being the wider of Stein's ``mean ± t(0.975, pilot−1)·s0/√n`` and the plain t-interval
  over all ``n`` rounds. Stein's half-width depends on the pilot's spread only, never on where the ratio lies, so
  stopping on it keeps the coverage (the mean of normal data is independent of its sample variance); the plain
  t-interval guards against a machine that turned noisier after the pilot. A plain "stop when the t-interval is
  narrow enough" (Chow–Robbins) stops on lucky small spreads and covered only 90–93 % in the same simulation.
- **One round**: nothing is known about the spread between processes; the interval is a percentile bootstrap of the
  round's steps (step-to-step spread only), and the verdict says "single round".

**The spread between comparisons.** On a shared machine the speedup itself moves with the machine's state over
minutes (another tenant on the same physical core changes eager's and Inductor's step differently): measured here,
nine comparisons of the same pair over 25 minutes had per-comparison speedups from 0.92× to 1.16×, each with a
within-comparison standard error of about 1.4 % but a spread between them of τ ≈ 6 % (benchmarks/trust.md). One
comparison's rounds, all inside a minute, cannot see that spread. So when the store holds ``MIN_EARLIER`` or more
earlier comparisons of the same spec and pair on this host, ``between_spread`` estimates τ (the DerSimonian–Laird
random-effects estimator: R. DerSimonian, N. Laird, "Meta-analysis in clinical trials", Controlled Clinical Trials 7
(1986) 177–188) and the interval is for the speedup on this machine, not in this minute:
``mean r ± t(0.975, n−1)·√(s²/n + τ²)`` (with Stein's half-width in place of ``t·s/√n`` under adaptive rounds).
When ``t·τ`` alone is wider than the asked resolution, more rounds now cannot reach it, and adaptive rounds stop
after the pilot and say so.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
MIN_EARLIER = 3             # earlier comparisons needed to estimate the spread between comparisons
PILOT_ROUNDS = 4            # the first stage of adaptive rounds: t(0.975, 3) = 3.18 (with 3 rounds, 4.30)
N_BOOT = 2000               # one round: bootstrap resamples of its steps

Interval = tuple[float | None, float | None, float | None]   # (point, low, high)


def _t(df: int) -> float:
    return float(stats.t.ppf(1 - (1 - CONFIDENCE) / 2, df))


def log_ratios(pairs: Sequence[tuple[Sequence[float], Sequence[float]]]) -> list[float]:
    """Per round: log(median of the first job's steps ÷ median of the second's); rounds with no steps are left out."""
    return [math.log(float(np.median(a)) / float(np.median(b))) for a, b in pairs if len(a) and len(b)]


def half_width(logs: Sequence[float], pilot: int | None = None, tau: float | None = None) -> float | None:
    """The interval's half-width in log units: the t-interval's, or with ``pilot`` (adaptive rounds) the wider of
    Stein's (the first ``pilot`` rounds' spread) and the t-interval's; with ``tau`` (the spread between comparisons,
    ``between_spread``) widened to ``√(hw² + (t·τ)²)``. None below two rounds."""
    n = len(logs)
    if n < 2:
        return None
    hw = _t(n - 1) * statistics.stdev(logs) / math.sqrt(n)
    if pilot is not None and n >= pilot >= 2:
        hw = max(hw, _t(pilot - 1) * statistics.stdev(logs[:pilot]) / math.sqrt(n))
    return math.hypot(hw, _t(n - 1) * tau) if tau else hw


def between_spread(earlier: Sequence[Sequence[float]]) -> float | None:
    """τ in log units: how far the speedup itself moves between comparisons on this machine, from earlier
    comparisons' per-round log ratios (those with two rounds or more); the DerSimonian–Laird estimate (see the
    module docstring). None with fewer than ``MIN_EARLIER`` comparisons."""
    est = [(statistics.fmean(logs), statistics.variance(logs) / len(logs)) for logs in earlier if len(logs) >= 2]
    est = [(m, v) for m, v in est if v > 0]
    if len(est) < MIN_EARLIER:
        return None
    w = [1 / v for _, v in est]
    sw = sum(w)
    mean = sum(wi * m for wi, (m, _) in zip(w, est)) / sw
    q = sum(wi * (m - mean) ** 2 for wi, (m, _) in zip(w, est))
    return math.sqrt(max(0.0, (q - (len(est) - 1)) / (sw - sum(wi * wi for wi in w) / sw)))


def log_interval(logs: Sequence[float], pilot: int | None = None, tau: float | None = None) -> Interval:
    """(point, low, high) as ratios, from per-round log ratios (see the module docstring)."""
    if not logs:
        return None, None, None
    mean = statistics.fmean(logs)
    hw = half_width(logs, pilot, tau)
    if hw is None:
        return math.exp(mean), None, None
    return math.exp(mean), math.exp(mean - hw), math.exp(mean + hw)


def _one_round(a: Sequence[float], b: Sequence[float], seed: int = 0) -> Interval:
    """A single round: the percentile bootstrap of its steps' median ratio (step-to-step spread only)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    rng = np.random.default_rng(seed)
    ma = np.median(rng.choice(a, size=(N_BOOT, len(a))), axis=1)
    mb = np.median(rng.choice(b, size=(N_BOOT, len(b))), axis=1)
    alpha = (1 - CONFIDENCE) / 2
    ratio = ma / mb
    return float(np.median(a) / np.median(b)), float(np.quantile(ratio, alpha)), float(np.quantile(ratio, 1 - alpha))


def ratio_interval(pairs: Sequence[tuple[Sequence[float], Sequence[float]]], pilot: int | None = None,
                   tau: float | None = None) -> Interval:
    """(point, low, high) of native ÷ compiled from per-round steady step times (jobs paired by round).

    Point: the geometric mean over rounds of the per-round median ratios. Interval: the t-interval over rounds (with
    ``pilot``: the adaptive rounds' two-stage interval; with ``tau``: widened by the spread between comparisons); a
    single round's from its steps (module docstring).
    """
    pairs = [(a, b) for a, b in pairs if len(a) and len(b)]
    if len(pairs) == 1:
        return _one_round(*pairs[0])
    return log_interval(log_ratios(pairs), pilot, tau)


def value_interval(values: Sequence[float | None]) -> Interval:
    """(geometric mean, low, high) of per-round ratios (e.g. memory): the t-interval on their logs; no interval from
    a single round."""
    vals = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    return log_interval([math.log(v) for v in vals])


def resolution(point: float | None, low: float | None, high: float | None) -> float | None:
    """The relative difference the interval resolves: max(high ÷ point, point ÷ low) − 1 (0.05 is ±5 %)."""
    if not point or not low or not high:
        return None
    return max(high / point, point / low) - 1


@dataclass(frozen=True)
class RoundsRule:
    """When adaptive rounds stop: the asked ``resolve`` (0.05: a half-width of ±5 %), ``pilot`` rounds at least,
    ``max_rounds`` at most, and the wall-clock ``budget_s`` (None: no budget)."""

    resolve: float
    budget_s: float | None = None
    pilot: int = PILOT_ROUNDS
    max_rounds: int = 30

    def resolved(self, logs: Sequence[float], tau: float | None = None) -> bool:
        """Whether the interval over these rounds is within the asked resolution (never before the pilot is done)."""
        hw = half_width(logs, self.pilot, tau) if len(logs) >= self.pilot else None
        return hw is not None and math.exp(hw) - 1 <= self.resolve

    def reachable(self, tau: float | None) -> bool:
        """Whether rounds can still reach the resolution with this spread between comparisons (``t·τ`` alone, at
        ``max_rounds``, within it)."""
        return not tau or math.exp(_t(self.max_rounds - 1) * tau) - 1 <= self.resolve

    def rounds_needed(self, logs: Sequence[float]) -> int | None:
        """Stein's planned total after the pilot, or None before the pilot is done:
        max(pilot, ⌈(t(0.975, pilot−1)·s0 ÷ log(1+resolve))²⌉)."""
        if len(logs) < self.pilot:
            return None
        s0 = statistics.stdev(logs[:self.pilot])
        return max(self.pilot, math.ceil((_t(self.pilot - 1) * s0 / math.log1p(self.resolve)) ** 2))
