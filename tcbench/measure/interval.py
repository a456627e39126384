"""The speedup's 95 % interval (and the 90 % one that equivalence is judged on), and the rounds an asked resolution
needs.

**The unit is the round.** A round runs the native job and the compiled job, each in its own process (taking turns
of a few steps on a CPU, ``tcbench.runner.turns``; back to back on a GPU),
and gives one log ratio ``r = log(native's fast step ÷ compiled's fast step)``. Process-to-process spread (the same
job lands ±5 % apart from one process to the next here) dwarfs the step-to-step spread inside a job, and the steps
of one process are not independent, so only the spread between rounds says how far the next round may land.

- **n ≥ 2 rounds** (a fixed number): the t-interval on the per-round log ratios,
  ``exp(mean r ± t(0.975, n−1)·s/√n)``; exact for normally distributed log ratios, whatever the number of rounds.
  Measured coverage: tests/measure/test_interval.py simulates 1,000 comparisons of a job with itself, with a
  between-round effect; benchmarks/trust.py runs real ones, quiet and beside a bursty busy process.
- **Adaptive rounds** (``compare(resolve=0.05)``): Stein's two-stage procedure (C. Stein, "A two-sample test for a
  linear hypothesis whose power is independent of the variance", Ann. Math. Statist. 16 (1945) 243–258). The first
  ``pilot`` rounds give the spread ``s0``; rounds are added until the interval's half-widths decide the verdict at
  the asked resolution (``RoundsRule.resolved``), the interval being the wider of Stein's
  ``mean ± t(0.975, pilot−1)·s0/√n`` and the plain t-interval over all ``n`` rounds. Stein's half-width depends
  on the pilot's spread only, never on where the ratio lies, so
  stopping on it keeps the coverage (the mean of normal data is independent of its sample variance); the plain
  t-interval guards against a machine that turned noisier after the pilot. A plain "stop when the t-interval is
  narrow enough" (Chow–Robbins) stops on lucky small spreads and covered only 90–93 % in the same simulation.
- **One round**: nothing is known about the spread between processes; the interval is a percentile bootstrap of the
  round's steps (step-to-step spread only), and the verdict says "single round".

**The round that filled the cache** (a backend's first job on a fresh store, which compiled into the empty cache
while every later one loads it warm) is not one of these alike rounds; ``Comparison.ratio_pairs`` leaves it out once
two others are complete (docs/concepts/reading-a-verdict.md).

**The job's step** is the 10th percentile of its steady steps (``fast_step``), not their median. A shared machine
slows some stretches of a job (another tenant's burst, the hypervisor), more in one round than in the next, and a
median moves with them; the fast steps are the ones the machine left alone, a property of the program (Chen and
Revels, "Robust benchmarking in noisy environments", 2016, argue for the minimum; a low percentile keeps its
robustness without depending on how many steps a job ran). Measured on the demo's spec (AMD EPYC, 2 cores, 4
stored comparisons of 9-12 rounds): the spread of the per-round log ratio fell from 0.038-0.074 (medians) to
0.020-0.048, so a verdict needs 1.5-4 times fewer rounds; benchmarks/step_statistic.md: 0.098 to 0.064 quiet, no gain
beside a bursty busy process (0.043, 0.051). A job's own figures (median step, IQR, throughput) stay the medians a
user's run would see.

**The spread between comparisons.** Nothing outside this comparison's rounds widens its interval: a later
comparison is never wider for being later, and a loaded one never widens a quiet one. An earlier design added τ, the
spread of the speedup between earlier comparisons of the same spec on this host, because comparisons disagreed far
beyond their own intervals; most of that disagreement was the rounds of one comparison sharing one warm launcher's
luck (its address layout put eager's step at about 30 or about 36 ms for all of them), which every round now draws
afresh (``tcbench.runner.zygote_client``). ``heterogeneity`` still tests earlier comparisons (a one-way analysis of
variance of their rounds, with τ from its mean squares); when they disagree beyond their own rounds, the machine
drifts, and the comparison warns that its interval holds for the machine as it was during its rounds.
"""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass
from typing import Collection, Mapping, Sequence

import numpy as np

CONFIDENCE = 0.95
# equivalence ("no measurable difference") by two one-sided tests at 5 % each (Schuirmann 1987): the 90 % interval
# inside the margin, as bioequivalence is judged; "faster"/"slower" still need the 95 % interval to exclude 1
EQUIVALENCE_CONFIDENCE = 0.90
# a compared label whose 99.9 % interval already excludes 1 sits out the rounds while another label is undecided
# (Haybittle-Peto: an interim look at p < 0.001 leaves the final 95 % interval's error rate all but unchanged)
SIT_OUT_CONFIDENCE = 0.999
STEP_QUANTILE = 0.10        # a job's step in a round's ratio: the 10th percentile of its steady steps (fast_step)
MIN_EARLIER = 3             # earlier comparisons needed to test whether the speedup moves between comparisons
DRIFT_P = 0.05              # ... and the heterogeneity test's p-value below which it does
PILOT_ROUNDS = 6            # the first stage of adaptive rounds: t(0.975, 5) = 2.57 (with 4 rounds, 3.18;
                            # benchmarks/pilot_size.md: decides more at the same coverage)
N_BOOT = 2000               # one round: bootstrap resamples of its steps

Interval = tuple[float | None, float | None, float | None]   # (point, low, high)


@functools.lru_cache(maxsize=None)
def t_quantile(df: int, confidence: float = CONFIDENCE) -> float:
    from scipy import stats   # here, not at import: scipy.stats takes ~0.7 s, and a refused command needs none of it

    return float(stats.t.ppf(1 - (1 - confidence) / 2, df))


def fast_step(steps: Sequence[float]) -> float:
    """A job's step as a comparison reads it: the ``STEP_QUANTILE`` (10th percentile) of its steady steps, the speed
    the program has when the machine leaves it alone (module docstring, "The job's step")."""
    xs = sorted(map(float, steps))   # numpy's default (linear) quantile, in plain floats: np.quantile's dispatch
    h = (len(xs) - 1) * STEP_QUANTILE   # costs 100 times the sort of a round's few dozen steps
    lo = math.floor(h)
    if lo + 1 >= len(xs):
        return xs[lo]
    a, b, t = xs[lo], xs[lo + 1], h - lo
    return a + (b - a) * t if t < 0.5 else b - (b - a) * (1 - t)   # numpy's _lerp, exact at both ends


def log_ratios(pairs: Sequence[tuple[Sequence[float], Sequence[float]]]) -> list[float]:
    """Per round: log(the first job's ``fast_step`` ÷ the second's); rounds with no steps are left out."""
    return [math.log(fast_step(a) / fast_step(b)) for a, b in pairs if len(a) and len(b)]


def half_width(logs: Sequence[float], pilot: int | None = None, confidence: float = CONFIDENCE) -> float | None:
    """The interval's half-width in log units: the t-interval's, or with ``pilot`` (adaptive rounds) the wider of
    Stein's (the first ``pilot`` rounds' spread) and the t-interval's. None below two rounds."""
    n = len(logs)
    if n < 2:
        return None
    hw = t_quantile(n - 1, confidence) * _stdev(logs) / math.sqrt(n)
    if pilot is not None and n >= pilot >= 2:
        hw = max(hw, t_quantile(pilot - 1, confidence) * _stdev(logs[:pilot]) / math.sqrt(n))
    return hw


def _stdev(xs: Sequence[float]) -> float:
    """The sample standard deviation in floats (two passes, ``math.fsum``): ``statistics.stdev`` computes it in exact
    fractions, 20 times slower, and the adaptive rule asks for it every round of every label (the coverage
    simulations in tests/measure ask for it millions of times)."""
    mean = math.fsum(xs) / len(xs)
    return math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (len(xs) - 1))


@dataclass(frozen=True)
class Heterogeneity:
    """Whether earlier comparisons measured one speedup: the one-way analysis of variance of their per-round log
    ratios (comparisons as groups; exact for normal log ratios, where Cochran's Q with weights from a few rounds'
    own variances rejects far too often: 19 % of steady 5-round comparisons at p < 0.05 in tests/measure), its F
    statistic and p-value, k comparisons, and τ (the spread between them, in log units, from the mean squares).
    ``drifting``: they disagree beyond their own rounds (p below ``DRIFT_P``)."""

    tau: float
    f: float
    p: float
    k: int

    @property
    def drifting(self) -> bool:
        return self.p < DRIFT_P


def heterogeneity(earlier: Sequence[Sequence[float]]) -> Heterogeneity | None:
    """The heterogeneity of earlier comparisons, from their per-round log ratios (those with two rounds or more);
    None with fewer than ``MIN_EARLIER`` of them or no spread inside them."""
    groups = [list(logs) for logs in earlier if len(logs) >= 2]
    k, n = len(groups), sum(len(g) for g in groups)
    if k < MIN_EARLIER:
        return None
    grand = statistics.fmean(x for g in groups for x in g)
    msb = sum(len(g) * (statistics.fmean(g) - grand) ** 2 for g in groups) / (k - 1)
    msw = sum(sum((x - statistics.fmean(g)) ** 2 for x in g) for g in groups) / (n - k)
    if msw <= 0:
        return None
    n0 = (n - sum(len(g) ** 2 for g in groups) / n) / (k - 1)   # the mean group size, unequal groups allowed
    f = msb / msw
    from scipy import stats

    return Heterogeneity(tau=math.sqrt(max(0.0, (msb - msw) / n0)), f=f, p=float(stats.f.sf(f, k - 1, n - k)), k=k)


def log_interval(logs: Sequence[float], pilot: int | None = None, confidence: float = CONFIDENCE) -> Interval:
    """(point, low, high) as ratios, from per-round log ratios (see the module docstring)."""
    if not logs:
        return None, None, None
    mean = statistics.fmean(logs)
    hw = half_width(logs, pilot, confidence)
    if hw is None:
        return math.exp(mean), None, None
    return math.exp(mean), math.exp(mean - hw), math.exp(mean + hw)


def _one_round(a: Sequence[float], b: Sequence[float], seed: int = 0, confidence: float = CONFIDENCE) -> Interval:
    """A single round: the percentile bootstrap of its steps' ``fast_step`` ratio (step-to-step spread only)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    rng = np.random.default_rng(seed)
    ma = np.quantile(rng.choice(a, size=(N_BOOT, len(a))), STEP_QUANTILE, axis=1)
    mb = np.quantile(rng.choice(b, size=(N_BOOT, len(b))), STEP_QUANTILE, axis=1)
    alpha = (1 - confidence) / 2
    ratio = ma / mb
    return fast_step(a) / fast_step(b), float(np.quantile(ratio, alpha)), float(np.quantile(ratio, 1 - alpha))


def ratio_interval(pairs: Sequence[tuple[Sequence[float], Sequence[float]]], pilot: int | None = None,
                   confidence: float = CONFIDENCE) -> Interval:
    """(point, low, high) of native ÷ compiled from per-round steady step times (jobs paired by round).

    Point: the geometric mean over rounds of the per-round ``fast_step`` ratios. Interval: the t-interval over
    rounds (with ``pilot``: the adaptive rounds' two-stage interval); a single round's from its steps (module
    docstring).
    ``confidence``: 0.95, or ``EQUIVALENCE_CONFIDENCE`` for the equivalence test.
    """
    pairs = [(a, b) for a, b in pairs if len(a) and len(b)]
    if len(pairs) == 1:
        return _one_round(*pairs[0], confidence=confidence)
    return log_interval(log_ratios(pairs), pilot, confidence)


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
    """When adaptive rounds stop: the asked ``resolve`` (0.05: a verdict at ±5 %, ``resolved``), ``pilot`` rounds at
    least, ``max_rounds`` at most, and the wall-clock ``budget_s`` (None: no budget)."""

    resolve: float
    budget_s: float | None = None
    pilot: int = PILOT_ROUNDS
    max_rounds: int = 30

    def resolved(self, logs: Sequence[float]) -> bool:
        """Whether the interval over these rounds is narrow enough that the verdict at the asked resolution cannot be
        inconclusive, wherever the ratio lies (never before the pilot is done): the 95 % half-width (faster/slower
        exclude 1) plus the 90 % one (no measurable difference: within ±resolve) at most log(1 + resolve), about
        ±2.7 % for ±5 %. An interval merely within ±5 % left a ratio near 1.03 undecided (0.99×-1.08×) with budget
        to spare. Both half-widths depend on the rounds' spread alone, never on where the ratio lies, so stopping
        on them keeps Stein's coverage (tests/measure/test_interval.py simulates it). A label already ``decided``
        (99.9 %: its verdict is faster or slower) needs no more than its 95 % interval within the resolution."""
        if len(logs) < self.pilot:
            return False
        wide, narrow = half_width(logs, self.pilot), half_width(logs, self.pilot, EQUIVALENCE_CONFIDENCE)
        if wide is None or narrow is None:
            return False
        return wide + narrow <= math.log1p(self.resolve) or (math.expm1(wide) <= self.resolve and self.decided(logs))

    def decided(self, logs: Sequence[float]) -> bool:
        """Whether these rounds already tell faster from slower beyond doubt: the ``SIT_OUT_CONFIDENCE`` (99.9 %)
        interval excludes 1, from the third round on (t(0.9995, 2) = 31.6: only a label far from 1 whose rounds
        agree; after the pilot, Stein's interval). Such a label sits out the rounds while another is undecided
        (``Comparison.next_labels``): each interim look at p < 0.001 (Haybittle-Peto) changes the final 95 %
        interval's error rate by at most 0.1 point (tests/measure/test_interval.py simulates it)."""
        hw = half_width(logs, self.pilot, SIT_OUT_CONFIDENCE) if len(logs) >= 3 else None
        return hw is not None and abs(statistics.fmean(logs)) > hw

    def running(self, logs: Mapping[str, Sequence[float]], undecidable: Collection[str] = ()) -> list[str]:
        """Which compared labels (``logs``: each one's per-round log ratios so far) the next round runs: a label that
        is resolved, or already decided, sits out while another is neither; once every label is one or the other,
        the decided ones that are not yet resolved run again (all of them, when every one is resolved). A label in
        ``undecidable`` (a disturbed round makes its verdict inconclusive, whatever its interval) is never decided."""
        unresolved = [label for label, x in logs.items() if not self.resolved(x)]
        undecided = [label for label in unresolved if label in undecidable or not self.decided(logs[label])]
        return undecided or unresolved or list(logs)
