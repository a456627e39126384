"""The gradient noise scale from a job's per-step gradient norms (``tuning.prediction`` turns it into a learning rate).

**The measurement** (McCandlish, Kaplan, Amodei et al. 2018, "An Empirical Model of Large-Batch Training",
arXiv 1812.06162, appendix A.1). A job with ``noise_micro_batches=k`` splits each step's batch of B samples into
k micro-batches of b = B/k, takes each micro-batch's gradient g_i separately and trains on their mean (the same
update as one batch of B). Per step it sends |G_b|² = mean_i |g_i|² and |G_B|² = |mean_i g_i|²; since
E|G_b|² = |G|² + tr(Σ)/b, the unbiased estimates are

    |G|²  ≈ (B·|G_B|² − b·|G_b|²) / (B − b)          tr(Σ) ≈ (|G_b|² − |G_B|²) / (1/b − 1/B)

and B_simple = tr(Σ) / |G|², taken as the ratio of their means over the later half of the steady steps (the
long-run value of the exponential moving averages EleutherAI gpt-neox's ``gradient_noise_scale.py`` keeps). The
noise scale grows as the loss falls (McCandlish §3; measured here for tiny GPT-2 over its first 40 steps: ≈ 2
samples at steps 5–15, ≈ 6 at steps 25–40), so the later half stands for the rest of training better than the
start does; measure with the steps and learning rate the job will train with. The interval is a moving-
block bootstrap over steps (neighbouring steps are correlated). Each step's estimate is very noisy and |G|²
shrinks as training converges: when the interval's |G|² reaches 0 the noise scale is bounded below only
(``high`` is None) — the gradient is noise-dominated at this batch, and any batch up to ``low`` is "small".

**Mixed precision.** A bf16 or fp16 job is measured as it trains: its forward under autocast, the gradients those
of its fp32 parameters (fp16's loss scaled, the gradients unscaled before their norms). Its noise scale agrees with
the fp32 job's within the interval on tiny GPT-2 (tests/measure/test_noise.py); ``NoiseScale.precision``
says which it was.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from tcbench.core.extras import NoiseScale

BOOTSTRAP = 2000


def per_step(small_sq: np.ndarray, big_sq: np.ndarray, batch: int, micro: int) -> tuple[np.ndarray, np.ndarray]:
    """(tr(Σ), |G|²) estimates per step from |G_b|² and |G_B|² (McCandlish appendix A.1)."""
    if not 0 < micro < batch:
        raise ValueError(f"micro-batch {micro} must be between 0 and the batch {batch} (exclusive)")
    small, big = np.asarray(small_sq, float), np.asarray(big_sq, float)
    g2 = (batch * big - micro * small) / (batch - micro)
    tr = (small - big) / (1.0 / micro - 1.0 / batch)
    return tr, g2


def estimate(samples: Sequence[dict], batch: int, micro: int, run_id: int | None = None,
             seed: int = 0, precision: str = "fp32") -> NoiseScale:
    """The noise scale from per-step samples ``{"small_sq": |G_b|², "big_sq": |G_B|²}`` (the steady steps; a step
    whose norms are not finite, fp16's overflow, is left out); ``precision``: the job's, kept in the result."""
    rows = [s for s in samples if math.isfinite(s["small_sq"]) and math.isfinite(s["big_sq"])]
    if len(rows) < 2:
        raise ValueError(f"the gradient noise scale needs at least 2 measured steps; got {len(rows)}")
    tr, g2 = per_step(np.array([s["small_sq"] for s in rows]), np.array([s["big_sq"] for s in rows]), batch, micro)
    n = len(tr)
    mean_tr, mean_g2 = float(tr.mean()), float(g2.mean())
    ratios = np.sort(_bootstrap(tr, g2, seed))   # +inf where a resample's |G|² <= 0
    low, high = float(ratios[int(0.025 * len(ratios))]), float(ratios[int(0.975 * len(ratios)) - 1])
    return NoiseScale(b_simple=mean_tr / mean_g2 if mean_g2 > 0 else None,
                      low=max(low, 0.0) if math.isfinite(low) else None,
                      high=high if math.isfinite(high) else None, tr_sigma=mean_tr, g2=mean_g2, batch_size=batch,
                      micro_batch=micro, steps=n, run_id=run_id, precision=precision)


def _bootstrap(tr: np.ndarray, g2: np.ndarray, seed: int) -> np.ndarray:
    """Ratios of means over moving-block resamples of the steps (a resample whose |G|² <= 0 is +inf)."""
    n = len(tr)
    block = max(1, round(n ** (1 / 3)))
    starts = np.arange(n - block + 1)
    rng = np.random.default_rng(seed)
    picks = rng.choice(starts, size=(BOOTSTRAP, math.ceil(n / block)))
    idx = (picks[:, :, None] + np.arange(block)).reshape(BOOTSTRAP, -1)[:, :n]
    num, den = tr[idx].mean(axis=1), g2[idx].mean(axis=1)
    return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.inf)
