"""Is lr0 near its optimum at its batch? The premise of every learning-rate prediction, checked (``check_lr``).

The noise-scale prediction (McCandlish et al. 2018, "An Empirical Model of Large-Batch Training", and the surge form
for Adam: ``tcbench.tuning.lr.noise``) and the linear and square-root rules all scale lr0 by a ratio: they assume lr0
is (near) the best rate at B0 and carry any mistuning along to B1.

**The check**: ``spec`` (its backend as given; a data-parallel job as one process at its global batch) trained at
lr0 × f for each factor f (default ½, 1, 2) and ``seeds`` seeds spec.seed, spec.seed + 1, …; a seed sets the
initialisation and the data order, so the runs of one seed are a pair across factors. Each run trains ``steps``
(default spec.steps: the horizon the prediction is for; shorter runs favour small rates, Wu et al. 2018's
short-horizon bias) and is judged on its held-out loss over ``eval_batches`` batches after training. Per factor:
the paired difference loss(f) − loss(1) per seed and its 95 % t-interval over seeds
(``tcbench.measure.interval.half_width``). Every job is a stored run of one comparison of kind ``lr-premise``.

**The verdict** (``LrPremise.held``):

- ``False``: some factor's loss is lower than lr0's beyond noise (its interval below 0): lr0 is too high (a factor
  below 1 won) or too low. Then, while the best mean sits at the edge of the factors run, up to ``extend`` more
  factors are run further out (each one the edge times the factors' ratio there: ×4, then ×8), so that the
  re-centred rate is bracketed.
- ``True``: no factor is lower beyond noise. With 3 seeds this says "not shown to be off", not "optimal".
- ``None`` (inconclusive): lr0 has fewer than two usable runs, a factor has fewer than two seeds paired with lr0's
  (failed, stopped or unevaluated runs are unusable), seeds disagree in a way the signs cannot settle (one diverged
  where its pair learned, and another seed went the other way), or every run diverged.

**Divergence** (status ``diverged``, or a held-out loss that is NaN/inf) counts as worse than any finite loss: a
diverged run's loss is +inf, so its paired difference is ±inf (0 when both diverged). A factor with an infinite
difference is judged on signs: lower when no seed is worse and some seed is −inf (lr0 diverged where it learned),
higher when no seed is better and some seed is +inf.

**The re-centred rate** (``recentred_lr``, what a prediction starts from when the premise failed): the minimum of
the parabola in log lr through the best mean and its two neighbours when the best is inside the factors run and the
parabola opens upward (a rate between the neighbours), else the best factor's rate. lr0 itself when the premise held
or the check was inconclusive.

**Not taken: the LR range test** (Smith 2015, "Cyclical Learning Rates for Training Neural Networks"): one run whose
rate grows each step, reading the best rate off the training loss's descent. It is cheaper (one run), but it judges
each rate after a few steps of a run whose history came from smaller rates, on the training loss, with no spread
between seeds; its "best" is a heuristic point on a curve (steepest descent, or a fraction of where it blows up) that
is known to land off the optimum of a full run by a factor of a few — the size of the mistuning this check must
detect. Paired full-horizon runs on the held-out loss give an interval that says whether lr0 is off beyond noise.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import threading
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from tcbench.core.events import Observer
from tcbench.core.options import merged
from tcbench.core.spec import JobSpec, SpecError, check_number
from tcbench.measure.interval import half_width
from tcbench.runner.preflight import check as preflight
from tcbench.runner.session import comparison_session
from tcbench.store.api import Store
from tcbench.tuning.lr.noise import one_process

KIND = "lr-premise"
NOT_CHECKED = "premise not checked (check_premise=True or tc.check_lr)"


@dataclass(frozen=True)
class PremiseOptions:
    """How ``check_lr`` checks lr0 (every field is also a keyword of ``check_lr``; module docstring)."""

    factors: tuple[float, ...] = (0.5, 1.0, 2.0)   # lr0 × each; must contain 1
    seeds: int = 3                                  # seeds per factor (spec.seed, spec.seed + 1, …); 2 at least
    steps: int | None = None                        # each run's training steps (default spec.steps)
    eval_batches: int = 8                           # held-out batches each run is judged on
    extend: int = 2                                 # more factors beyond the edge while the best is there


@dataclass(frozen=True)
class PremiseRun:
    """One run of the check: its factor, rate, seed, status, held-out loss (None: none) and stored run."""

    factor: float
    lr: float
    seed: int
    status: str
    eval_loss: float | None
    run_id: int | None = None
    error: str = ""

    @property
    def loss(self) -> float | None:
        """The loss the check compares: the held-out loss, +inf when the run diverged, None when unusable."""
        if self.status == "diverged" or (self.status == "ok" and self.eval_loss is not None
                                         and not math.isfinite(self.eval_loss)):
            return math.inf
        return self.eval_loss if self.status == "ok" else None


@dataclass(frozen=True)
class PairedDifference:
    """loss(lr0 × factor) − loss(lr0) per seed, its mean and 95 % t-interval, and the call: "lower", "higher"
    (beyond noise), "within noise", "both diverged" (every pair: no loss to compare) or "unknown" (module
    docstring)."""

    factor: float
    lr: float
    diffs: tuple[float, ...]
    point: float | None
    low: float | None
    high: float | None
    call: str


@dataclass(frozen=True)
class LrPremise:
    """What ``check_lr`` found: lr0 at its batch, the factors run (the extension's included) and every run."""

    lr0: float
    batch_size: int
    steps: int
    factors: tuple[float, ...]
    seeds: tuple[int, ...]
    runs: tuple[PremiseRun, ...]
    comparison_id: int | None = None

    def losses(self, factor: float) -> dict[int, float]:
        """seed -> the compared loss (+inf: diverged) of ``factor``'s usable runs."""
        return {r.seed: r.loss for r in self.runs if r.factor == factor and r.loss is not None}

    def mean_loss(self, factor: float) -> float | None:
        """The mean over ``factor``'s usable runs (+inf when one diverged); None when it has none."""
        values = list(self.losses(factor).values())
        return None if not values else math.inf if math.inf in values else statistics.fmean(values)

    def difference(self, factor: float) -> PairedDifference:
        """``factor`` against lr0, paired by seed (module docstring)."""
        mine, base = self.losses(factor), self.losses(1.0)
        pairs = [(mine[s], base[s]) for s in self.seeds if s in mine and s in base]
        diffs = tuple(_diff(a, b) for a, b in pairs)
        lr = self.lr0 * factor
        if len(diffs) < 2:
            return PairedDifference(factor, lr, diffs, None, None, None, "unknown")
        if all(math.isinf(a) and math.isinf(b) for a, b in pairs):   # no loss to compare: not "within noise"
            return PairedDifference(factor, lr, diffs, None, None, None, "both diverged")
        if all(math.isfinite(d) for d in diffs):
            point, hw = statistics.fmean(diffs), half_width(diffs)
            low, high = point - hw, point + hw
            call = "lower" if high < 0 else "higher" if low > 0 else "within noise"
            return PairedDifference(factor, lr, diffs, point, low, high, call)
        if all(d <= 0 for d in diffs):
            call = "lower"
        elif all(d >= 0 for d in diffs):
            call = "higher"
        else:
            call = "unknown"
        point = -math.inf if call == "lower" else math.inf if call == "higher" else None
        return PairedDifference(factor, lr, diffs, point, None, None, call)

    @property
    def differences(self) -> list[PairedDifference]:
        return [self.difference(f) for f in self.factors if f != 1.0]

    @property
    def _why_unknown(self) -> str | None:
        """Why nothing can be said (None: something can)."""
        if len(self.losses(1.0)) < 2:
            return f"lr0 has {len(self.losses(1.0))} usable run(s) of {len(self.seeds)}: {self._failures(1.0)}"
        if all(r.loss == math.inf for r in self.runs if r.loss is not None):
            return (f"every run diverged, at every factor down to ×{min(self.factors):g}: lower lr0 several-fold and "
                    "check again")
        return None

    def _failures(self, factor: float) -> str:
        bad = [r for r in self.runs if r.factor == factor and r.loss is None]
        text = "; ".join(f"seed {r.seed} {r.status}{': ' + r.error[:120] if r.error else ''}" for r in bad)
        return text or "none ran"

    @property
    def held(self) -> bool | None:
        """True: no factor is lower than lr0 beyond noise; False: one is; None: inconclusive (module docstring)."""
        if self._why_unknown is not None:
            return None
        calls = [d.call for d in self.differences]
        if "lower" in calls:
            return False
        return None if "unknown" in calls else True

    @property
    def _winner(self) -> PairedDifference | None:
        """The factor lower than lr0 beyond noise with the lowest mean loss (None unless the premise failed)."""
        lower = [d for d in self.differences if d.call == "lower"]
        return min(lower, key=lambda d: (self.mean_loss(d.factor), d.factor)) if lower else None

    @property
    def direction(self) -> str | None:
        """"too high", "too low", or None when the premise did not fail."""
        w = self._winner if self.held is False else None
        return None if w is None else "too high" if w.factor < 1 else "too low"

    @property
    def best_factor(self) -> float | None:
        """The factor with the lowest mean held-out loss (diverged: +inf), beyond noise or not."""
        means = {f: self.mean_loss(f) for f in self.factors}
        known = [f for f, m in means.items() if m is not None and math.isfinite(m)]
        return min(known, key=lambda f: (means[f], abs(math.log(f)))) if known else None

    @property
    def best_lr(self) -> float | None:
        return None if self.best_factor is None else self.lr0 * self.best_factor

    @property
    def _fit(self) -> tuple[float, str]:
        """(the re-centred factor, how it was found) when the premise failed (module docstring)."""
        best = self.best_factor if self.best_factor is not None else self._winner.factor
        order = sorted(self.factors)
        i = order.index(best)
        if 0 < i < len(order) - 1:
            trio = order[i - 1:i + 2]
            means = [self.mean_loss(f) for f in trio]
            if all(m is not None and math.isfinite(m) for m in means):
                a, b, _ = np.polyfit([math.log(f) for f in trio], means, 2)
                if a > 0:
                    x = min(max(-b / (2 * a), math.log(trio[0])), math.log(trio[2]))
                    return math.exp(x), ("the minimum of a parabola in log lr through "
                                         + ", ".join(f"×{f:g}" for f in trio))
        edge = " (at the edge of the factors run: the optimum may lie further out)" if i in (0, len(order) - 1) else ""
        return best, f"the best factor ×{best:g}{edge}"

    @property
    def recentred_lr(self) -> float:
        """The rate to predict from: re-centred when the premise failed, else lr0 (module docstring)."""
        return self.lr0 * self._fit[0] if self.held is False else self.lr0

    @property
    def verdict(self) -> str:
        """The check in plain words."""
        where = f"at batch {self.batch_size} ({len(self.seeds)} seeds, {self.steps} steps)"
        if self.held is None:
            why = self._why_unknown or "; ".join(
                f"×{d.factor:g}: {'seeds disagree' if len(d.diffs) >= 2 else self._failures(d.factor)}"
                for d in self.differences if d.call == "unknown")
            return f"lr0 = {self.lr0:.3g} {where}: inconclusive ({why})"
        if self.held:
            return (f"lr0 = {self.lr0:.3g} held {where}: no other rate reached a lower held-out loss beyond noise ("
                    + "; ".join(f"{d.lr:.3g} (×{d.factor:g}): {_amount(d, signed=True)}" for d in self.differences)
                    + ")")
        w = self._winner
        factor, how = self._fit
        return (f"lr0 = {self.lr0:.3g} is {self.direction} {where}: {w.lr:.3g} (×{w.factor:g}) reached "
                f"{_amount(w)} lower held-out loss; re-centred on {self.lr0 * factor:.3g} ({how})")

    def table(self) -> Any:
        """One row per factor: its rate, usable and diverged runs, mean held-out loss, the paired difference from
        lr0 with its 95 % interval, and the call."""
        import pandas as pd

        rows = []
        for f in self.factors:
            d = None if f == 1.0 else self.difference(f)
            losses = self.losses(f)
            rows.append(dict(factor=f, lr=self.lr0 * f, runs=len(losses),
                             diverged=sum(1 for v in losses.values() if v == math.inf), mean_loss=self.mean_loss(f),
                             diff=None if d is None else d.point, diff_low=None if d is None else d.low,
                             diff_high=None if d is None else d.high, vs_lr0="lr0" if d is None else d.call,
                             losses=[losses.get(s) for s in self.seeds]))
        return pd.DataFrame(rows)

    def describe(self) -> str:
        return self.verdict

    def to_dict(self) -> dict:
        """What the comparison row keeps at its finish."""
        return dict(held=self.held, verdict=self.verdict, best_lr=self.best_lr, recentred_lr=self.recentred_lr,
                    factors=list(self.factors))


def _diff(a: float, b: float) -> float:
    if math.isinf(a) and math.isinf(b):
        return 0.0   # both diverged: a tie
    return a - b


def _amount(d: PairedDifference, signed: bool = False) -> str:
    """"0.12 (0.05–0.19)" (the amount lower), or signed "+0.12 (−0.05–0.29)"; "diverged" words for ±inf."""
    if d.point is None:
        return "unknown"
    if math.isinf(d.point):
        if signed:
            return "diverged where lr0 learned" if d.point > 0 else "learned where lr0 diverged"
        return "finite (lr0 diverged)"
    if signed:
        return f"{d.point:+.3g} ({d.low:.3g}–{d.high:.3g})"
    return f"{-d.point:.3g} ({-d.high:.3g}–{-d.low:.3g})"


def _check(o: PremiseOptions) -> tuple[float, ...]:
    """The factors, sorted; a SpecError naming the field, the value and what is allowed before any job."""
    allowed = "positive finite numbers including 1, at least two different, e.g. (0.5, 1, 2)"
    if isinstance(o.factors, (str, bytes)) or not isinstance(o.factors, Sequence):
        raise SpecError("factors", o.factors, allowed)
    if any(isinstance(f, bool) or not isinstance(f, (int, float)) or not math.isfinite(f) or f <= 0
           for f in o.factors):
        raise SpecError("factors", o.factors, allowed)
    factors = tuple(sorted({float(f) for f in o.factors}))
    if 1.0 not in factors or len(factors) < 2 or len(factors) != len(o.factors):
        raise SpecError("factors", o.factors, allowed + ", none repeated")
    check_number("seeds", o.seeds, 2, 64, whole=True)
    check_number("steps", o.steps, 1, whole=True, optional=True)
    check_number("eval_batches", o.eval_batches, 1, whole=True)
    check_number("extend", o.extend, 0, 8, whole=True)
    return factors


def check_lr(spec: JobSpec, *, options: PremiseOptions | None = None, observer: Observer | None = None,
             stop: threading.Event | None = None, store: Store | None = None, **overrides: Any) -> LrPremise:
    """Check that ``spec.lr`` is near its optimum at ``spec.batch_size``: paired runs at lr0 × each factor over
    ``seeds`` seeds, judged on the held-out loss (module docstring). Settings: ``PremiseOptions``' fields, as
    ``options=`` or keywords (``check_lr(spec, seeds=5)``); bad ones are a SpecError before any job starts.
    ``stop`` ends the check after the running job; what finished is judged (often inconclusive)."""
    from tcbench.runner.process import run

    if not isinstance(spec, JobSpec):
        raise SpecError("spec", spec, "a tcbench.JobSpec (its lr is the one checked)")
    o = merged(PremiseOptions, options, overrides, "check_lr")
    factors = _check(o)
    spec = one_process(spec)
    steps = spec.steps if o.steps is None else o.steps
    base = spec.replace(steps=steps, warmup_steps=min(spec.warmup_steps, steps - 1), eval_batches=o.eval_batches,
                        eval_every=0, stop_at_loss=None)
    for f in factors:   # every rate of the first round is a valid job before any starts
        preflight(base.replace(lr=spec.lr * f))
    store = store or Store()
    seeds = tuple((spec.seed + i) % 2 ** 32 for i in range(o.seeds))
    labels = [_label(f) for f in factors]
    info = dict(lr0=spec.lr, factors=list(factors), seeds=list(seeds), steps=steps, eval_batches=o.eval_batches)
    runs: list[PremiseRun] = []
    with comparison_session(store, KIND, base, labels, o.seeds, info, stop) as session:

        def seed_by_seed(fs: Sequence[float]) -> None:   # a stopped check keeps whole pairs
            for i, seed in enumerate(seeds):
                for f in fs:
                    if session.stopped:
                        return
                    res = run(base.replace(lr=spec.lr * f, seed=seed), observer, session.stop, store,
                              session.comparison_id, i, label=_label(f))
                    runs.append(PremiseRun(f, spec.lr * f, seed, res.status, res.extra.eval_loss, res.run_id,
                                           res.error or ""))

        seed_by_seed(factors)
        result = LrPremise(spec.lr, spec.batch_size, steps, factors, seeds, tuple(runs), session.comparison_id)
        for _ in range(o.extend):
            nxt = _next_factor(result)
            if nxt is None or session.stopped:
                break
            seed_by_seed([nxt])
            result = dataclasses.replace(result, factors=tuple(sorted((*result.factors, nxt))), runs=tuple(runs))
        session.finish_info.update(result.to_dict())
    return result


def _next_factor(p: LrPremise) -> float | None:
    """The factor beyond the edge when the premise failed and the best mean is at that edge (None: bracketed)."""
    if p.held is not False or p.best_factor is None:
        return None
    order = sorted(p.factors)
    if p.best_factor == order[-1]:
        return order[-1] * order[-1] / order[-2]
    if p.best_factor == order[0]:
        return order[0] * order[0] / order[1]
    return None


def _label(factor: float) -> str:
    return f"lr0×{factor:g}"
