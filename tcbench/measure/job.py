"""One job's figures from what it reported: the inputs ``metrics.job_figures`` takes (the batch its samples/s
count, its threads' wait for a CPU, the MFU reference), the compile counters, the data-parallel all-reduce, the
held-out loss's standard error and the gradient noise scale's steps. Pure functions over plain data (step
records, the values of the job's messages, spec fields); the runner stores what they return.
"""

from __future__ import annotations

import math
import statistics
from statistics import median
from typing import Any, Sequence

from tcbench.core.extras import AllReduceSummary, NoiseScale, SchedTimes
from tcbench.core.results import JobFigures, StepRecord
from tcbench.core.spec import JobSpec
from tcbench.measure.metrics import job_figures
from tcbench.measure.noise_scale import estimate
from tcbench.core.profiles import profile


def counted_batch_size(spec: JobSpec, records: Sequence[StepRecord]) -> int:
    """The batch samples/s is counted with: a script's own per-step batch (samples_s x step_s), else the spec's."""
    sizes = [r.samples_s * r.step_s for r in records if not r.warmup and r.samples_s and r.step_s]
    return max(1, round(median(sizes))) if spec.script is not None and sizes else spec.batch_size


def wait_share(sched: SchedTimes | None, threads: int) -> float | None:
    """The share of the steady time the job's threads were runnable but waiting for a CPU, from its ``Sched``
    values: over wall x threads, or over wall alone when the wait is a data-parallel rank's main thread's."""
    if sched is None or sched.wait_s is None or not sched.wall_s:
        return None
    waiting = 1 if sched.wait_main_only else threads   # a rank's main thread alone, or every thread
    return sched.wait_s / (sched.wall_s * waiting)


def datasheet_peak(profile_name: str, precision: str) -> dict:
    """The profile's datasheet peak for ``precision`` as an MFU reference (``probe`` shape), or why there is none."""

    try:
        tflops = profile(profile_name).peak_tflops.get(precision)
    except Exception:  # noqa: BLE001 - a profile without a figure: MFU says so
        tflops = None
    if not tflops:
        return {"error": f"the profile {profile_name!r} has no {precision} datasheet peak"}
    return {"flops": tflops * 1e12, "disturbed": "", "source": f"{profile_name} datasheet"}


def mfu_reference(device: str, spec: JobSpec, probe: dict) -> dict:
    """The peak MFU is measured against: on a GPU the profile's datasheet peak, else the matmul probe's."""
    return datasheet_peak(spec.profile, spec.precision) if device.startswith("cuda") else probe


def compile_counts(counters: dict | None, after_warmup: dict | None) -> dict:
    """Recompiles after warmup (the ``End`` counters minus those after warmup) and graph breaks, None if unknown."""
    counters, warm = counters or {}, after_warmup or {}
    recompiles = counters["compiles"] - warm["compiles"] if "compiles" in counters and "compiles" in warm else None
    return {"recompiles_after_warmup": recompiles, "graph_breaks": counters.get("graph_breaks")}


def figures(records: Sequence[StepRecord], spec: JobSpec, probe: dict, threads: int, sched: SchedTimes | None,
            device: str = "cpu", **given: Any) -> JobFigures:
    """A job's figures (``metrics.job_figures``) from its records, its spec, the MFU reference, its threads, its
    ``Sched`` values and ``given``: what it reported itself (n_params, flops_per_step, ``compile_counts``).
    A job that waits on others (a data-parallel rank for the gradients) or on its ``device`` (a CUDA job's host
    thread sleeps in each step's synchronisation) ``blocks``: its CPU share says nothing about other processes."""
    return job_figures(records, counted_batch_size(spec, records), spec.warmup_steps, threads=threads,
                       wait_share=wait_share(sched, threads), steal_share=sched.steal_share if sched else None,
                       others_share=sched.others_share if sched else None, probe=probe,
                       blocks=spec.world_size > 1 or device.startswith("cuda"), **given)


def allreduce_summary(rows: Sequence[Sequence], records: Sequence[StepRecord],
                      warmup_steps: int) -> AllReduceSummary | None:
    """The steady steps' gradient all-reduce from rows ``[step, bytes, seconds, buckets]``: bytes and milliseconds
    per step (median, IQR) and its share of the step (communication / step time; the buckets overlap the backward,
    so this bounds what overlap could hide). None without a steady row."""
    rows = [r for r in rows if r[0] >= warmup_steps]
    if not rows:
        return None
    steps = {rec.step: rec.step_s for rec in records}
    ms = sorted(r[2] * 1e3 for r in rows)
    q = statistics.quantiles(ms, n=4) if len(ms) > 1 else [ms[0]] * 3
    shares = [r[2] / steps[r[0]] for r in rows if steps.get(r[0])]
    return AllReduceSummary(bytes_per_step=int(median(r[1] for r in rows)), ms_median=q[1], ms_q1=q[0], ms_q3=q[2],
                            buckets=rows[-1][3], steps=len(rows), share_of_step=median(shares) if shares else None)


def standard_error(values: Sequence[float]) -> float | None:
    """The standard error of the mean of ``values`` (a held-out loss over its batches); None for fewer than 2."""
    return statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else None


def noise_steps(samples: Sequence[dict], warmup_steps: int) -> list[dict]:
    """The steps the gradient noise scale is estimated from: the steady ones, their later half when there are at
    least 4 (it grows as the loss falls)."""
    steady = list(samples[warmup_steps:])
    return steady[len(steady) // 2:] if len(steady) >= 4 else steady


def job_noise_scale(samples: Sequence[dict], spec: JobSpec, run_id: int | None = None) -> tuple[NoiseScale | None, str]:
    """(the job's ``NoiseScale``, "") or (None, why not: too few steady steps)."""
    try:
        est = estimate(noise_steps(samples, spec.warmup_steps), spec.batch_size,
                       spec.batch_size // spec.noise_micro_batches, run_id=run_id, seed=spec.seed,
                       precision=spec.precision)
    except ValueError as exc:   # too few steady steps (the job ended early)
        return None, str(exc)
    return est, ""
