"""Peak-FLOPs probe: the best dense matmul rate this machine reaches, per dtype.

Run in its own process (``python -m tcbench._probe <threads>``) so the caller never imports torch;
MFU is model FLOPs per step / step time / this peak, all measured on the same machine.
"""

from __future__ import annotations

import json
import os
import sys
import time


def measure(threads: int, n: int = 2048, reps: int = 5) -> dict:
    import torch

    torch.set_num_threads(threads)
    out = {"threads": threads, "n": n}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        a = torch.randn(n, n, dtype=dtype)
        b = torch.randn(n, n, dtype=dtype)
        torch.mm(a, b)  # warm the kernels
        best = float("inf")
        for _ in range(reps):
            t0 = time.perf_counter()
            torch.mm(a, b)
            best = min(best, time.perf_counter() - t0)
        out[name] = 2.0 * n**3 / best
    return out


if __name__ == "__main__":
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else len(os.sched_getaffinity(0))
    print(json.dumps(measure(threads)))
