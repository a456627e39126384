"""The learning rate for a new batch size from the gradient noise scale (the formulas: ``tcbench.tuning.lr.noise``'s
docstring, "The prediction")."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from tcbench.core.extras import NoiseScale, fmt_samples
from tcbench.tuning.lr.noise import noise_scale, stored_noise_scale
from tcbench.tuning.lr.premise import NOT_CHECKED, check_lr
from tcbench.core.spec import SpecError, check_number

OPTIMIZERS = ("adam", "sgd")


def lr_ratio(b_noise: float | None, old_batch: float, new_batch: float, optimizer: str = "adam") -> float:
    """lr(new_batch) / lr(old_batch) for a noise scale ``b_noise`` (None or inf: the limit B_noise → ∞)."""
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer={optimizer!r} is not allowed; allowed: {', '.join(OPTIMIZERS)}")
    k = new_batch / old_batch
    if b_noise is None or math.isinf(b_noise):
        return k if optimizer == "sgd" else math.sqrt(k)
    if b_noise <= 0:   # no gradient noise at all: SGD's rate is flat; Adam's falls as 1/√B
        return 1.0 if optimizer == "sgd" else 1 / math.sqrt(k)
    if optimizer == "sgd":
        return (1 + b_noise / old_batch) / (1 + b_noise / new_batch)

    def g(b: float) -> float:
        return math.sqrt(b_noise / b) + math.sqrt(b / b_noise)

    return g(old_batch) / g(new_batch)


def ratio_range(noise: NoiseScale, old_batch: float, new_batch: float, optimizer: str) -> tuple[float, float]:
    """The lr ratio's range over the noise scale's interval (the formula is not monotone in B_noise for Adam)."""
    if noise.low is None:   # not measurable: the B_noise → ∞ limit only
        limit = lr_ratio(None, old_batch, new_batch, optimizer)
        return limit, limit
    low = max(noise.low, 1e-9)
    high = noise.high
    grid = list(np.geomspace(low, high, 64)) if high is not None and high > low else [low]
    values = [lr_ratio(b, old_batch, new_batch, optimizer) for b in grid]
    values.append(lr_ratio(high, old_batch, new_batch, optimizer))   # None: the B_noise → ∞ limit
    return min(values), max(values)


@dataclass(frozen=True)
class LrPrediction:
    """The learning rate for ``new_batch`` predicted from the noise scale, with the two rules beside it."""

    old_batch: int
    new_batch: int
    old_lr: float
    optimizer: str            # "adam" (the surge form) or "sgd" (McCandlish)
    noise: NoiseScale
    lr: float                 # the noise-scale prediction
    low: float                # its range over the noise scale's 95 % interval
    high: float
    processes: tuple[int, int] | None = None   # (old, new) data-parallel processes when the batch is a global one
    premise: Any = None       # tcbench.LrPremise: lr0's check (None: not checked)

    @property
    def recentred(self) -> bool:
        """Whether the premise failed and the prediction starts from its re-centred rate instead of lr0."""
        return self.premise is not None and self.premise.held is False

    @property
    def premise_text(self) -> str:
        """Whether lr0's premise held, in words (``tcbench.tuning.lr.premise``)."""
        if self.premise is None:
            return f"Learning-rate {NOT_CHECKED}."
        text = f"Premise: {self.premise.verdict}."
        if self.premise.held is None:
            text += " This prediction starts from lr0 unchecked."
        if self.recentred:
            text += f" This prediction starts from {self.old_lr:.3g}, not lr0 = {self.premise.lr0:.3g}."
        return text

    @property
    def linear_lr(self) -> float:
        return self.old_lr * self.new_batch / self.old_batch

    @property
    def sqrt_lr(self) -> float:
        return self.old_lr * math.sqrt(self.new_batch / self.old_batch)

    @property
    def formula(self) -> str:
        return ("Adam(W), surge form: lr ∝ 1 / (√(B_noise/B) + √(B/B_noise))" if self.optimizer == "adam"
                else "SGD, McCandlish: lr ∝ 1 / (1 + B_noise/B)")

    def table(self) -> "Any":
        """The three guesses: rule, lr, lr ÷ the old lr, and the interval (the noise-scale row only)."""
        import pandas as pd

        rows = [("noise scale (" + ("surge form" if self.optimizer == "adam" else "McCandlish") + ")", self.lr,
                 self.low, self.high), ("linear rule (lr·k)", self.linear_lr, None, None),
                ("square-root rule (lr·√k)", self.sqrt_lr, None, None)]
        return pd.DataFrame([dict(rule=r, lr=lr, vs_old=lr / self.old_lr, low=lo, high=hi) for r, lr, lo, hi in rows])

    @property
    def regime(self) -> str:
        """Where the new batch sits against the noise scale: "below", "near", "beyond" or "unknown"."""
        b = self.noise.b_simple
        if b is None:
            return "below" if self.noise.low is not None and self.new_batch < self.noise.low / 4 else "unknown"
        return "below" if self.new_batch < b / 4 else "beyond" if self.new_batch > 4 * b else "near"

    def advice(self) -> str:
        """Plain words: which rule fits this optimiser, and what the measured noise scale says for this change."""
        if self.optimizer == "adam":
            rule = ("With Adam(W) the best learning rate grows about as √k (the square-root rule) while the batch "
                    "stays well below the gradient noise scale B_noise, peaks near B = B_noise and falls beyond it; "
                    "the linear rule overshoots for Adam.")
        else:
            rule = ("With SGD (momentum or not) the best learning rate grows as k (the linear rule) while the batch "
                    "stays well below the gradient noise scale B_noise and levels off beyond it; the square-root rule "
                    "undershoots there.")
        b = self.noise.b_simple
        where = {"below": f"Batch {self.new_batch} is well below B_noise ≈ {fmt_samples(b) if b else '∞'}: "
                          + ("the square-root rule applies" if self.optimizer == "adam" else "the linear rule applies"),
                 "near": f"Batch {self.new_batch} is near B_noise ≈ {fmt_samples(b)}: neither rule holds; "
                         + ("this is about the largest useful rate" if self.optimizer == "adam"
                            else "the rate grows more slowly than the batch"),
                 "beyond": f"Batch {self.new_batch} is beyond B_noise ≈ {fmt_samples(b)}: a larger batch "
                           f"mostly repeats the same gradient; "
                           + ("the rate should not grow (the surge form lowers it)"
                              if self.optimizer == "adam" else "the rate stays flat"),
                 "unknown": "The noise scale was not resolved at this batch: the rules' limits are all there is"}
        return (f"{rule} {where[self.regime]}. All three assume lr {self.old_lr:.3g} was (near) the best at batch "
                f"{self.old_batch} and the same number of samples at both batches; search around them (retune_lr). "
                + self.premise_text)

    @property
    def batches(self) -> str:
        """"batch 8 → 32", or for a change of processes "global batch 8 (1 × 8) → 32 (4 × 8)"."""
        if self.processes is None:
            return f"batch {self.old_batch} → {self.new_batch}"
        (n0, n1), per = self.processes, self.new_batch // self.processes[1]
        return f"global batch {self.old_batch} ({n0} × {per}) → {self.new_batch} ({n1} × {per})"

    def describe(self) -> str:
        return (f"{self.batches}: lr {self.old_lr:.3g} → {self.lr:.3g} "
                f"(range {self.low:.3g}–{self.high:.3g} over the noise scale's interval; {self.formula}); "
                f"linear rule {self.linear_lr:.3g}, square-root rule {self.sqrt_lr:.3g}. {self.noise.describe()} "
                + self.premise_text)


def predict(noise: NoiseScale, old_lr: float, old_batch: int, new_batch: int, optimizer: str = "adam",
            processes: tuple[int, int] | None = None) -> LrPrediction:
    """The prediction from a measured ``noise`` (see the module docstring for the formulas)."""
    lo, hi = ratio_range(noise, old_batch, new_batch, optimizer)
    point = lr_ratio(noise.b_simple, old_batch, new_batch, optimizer)
    return LrPrediction(old_batch=old_batch, new_batch=new_batch, old_lr=old_lr, optimizer=optimizer, noise=noise,
                        lr=old_lr * point, low=old_lr * min(lo, point), high=old_lr * max(hi, point),
                        processes=processes)


def target_batch(spec: Any, new_batch_size: int | None = None, nproc: int | None = None) -> int:
    """The new global batch: ``new_batch_size``, or ``spec.batch_size × nproc × spec.nnodes`` (the same batch per
    process on ``nproc`` data-parallel processes per machine). Exactly one of the two is given."""

    if (new_batch_size is None) == (nproc is None):
        raise SpecError("new_batch_size", new_batch_size, "a whole number ≥ 1, or nproc instead",
                        f"give new_batch_size (the new global batch) or nproc (processes of batch {spec.batch_size} "
                        f"each), exactly one; got new_batch_size={new_batch_size!r}, nproc={nproc!r}")
    if nproc is not None:
        return spec.batch_size * check_number("nproc", nproc, 1, 64, whole=True) * spec.nnodes
    return check_number("new_batch_size", new_batch_size, 1, whole=True)



def predict_lr(spec: Any, new_batch_size: int | None = None, noise: NoiseScale | None = None,
               optimizer: str = "adam", micro_batches: int = 2, store: Any = None, observer: Any = None,
               stop: Any = None, *, nproc: int | None = None, check_premise: bool = False) -> LrPrediction:
    """The learning rate for a new global batch from ``spec.lr`` at ``spec.global_batch`` (batch_size × nproc)
    and the gradient noise scale: ``noise`` if given, else the latest one stored for this job, else measured now
    (``noise_scale``, one process at the global batch).

    The new batch: ``new_batch_size`` (global), or ``nproc``: the same per-process batch on that many
    data-parallel processes (global batch ``spec.batch_size × nproc``, the seeds' "the global batch grows linearly
    with the number of workers"). ``optimizer``: "adam" (tcbench's own jobs train with AdamW: the surge form) or
    "sgd" (McCandlish's form).

    Every rule assumes ``spec.lr`` is near its optimum at its batch. ``check_premise=True`` checks it first
    (``check_lr``'s defaults: runs at lr × ½, 1, 2 over 3 seeds, 9 jobs of ``spec.steps``, up to 15 when it
    extends); when it fails, the
    prediction starts from the check's re-centred rate (``spec.replace(lr=premise.recentred_lr)``; unless ``noise``
    is given, the noise scale is then the one stored or measured at that rate) and says so. The check is in
    ``LrPrediction.premise`` (None: not checked)."""
    new = target_batch(spec, new_batch_size, nproc)
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer={optimizer!r} is not allowed; allowed: {', '.join(OPTIMIZERS)}")
    if not isinstance(check_premise, bool):
        raise SpecError("check_premise", check_premise, "True or False")
    premise = check_lr(spec, observer=observer, stop=stop, store=store) if check_premise else None
    if premise is not None and premise.held is False:
        spec = spec.replace(lr=premise.recentred_lr)
    if noise is None:
        noise = stored_noise_scale(spec, store) or noise_scale(spec, micro_batches, observer, stop, store)
    p = predict(noise, spec.lr, spec.global_batch, new, optimizer, None if nproc is None else (spec.nproc, nproc))
    return dataclasses.replace(p, premise=premise)
