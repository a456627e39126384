"""Peak-FLOPs probe: the best dense matmul rate this machine reaches with a job's thread count, per dtype.

The measurement runs in its own process (``python -m tcbench.host.probe <threads>``) so the caller never
imports torch. It records its own spread and the share of wall time it had the CPU: a probe that
was disturbed (another process ran) is marked so and gives no MFU. Undisturbed probes are cached in
the store per host, threads, dtype and torch version and read back by later sessions.

A probe costs a process that imports torch (3-10 s on 2 cores) before the job that asked for it starts, so one runs
at a time (the jobs of a lock-step round ask together, and three probes on 2 cores disturb each other), and a
disturbed one is measured again only after ``RETRY_S``: on a busy machine every retry is disturbed too, and every job
of a comparison paid one (measured on a demo: 5-12 s of each 43 s round, all 9 probes disturbed).
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from typing import Any
from tcbench.host.env import static_env

PROBE_MAX_AGE_S = 30 * 86400
DISTURBED_SPREAD = 0.15     # median repetition more than 15 % slower than the best
DISTURBED_CPU_SHARE = 0.8   # the probe had the CPU less than 80 % of its wall time (x threads)
RETRY_S = 300.0             # a disturbed probe is measured again by a job that starts this long after it, not sooner
_SESSION: dict[tuple, dict] = {}   # this process's probes: undisturbed ones for good, disturbed ones for RETRY_S
_MEASURED_AT: dict[tuple, float] = {}   # when each of them was measured (time.monotonic())
_LOCK = threading.Lock()    # one probe at a time: the jobs of a lock-step round ask from threads of their own


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
    (once per session when undisturbed; a disturbed one is answered again for ``RETRY_S``, then measured anew).
    ``disturbed`` is "" or the reason the figure cannot be trusted.
    """

    env = static_env()
    host, torch_version = socket.gethostname(), env.get("torch") or ""
    key = (host, threads, dtype, torch_version)
    with _LOCK:
        return _peak_flops(key, store)


def _peak_flops(key: tuple, store: Any) -> dict:
    host, threads, dtype, torch_version = key
    known = _SESSION.get(key)
    if known is not None and not (known.get("disturbed")
                                  and time.monotonic() - _MEASURED_AT.get(key, -RETRY_S) >= RETRY_S):
        return known
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
    _SESSION[key], _MEASURED_AT[key] = entry, time.monotonic()
    if store is not None:
        store.add_probe("matmul_peak", host, m["flops"], m, threads=threads, dtype=dtype, torch=torch_version,
                        disturbed=entry["disturbed"])
    return entry


if __name__ == "__main__":
    print(json.dumps(measure(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "fp32")))
