"""Peak-FLOPs probe: the best dense matmul rate this machine reaches with a job's thread count, per dtype.

The measurement runs in its own process (``python -m tcbench.host.probe <threads>``) so the caller never
imports torch. It records its own spread and the share of wall time it had the CPU: a probe that
was disturbed (another process ran) is marked so and gives no MFU. Undisturbed probes are cached in
the store per host, threads, dtype and torch version and read back by later sessions.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import time
from typing import Any
from tcbench.host.env import static_env

PROBE_MAX_AGE_S = 30 * 86400
DISTURBED_SPREAD = 0.15     # median repetition more than 15 % slower than the best
DISTURBED_CPU_SHARE = 0.8   # the probe had the CPU less than 80 % of its wall time (x threads)
_SESSION: dict[tuple, dict] = {}


def measure(threads: int, dtype: str, reps: int = 7, target_s: float = 0.05) -> dict:
    """{flops, spread, cpu_share, n} from ``reps`` timed n×n matmuls (child process). n grows from 256 until
    one matmul takes ``target_s`` (at most 2048): CPUs without bf16 units run bf16 100× slower than fp32."""
    import torch

    torch.set_num_threads(threads)
    dt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    n = 256
    while True:
        a, b = torch.randn(n, n, dtype=dt), torch.randn(n, n, dtype=dt)
        t0 = time.perf_counter()
        torch.mm(a, b)  # warms the kernels, and sizes the problem
        if time.perf_counter() - t0 >= target_s or n >= 2048:
            break
        n *= 2
    times, cpus = [], []
    for _ in range(reps):
        c0, t0 = time.process_time(), time.perf_counter()
        torch.mm(a, b)
        times.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    best = min(times)
    return {"flops": 2.0 * n**3 / best, "spread": statistics.median(times) / best - 1,
            "cpu_share": sum(cpus) / (sum(times) * threads), "n": n, "threads": threads}


def _disturbed(m: dict) -> str:
    reasons = []
    if m["spread"] > DISTURBED_SPREAD:
        reasons.append(f"its repetitions spread {m['spread']:.0%}")
    if m["cpu_share"] < DISTURBED_CPU_SHARE:
        reasons.append(f"it had the CPU {m['cpu_share']:.0%} of its wall time")
    return "; ".join(reasons)


def peak_flops(threads: int, dtype: str, store: Any = None) -> dict:
    """``{"flops", "disturbed", "spread", "cpu_share", "cached"}`` for this host, thread count, dtype and torch.

    Read from the store when an undisturbed probe of the last 30 days exists; else measured and stored
    (once per session when undisturbed). ``disturbed`` is "" or the reason the figure cannot be trusted.
    """

    env = static_env()
    host, torch_version = socket.gethostname(), env.get("torch") or ""
    key = (host, threads, dtype, torch_version)
    if key in _SESSION:
        return _SESSION[key]
    if store is not None:
        cached = store.latest_probe("matmul_peak", host, threads, dtype, torch_version, PROBE_MAX_AGE_S)
        if cached is not None:
            _SESSION[key] = {**cached, "disturbed": "", "cached": True}
            return _SESSION[key]
    try:
        out = subprocess.run([sys.executable, "-m", "tcbench.host.probe", str(threads), dtype], capture_output=True,
                             text=True, timeout=120,
                             env={**os.environ, "USE_TORCH_XLA": "0", "OMP_NUM_THREADS": str(threads)})
    except subprocess.TimeoutExpired:
        out = None
    if out is None or out.returncode != 0:
        why = "it took over 120 s" if out is None else out.stderr[-300:]
        _SESSION[key] = {"error": f"the peak-FLOPs probe failed: {why}"}   # not retried in this session
        return _SESSION[key]
    m = json.loads(out.stdout.strip().splitlines()[-1])
    entry = {**m, "disturbed": _disturbed(m), "cached": False}
    if not entry["disturbed"]:   # a disturbed probe is tried again by the next job
        _SESSION[key] = entry
    if store is not None:
        store.add_probe("matmul_peak", host, m["flops"], m, threads=threads, dtype=dtype, torch=torch_version,
                        disturbed=entry["disturbed"])
    return entry


if __name__ == "__main__":
    print(json.dumps(measure(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "fp32")))
