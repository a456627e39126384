"""Fit this machine's all-reduce link (α, B) from measured all-reduces, for ``project_scaling(profiles=["this-machine"])``.

The measurement (gloo all-reduces timed through a DDP communication hook) is another module's business; this one
takes plain data: ``[{"bytes": D, "seconds": t}, ...]``, D the size of the all-reduced tensor (not the ring traffic).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable, Mapping

import numpy as np

from .projection import LinkAssumptions, _bad


def _samples(samples: Iterable[Mapping[str, Any]] | Any) -> tuple[np.ndarray, np.ndarray]:
    """(bytes, seconds) arrays from a list of dicts (or a DataFrame with those columns), each value checked."""
    if hasattr(samples, "to_dict"):   # a DataFrame
        samples = samples.to_dict("records")
    rows = list(samples) if samples is not None else []
    sizes, times = [], []
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise _bad(f"samples[{i}]", row, 'use a dict {"bytes": int, "seconds": float}')
        size, secs = row.get("bytes"), row.get("seconds")
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size <= 0:
            raise _bad(f"samples[{i}]['bytes']", size, "use a whole number of bytes > 0 (the all-reduced tensor's size)")
        if isinstance(secs, bool) or not isinstance(secs, (int, float, np.floating)) or not 0 < secs < math.inf:
            raise _bad(f"samples[{i}]['seconds']", secs, "use a number of seconds > 0")
        sizes.append(float(size))
        times.append(float(secs))
    return np.asarray(sizes), np.asarray(times)


def calibrate_link(samples: Iterable[Mapping[str, Any]], world_size: int = 2,
                   base: LinkAssumptions | None = None) -> LinkAssumptions:
    """The link of this machine, fitted from measured all-reduces among ``world_size`` processes.

    samples: ``[{"bytes": D, "seconds": t}, ...]`` with at least two distinct sizes D (bytes of the all-reduced
    tensor; not the ring traffic). Least squares on t = a + D / B_alg, then the ring model
    t = 2(N−1)·α + 2(N−1)/N · D / B gives α = a / (2(N−1)) and B = B_alg × 2(N−1)/N. A negative intercept (noise)
    is taken as α = 0. Returns ``base`` (default ``LinkAssumptions()``) with measured_gbytes_s = B / 1e9 and
    measured_alpha_s = α, used by ``project_scaling`` for the ``"this-machine"`` profile.
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 2:
        raise _bad("world_size", world_size, "use the whole number of processes that all-reduced, >= 2")
    if base is not None and not isinstance(base, LinkAssumptions):
        raise _bad("base", base, "use a tcbench.LinkAssumptions or None")
    sizes, times = _samples(samples)
    distinct = np.unique(sizes)
    if len(distinct) < 2:
        raise _bad("samples", f"{len(sizes)} samples of {len(distinct)} size(s)",
                   "measure at least 2 distinct sizes (bytes) to separate latency from bandwidth")
    design = np.column_stack([np.ones_like(sizes), sizes])
    (intercept, slope), *_ = np.linalg.lstsq(design, times, rcond=None)
    if not slope > 0:
        raise _bad("samples", f"slope {slope:.3g} s/byte",
                   "the seconds must grow with the bytes: measure larger sizes (e.g. 1 MiB to 64 MiB) or more repeats")
    steps = 2 * (world_size - 1)
    alpha = max(0.0, float(intercept)) / steps
    gbytes_s = (1.0 / float(slope)) * steps / world_size / 1e9
    rms = float(np.sqrt(np.mean((design @ np.array([intercept, slope]) - times) ** 2)))
    source = (f"fitted on this machine from {len(sizes)} all-reduces of {len(distinct)} sizes among {world_size} "
              f"processes: α = {alpha * 1e6:.3g} µs per ring step, B = {gbytes_s:.3g} GB/s (residual RMS "
              f"{rms * 1e3:.3g} ms){'; the negative intercept was taken as α = 0' if intercept < 0 else ''}")
    base = base or LinkAssumptions()
    return dataclasses.replace(base, measured_gbytes_s=gbytes_s, measured_alpha_s=alpha,
                               source=f"{base.source}; {source}")
