"""Time to target at the length a user trains for: each candidate's time projected from the study's two factors.

A study's target is reached in about a hundred steps, where a compile is most of a compiled job's time. A user trains
for thousands. Goodput (Pollux, Qiao et al., OSDI 2021) is system throughput × statistical efficiency; here, per run
of the study:

- **compile** ``c``: the run's measured compile (0 for a native run);
- **throughput** ``k``: seconds per sample of its training, ``(time to target − compile) ÷ samples to target``;
- **samples ratio** ``s``: the candidate's samples to target ÷ the reference's, of the same seed.

The reference trains ``N`` steps of its batch B (N·B samples); a candidate reaches what the reference reached there
after ``s·N·B`` samples. So, seed by seed,

    T_ref(N) = c_ref + N·B·k_ref          T(N) = c + s·N·B·k

and the speedup at N is the seed-paired ratio T_ref(N) ÷ T(N), with the same 95 % t-interval as the study's own
(``scoring.paired_ratio``). The **break-even** is where the two lines cross, on the seeds' medians of c, k and s:
``N* = (c − c_ref) ÷ (B·(k_ref − s·k))`` — below it the reference is sooner (or above it, when the candidate compiles
less and steps slower); none when one is sooner at every horizon.

What this assumes, and says: the samples ratio measured at the study's target holds at the horizon. The gradient
noise scale grows as the loss falls (McCandlish et al. 2018), so a bigger batch loses less statistical efficiency
later in training than early: a bigger batch's ratio measured early is conservative for a long run. The throughput is
the study's runs', first steps included, so a long run's is, if anything, a little better. And the reference needs
its N steps to reach its own quality at N steps: true while its held-out loss falls, not where it has flattened
(small BERT's did: its 640-step loss was first reached at 48-344 steps, and the projected times came out several
times the measured ones; benchmarks/horizon_check_bert-base-cased.md). ``still_falling`` tests that premise on the
reference's own held-out curves (the loss's slope against log steps over the second half of its runs); where it
fails, every projection says its times are an upper bound.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Sequence

import pandas as pd

from tcbench.measure.interval import log_interval, t_quantile
from tcbench.tuning.quality.scoring import paired_ratio


@dataclass(frozen=True)
class Factors:
    """One run's factors: its compile (s), seconds per training sample, and samples to target."""

    compile_s: float
    s_per_sample: float
    samples: float


@dataclass(frozen=True)
class Projection:
    """A candidate at a horizon of ``horizon_steps`` reference steps: its projected time to what the reference reaches
    there (the seeds' median), the seed-paired speedup over the reference with its 95 % interval (``seeds`` pairs),
    the horizon where it breaks even (None: sooner or later at every horizon, ``break_even_kind`` says which) and the
    note on what the projection assumes for it."""

    label: str
    horizon_steps: int
    time_s: float | None
    speedup: float | None
    low: float | None
    high: float | None
    seeds: int
    break_even_steps: float | None
    break_even_kind: str    # "sooner above", "sooner below", "always sooner", "never sooner", "unknown"
    note: str = ""
    falling: bool = True    # the reference's loss still fell at the study's end (``still_falling``): else the times
    #                         are an upper bound


def factors(run: Any) -> Factors | None:
    """A run's factors (``QualityRun``); None when it did not reach the target or its training time is not positive."""
    if not run.reached or not run.time_s or not run.samples:
        return None
    compile_s = float(run.compile_s or 0.0)
    train = float(run.time_s) - compile_s
    if train <= 0:
        return None
    return Factors(compile_s, train / float(run.samples), float(run.samples))


def _median(runs: list[Factors]) -> Factors:
    """Each factor's median over the seeds."""
    return Factors(*(statistics.median(getattr(f, k) for f in runs) for k in Factors.__annotations__))


def _time(f: Factors, ratio: float, samples: float) -> float:
    return f.compile_s + ratio * samples * f.s_per_sample


def break_even(ref: Factors, cand: Factors, ratio: float, batch: int) -> tuple[float | None, str]:
    """(N*, kind): the reference steps where T_ref(N) = T(N) (module docstring), and on which side the candidate is
    sooner."""
    slope = batch * (ref.s_per_sample - ratio * cand.s_per_sample)   # what each step saves (s), compile aside
    extra = cand.compile_s - ref.compile_s                           # what the candidate pays up front (s)
    if slope > 0 and extra > 0 and extra / slope >= 1:
        return extra / slope, "sooner above"
    if slope < 0 and extra < 0 and extra / slope >= 1:
        return extra / slope, "sooner below"
    # no crossing at a horizon of a step or more: one side is sooner at every horizon
    return None, "always sooner" if slope > 0 or (slope == 0 and extra < 0) else "never sooner"


def _check_steps(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}={value!r} is not allowed; allowed: a whole number of the reference's steps, at "
                         "least 1")
    return value


def _pairs(result: Any, label: str) -> dict[int, tuple[Factors, Factors]]:
    """Per seed, the reference's factors and ``label``'s, where both reached the target (the reference's own: its
    factors twice)."""
    ref = {r.seed: factors(r) for r in result.runs if r.label == result.reference.label}
    mine = {r.seed: factors(r) for r in result.runs if r.label == label}
    return {s: (ref[s], f) for s, f in mine.items() if f is not None and ref.get(s) is not None}


@dataclass(frozen=True)
class Falling:
    """Whether the reference's held-out loss was still falling over the second half of its runs: per seed, the least
    squares slope of the loss against log2(steps) there (the loss per doubling of the steps), the mean over
    ``seeds`` with its 95 % interval; ``falling`` when the interval lies below 0. None figures: fewer than two seeds
    with three evaluations in that half, too few to tell (taken as falling: no caveat)."""

    slope: float | None
    low: float | None
    high: float | None
    seeds: int

    @property
    def falling(self) -> bool:
        return self.high is None or self.high < 0

    @property
    def caveat(self) -> str:
        """The words a projection carries when the premise failed ("" while the loss falls)."""
        if self.falling:
            return ""
        return (f"the reference's held-out loss was not measurably falling over the second half of its runs (per "
                f"doubling of the steps {self.slope:+.3g}, 95 % interval {self.low:+.3g} to {self.high:+.3g}, "
                f"{self.seeds} seeds): it may reach its quality at N steps long before N steps, so the projected "
                "times are an upper bound")


def still_falling(result: Any) -> Falling:
    """``Falling`` for a study's reference: the premise that it needs its N steps to reach its quality at N steps. On
    small BERT the held-out loss had flattened by the end of the reference's runs (at chance for one seed, noisy
    around a plateau for the others), and it reached its 640-step loss at 48-344 steps: the projected times came out
    several times the measured ones (benchmarks/horizon_check_bert-base-cased.md)."""
    slopes = []
    for r in result.runs:
        if r.label != result.reference.label:
            continue
        late = [p for p in r.curve if p.steps > 0 and p.steps >= r.curve[-1].steps / 2] if r.curve else []
        if len(late) < 3 or len({p.steps for p in late}) < 2:
            continue
        x = [math.log2(p.steps) for p in late]
        y = [p.loss for p in late]
        mx, my = statistics.fmean(x), statistics.fmean(y)
        slopes.append(sum((a - mx) * (b - my) for a, b in zip(x, y)) / sum((a - mx) ** 2 for a in x))
    if len(slopes) < 2:
        return Falling(None, None, None, len(slopes))
    mean = statistics.fmean(slopes)
    hw = t_quantile(len(slopes) - 1) * statistics.stdev(slopes) / math.sqrt(len(slopes))
    return Falling(mean, mean - hw, mean + hw, len(slopes))


def project(result: Any, horizon_steps: int) -> list[Projection]:
    """Every candidate of a ``QualityResult`` but the reference, projected to ``horizon_steps`` reference steps; each
    note says where the premise failed (``still_falling``)."""
    _check_steps("horizon_steps", horizon_steps)
    batch = result.reference.spec.global_batch
    samples = horizon_steps * batch
    premise = still_falling(result)
    caveat = premise.caveat
    out = []
    for c in result.candidates[1:]:
        pairs = _pairs(result, c.label)
        if not pairs:
            out.append(Projection(c.label, horizon_steps, None, None, None, None, 0, None, "unknown",
                                  "no seed where both it and the reference reached the target"))
            continue
        ratios = {s: f.samples / r.samples for s, (r, f) in pairs.items()}
        ref_t = {s: _time(r, 1.0, samples) for s, (r, _) in pairs.items()}
        cand_t = {s: _time(f, ratios[s], samples) for s, (_, f) in pairs.items()}
        paired = paired_ratio(ref_t, cand_t)
        n_star, kind = break_even(_median([r for r, _ in pairs.values()]), _median([f for _, f in pairs.values()]),
                                  statistics.median(ratios.values()), batch)
        notes = [caveat] if caveat else []
        if c.spec.global_batch > batch:
            notes.append("its samples ratio was measured at the study's target; the noise scale grows as the loss "
                         "falls, so at a long horizon a bigger batch needs relatively fewer samples: conservative")
        note = "; ".join(notes)
        out.append(Projection(c.label, horizon_steps, statistics.median(cand_t.values()), paired.point, paired.low,
                              paired.high, paired.seeds, n_star, kind, note, premise.falling))
    return out


def time_curves(result: Any, steps: Sequence[int]) -> pd.DataFrame:
    """Each candidate's time (the reference's too) to what the reference reaches at each of ``steps``: the
    geometric mean over its seeds with their 95 % interval (log scale, as the study's own time spread; no interval
    from one seed). A candidate no seed projects (``project`` says why) has no rows."""
    for n in steps:
        _check_steps("steps", n)
    batch = result.reference.spec.global_batch
    rows = []
    for c in result.candidates:
        pairs = _pairs(result, c.label)
        for n in steps:
            logs = [math.log(_time(f, f.samples / r.samples, n * batch)) for r, f in pairs.values()]
            point, low, high = log_interval(logs)
            if point is not None:
                rows.append(dict(label=c.label, steps=n, time_s=point, low=low, high=high, seeds=len(logs)))
    return pd.DataFrame(rows, columns=["label", "steps", "time_s", "low", "high", "seeds"])


def horizon_steps_grid(horizon_steps: int, projections: Sequence[Projection], points: int = 60) -> list[int]:
    """Reference steps to draw a study's times at: geometric from 1 to beyond both the horizon and every
    break-even (10× the larger), the horizon and the break-evens among them."""
    top = 10 * max([horizon_steps, *(math.ceil(p.break_even_steps) for p in projections
                                     if p.break_even_steps is not None)])
    grid = {max(1, round(top ** (i / (points - 1)))) for i in range(points)}
    grid |= {horizon_steps, *(max(1, round(p.break_even_steps)) for p in projections
                              if p.break_even_steps is not None)}
    return sorted(grid)


def projection_table(result: Any, horizon_steps: int) -> pd.DataFrame:
    """``project`` as a table, one row per candidate."""
    return pd.DataFrame([p.__dict__ for p in project(result, horizon_steps)],
                        columns=list(Projection.__dataclass_fields__))
