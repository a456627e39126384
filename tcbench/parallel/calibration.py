"""Fit this machine's all-reduce link (α, B) from measured all-reduces, for
``project_scaling(profiles=["this-machine"])``.

The measurement is a data-parallel job's own: its DDP communication hook times every gradient bucket's all-reduce
(``JobResult.extra.allreduce_steps``); ``link_samples`` turns finished jobs into plain data,
``[{"bytes": D, "seconds": t}, ...]``, D the size of one all-reduced bucket (not the ring traffic), and
``calibrate_link`` takes either.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable, Mapping

import numpy as np

from tcbench.core.extras import JobExtras
from tcbench.parallel.projection import LinkAssumptions, bad_value


def link_samples(results: Iterable[Any]) -> "Any":
    """The measured all-reduces of finished data-parallel jobs (``JobResult``s of ``nproc`` > 1), one row per
    steady step: ``bytes`` and ``seconds`` of its average bucket, with ``run_id``, ``world_size`` and ``step`` —
    the samples ``calibrate_link`` fits. Jobs of different models give the different sizes it needs."""
    import pandas as pd

    rows = []
    for i, res in enumerate(results):
        extra = getattr(res, "extra", None)
        if not isinstance(extra, JobExtras):
            raise bad_value(f"results[{i}]", res, "use the JobResult of a finished data-parallel job (tc.run(spec))")
        steps = extra.allreduce_steps
        if not steps:
            raise bad_value(f"results[{i}]", f"run {getattr(res, 'run_id', None)} ({getattr(res, 'status', '?')})",
                       "use a job that ran with nproc > 1 and measured its all-reduce (extra.allreduce_steps)")
        warm = res.spec.warmup_steps
        for step, nbytes, secs, buckets in steps:
            if step >= warm and buckets and secs > 0:
                rows.append({"bytes": int(nbytes // buckets), "seconds": secs / buckets, "run_id": res.run_id,
                             "world_size": extra.world_size, "step": step})
    return pd.DataFrame(rows, columns=["bytes", "seconds", "run_id", "world_size", "step"])


def _samples(samples: Iterable[Mapping[str, Any]] | Any, world_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(bytes, seconds) arrays from a list of dicts (or a DataFrame with those columns) or of JobResults
    (``link_samples``), each value checked."""
    rows = list(samples) if samples is not None and not hasattr(samples, "to_dict") else samples
    if isinstance(rows, list) and rows and all(hasattr(r, "extra") for r in rows):
        rows = link_samples(rows)
        other = sorted({int(w) for w in rows["world_size"].dropna()} - {world_size})
        if other:
            raise bad_value("world_size", world_size, f"use the jobs' own process count: they ran with {other}")
    if hasattr(rows, "to_dict"):   # a DataFrame
        rows = rows.to_dict("records")
    rows = list(rows) if rows is not None else []
    sizes, times = [], []
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise bad_value(f"samples[{i}]", row, 'use a dict {"bytes": int, "seconds": float}')
        size, secs = row.get("bytes"), row.get("seconds")
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size <= 0:
            raise bad_value(f"samples[{i}]['bytes']", size,
                            "use a whole number of bytes > 0 (the all-reduced tensor's size)")
        if isinstance(secs, bool) or not isinstance(secs, (int, float, np.floating)) or not 0 < secs < math.inf:
            raise bad_value(f"samples[{i}]['seconds']", secs, "use a number of seconds > 0")
        sizes.append(float(size))
        times.append(float(secs))
    return np.asarray(sizes), np.asarray(times)


def calibrate_link(samples: Iterable[Mapping[str, Any]], world_size: int = 2,
                   base: LinkAssumptions | None = None) -> LinkAssumptions:
    """The link of this machine, fitted from measured all-reduces among ``world_size`` processes.

    samples: ``[{"bytes": D, "seconds": t}, ...]`` with at least two distinct sizes D (bytes of the all-reduced
    tensor; not the ring traffic), or finished data-parallel jobs (``[tc.run(tiny), tc.run(small)]``: their
    measured buckets, ``link_samples``). Least squares on each size's median time, t = a + D / B_alg; then the
    ring model t = 2(N−1)·α + 2(N−1)/N · D / B gives α = a / (2(N−1)) and B = B_alg × 2(N−1)/N. A negative
    intercept (noise) is taken as α = 0. Returns ``base`` (default ``LinkAssumptions()``) with
    measured_gbytes_s = B / 1e9 and measured_alpha_s = α, used by ``project_scaling`` for the ``"this-machine"``
    profile.
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 2:
        raise bad_value("world_size", world_size, "use the whole number of processes that all-reduced, >= 2")
    if base is not None and not isinstance(base, LinkAssumptions):
        raise bad_value("base", base, "use a tcbench.LinkAssumptions or None")
    sizes, times = _samples(samples, world_size)
    distinct = np.unique(sizes)
    if len(distinct) < 2:
        raise bad_value("samples", f"{len(sizes)} samples of {len(distinct)} size(s)",
                   "measure at least 2 distinct sizes (bytes) to separate latency from bandwidth")
    # one point per size, its median time: a step's all-reduce also waits for the slower rank, and those waits
    # (heavy-tailed on a shared machine) would tilt a fit over every sample
    medians = np.array([np.median(times[sizes == d]) for d in distinct])
    (intercept, slope), *_ = np.linalg.lstsq(np.column_stack([np.ones_like(distinct), distinct]), medians, rcond=None)
    design = np.column_stack([np.ones_like(sizes), sizes])
    if not slope > 0:
        raise bad_value("samples", f"slope {slope:.3g} s/byte",
                   "the seconds must grow with the bytes: measure larger sizes (e.g. 1 MiB to 64 MiB) or more repeats")
    steps = 2 * (world_size - 1)
    alpha = max(0.0, float(intercept)) / steps
    gbytes_s = (1.0 / float(slope)) * steps / world_size / 1e9
    rms = float(np.sqrt(np.mean((design @ np.array([intercept, slope]) - times) ** 2)))
    source = (f"fitted on this machine from the median times of {len(sizes)} all-reduces of {len(distinct)} sizes "
              f"among {world_size} "
              f"processes: α = {alpha * 1e6:.3g} µs per ring step, B = {gbytes_s:.3g} GB/s (residual RMS "
              f"{rms * 1e3:.3g} ms){'; the negative intercept was taken as α = 0' if intercept < 0 else ''}")
    base = base or LinkAssumptions()
    return dataclasses.replace(base, measured_gbytes_s=gbytes_s, measured_alpha_s=alpha,
                               source=f"{base.source}; {source}")
