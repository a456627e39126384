"""The learning rate for a new batch size from the gradient noise scale (the formulas: ``tcbench.tuning.noise``'s
docstring, "The prediction")."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .noise import NoiseScale, noise_scale, stored_noise_scale

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
    g = lambda b: math.sqrt(b_noise / b) + math.sqrt(b / b_noise)
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

    def describe(self) -> str:
        return (f"batch {self.old_batch} → {self.new_batch}: lr {self.old_lr:.3g} → {self.lr:.3g} "
                f"(range {self.low:.3g}–{self.high:.3g} over the noise scale's interval; {self.formula}); "
                f"linear rule {self.linear_lr:.3g}, square-root rule {self.sqrt_lr:.3g}. {self.noise.describe()}")


def predict(noise: NoiseScale, old_lr: float, old_batch: int, new_batch: int, optimizer: str = "adam") -> LrPrediction:
    """The prediction from a measured ``noise`` (see the module docstring for the formulas)."""
    lo, hi = ratio_range(noise, old_batch, new_batch, optimizer)
    point = lr_ratio(noise.b_simple, old_batch, new_batch, optimizer)
    return LrPrediction(old_batch=old_batch, new_batch=new_batch, old_lr=old_lr, optimizer=optimizer, noise=noise,
                        lr=old_lr * point, low=old_lr * min(lo, point), high=old_lr * max(hi, point))



def predict_lr(spec: Any, new_batch_size: int, noise: NoiseScale | None = None, optimizer: str = "adam",
               micro_batches: int = 2, store: Any = None, observer: Any = None, stop: Any = None) -> LrPrediction:
    """The learning rate for ``new_batch_size`` from ``spec.lr`` at ``spec.batch_size`` and the gradient noise
    scale: ``noise`` if given, else the latest one stored for this job, else measured now (``noise_scale``).

    ``optimizer``: "adam" (tcbench's own jobs train with AdamW: the surge form) or "sgd" (McCandlish's form)."""
    from .._spec import check_number

    check_number("new_batch_size", new_batch_size, 1, whole=True)
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer={optimizer!r} is not allowed; allowed: {', '.join(OPTIMIZERS)}")
    if noise is None:
        noise = stored_noise_scale(spec, store) or noise_scale(spec, micro_batches, observer, stop, store)
    return predict(noise, spec.lr, spec.batch_size, new_batch_size, optimizer)
