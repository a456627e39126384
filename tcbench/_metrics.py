"""Figures from step records, exactly as DESIGN.md's measurement protocol defines them."""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
from typing import Any, Sequence

from ._results import StepRecord

# Loss parity: compiled and native runs use the same seed and data order, but with dropout on they
# draw different masks, so parity is a tolerance on the mean of the last LOSS_WINDOW logged losses.
LOSS_WINDOW = 5
LOSS_ATOL = 0.05
LOSS_RTOL = 0.10

WARN_SPEEDUP = 0.95
WARN_COMPILE_S = 120.0
WARN_MEMORY_RATIO = 0.9


def steady(records: Sequence[StepRecord]) -> list[StepRecord]:
    return [r for r in records if not r.warmup]


def job_figures(records: Sequence[StepRecord], batch_size: int, warmup_steps: int,
                flops_per_step: float | None, peak_flops: float | None) -> dict[str, Any]:
    """Median steady step, throughput, warmup time, compile latency, peak memory, MFU, final loss."""
    st = steady(records)
    warm = [r for r in records if r.warmup]
    fig: dict[str, Any] = {"median_step_s": None, "samples_s": None, "tokens_s": None, "compile_latency_s": None,
                           "mfu": None}
    fig["warmup_s"] = sum(r.step_s for r in warm) if warm else None
    fig["peak_mem_bytes"] = max((r.mem_bytes for r in records), default=None)
    losses = [r.loss for r in records if r.loss is not None]
    fig["final_loss"] = losses[-1] if losses else None
    if not st:
        return fig
    med = statistics.median(r.step_s for r in st)
    tokens = statistics.median(batch_size * r.seq_len for r in st)
    fig.update(median_step_s=med, samples_s=batch_size / med, tokens_s=tokens / med)
    if len(warm) == warmup_steps and warmup_steps > 0:
        fig["compile_latency_s"] = max(sum(r.step_s for r in warm) - warmup_steps * med, 0.0)
    if flops_per_step and peak_flops:
        fig["mfu"] = flops_per_step / med / peak_flops
    return fig


def loss_window(records: Sequence[StepRecord], n: int = LOSS_WINDOW) -> float | None:
    """Mean of the last n logged finite losses."""
    vals = [r.loss for r in records if r.loss is not None and r.loss == r.loss and abs(r.loss) != float("inf")]
    return statistics.fmean(vals[-n:]) if vals else None


def loss_parity(native: Sequence[StepRecord], compiled: Sequence[StepRecord]) -> tuple[bool | None, float | None]:
    """(within tolerance, |difference|) of the last-window mean losses; (None, None) without losses."""
    a, b = loss_window(native), loss_window(compiled)
    if a is None or b is None:
        return None, None
    diff = abs(a - b)
    return diff <= max(LOSS_ATOL, LOSS_RTOL * abs(a)), diff


def break_even_steps(compile_latency_s: float | None, native_step_s: float | None,
                     compiled_step_s: float | None) -> float | None:
    """Steps after which compiling has paid for itself; inf when the compiled step is not faster."""
    if compile_latency_s is None or native_step_s is None or compiled_step_s is None:
        return None
    gain = native_step_s - compiled_step_s
    if gain <= 0:
        return float("inf")
    return compile_latency_s / gain


def warnings_for(speedup: float | None, compile_latency_s: float | None, memory_ratio: float | None,
                 recompiles: int | None) -> list[str]:
    """The protocol's warnings, in words a student understands."""
    out = []
    if speedup is not None and speedup < WARN_SPEEDUP:
        out.append(f"slower: the compiled step takes {1 / speedup:.2f}× the native step (speedup {speedup:.2f} < {WARN_SPEEDUP})")
    if compile_latency_s is not None and compile_latency_s > WARN_COMPILE_S:
        out.append(f"long compile: {compile_latency_s:.0f} s of compile latency (> {WARN_COMPILE_S:.0f} s)")
    if memory_ratio is not None and memory_ratio < WARN_MEMORY_RATIO:
        out.append(f"memory regression: compiled peak is {1 / memory_ratio:.2f}× the native peak")
    if recompiles:
        out.append(f"recompilations after warmup: {recompiles} (new input shapes? pad to max_length)")
    return out


_PEAK_CACHE: dict[tuple[str, int], dict] = {}


def peak_flops(threads: int | None = None, store: Any = None) -> dict:
    """Matmul peak (FLOP/s per dtype) on this machine; measured once per session in a child process."""
    threads = threads or len(os.sched_getaffinity(0))
    key = (socket.gethostname(), threads)
    if key not in _PEAK_CACHE:
        out = subprocess.run([sys.executable, "-m", "tcbench._probe", str(threads)], capture_output=True, text=True,
                             timeout=300, env={**os.environ, "USE_TORCH_XLA": "0"})
        if out.returncode != 0:
            raise RuntimeError(f"the peak-FLOPs probe failed: {out.stderr[-500:]}")
        _PEAK_CACHE[key] = json.loads(out.stdout.strip().splitlines()[-1])
        if store is not None:
            for dt in ("fp32", "bf16"):
                store.add_probe(f"matmul_peak_{dt}", key[0], _PEAK_CACHE[key][dt], _PEAK_CACHE[key])
    return _PEAK_CACHE[key]
