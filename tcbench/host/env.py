"""The environment a job ran in, stored with every run: versions, CPU, threads, GPU, load, host.

Read in the parent without importing torch (package metadata, /proc); the job adds what only it
can see (GPU name and driver) and the parent adds the load at the job's end. Reports are built
from what is stored, never from the machine that renders them.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import platform
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from tcbench.core.profiles import cpu_model
from tcbench.host.requirements import DIST, installed_version

_PACKAGES = ("torch", "torch_xla", "transformers")


def _commit() -> str | None:
    """The git commit of the tcbench source this process runs (with ``+dirty`` for local changes), if any."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (head + ("+dirty" if dirty else "")) or None


def torch_version() -> str | None:
    """torch's full version, as ``torch.__version__`` (and ``torch.utils.collect_env``) give it: ``2.9.0+cu128``,
    whose local label names the build (CUDA 12.8, CPU, ROCm) that the wheel's metadata (``2.9.0``) leaves out.
    Read from ``torch/version.py`` without importing torch; None when torch is not installed."""
    torch = sys.modules.get("torch")
    if isinstance(getattr(torch, "__version__", None), str):
        return str(torch.__version__)
    try:
        spec = importlib.util.find_spec("torch")   # finds the package without running it
    except (ImportError, ValueError):
        spec = None
    for folder in (spec and spec.submodule_search_locations) or ():
        try:
            text = (Path(folder) / "version.py").read_text(encoding="utf-8")
        except OSError:
            continue
        m = re.search(r"^__version__\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", text, re.M)
        if m:
            return m.group(1)
    return installed_version("torch")


@functools.lru_cache(maxsize=1)
def static_env() -> dict[str, Any]:
    """What does not change while this process lives (read once)."""
    env: dict[str, Any] = {"tcbench": installed_version(DIST), **{name: installed_version(name) for name in _PACKAGES}}
    env["torch"] = torch_version()
    env.update(commit=_commit(), python=platform.python_version(), cpu=cpu_model(), cores=os.cpu_count(),
               cores_usable=len(os.sched_getaffinity(0)), host=socket.gethostname(),
               platform=platform.platform(terse=True))
    return env


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (``/proc/cpuinfo``: ``avx512_bf16``, ``amx_bf16``, ...); empty where unreadable."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


# the CPU features Inductor's C++ code generation picks its vector instructions by (torch._inductor.cpu_vec_isa)
_CODEGEN_FLAGS = ("avx2", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16", "avx512_fp16", "amx_tile",
                  "amx_bf16", "amx_int8", "avx512_vnni", "avx_vnni", "asimd", "sve", "vsx", "zvector")


def codegen_key(threads: int) -> str:
    """The name of the compile cache folder for jobs of ``threads`` threads on this CPU: what compiled CPU code
    specialises on and a cache key may leave out. Inductor bakes the OpenMP thread count into its kernels and
    torch 2.9's FX graph cache key does not hold it (pytorch/pytorch#110611, #160812, #167463): kernels compiled
    for 1 thread, served to a 2-thread job from a shared cache, made a small BERT 25-50 % slower. A folder per
    thread count and per CPU vector ISA (a TCBENCH_HOME shared between machines) makes a hit a hit for this job."""
    isa = hashlib.sha256(" ".join(sorted(cpu_flags() & set(_CODEGEN_FLAGS))).encode()).hexdigest()[:8]
    return f"threads-{int(threads)}-{platform.machine() or 'cpu'}-{isa}"


def load_now() -> dict[str, Any]:
    """The load average (1, 5, 15 min) and the runnable / total processes right now (/proc/loadavg)."""
    try:
        with open("/proc/loadavg") as f:
            parts = f.read().split()
        running, total = parts[3].split("/")
        return {"loadavg": [float(x) for x in parts[:3]], "runnable": int(running), "processes": int(total)}
    except (OSError, ValueError, IndexError):
        one, five, fifteen = os.getloadavg()
        return {"loadavg": [one, five, fifteen], "runnable": None, "processes": None}


def job_env(threads: int) -> dict[str, Any]:
    """The environment of a job starting now with ``threads`` CPU threads."""
    return {**static_env(), "threads": threads, "load_start": load_now()}


def describe(env: dict[str, Any]) -> str:
    """One line for a report's header or a terminal."""
    if not env:
        return "environment not recorded (a run from before tcbench stored it)"
    gpu = f" · GPU {env['gpu']} (driver {env.get('gpu_driver') or '?'})" if env.get("gpu") else " · no GPU"

    def load(k: str) -> str:
        return f"{env[k]['loadavg'][0]:.2f}" if env.get(k) else "?"

    commit = f" ({env['commit']})" if env.get("commit") else ""
    pinned = f" on CPU {','.join(map(str, env['cpus']))}" if env.get("cpus") else ""
    return (f"tcbench {env.get('tcbench')}{commit} · Python {env.get('python')} · torch {env.get('torch')} · "
            f"torch_xla {env.get('torch_xla') or '–'} · transformers {env.get('transformers')} · {env.get('cpu')}, "
            f"{env.get('cores')} cores, {env.get('threads')} thread(s) per job{pinned}{gpu} · "
            f"load {load('load_start')} at start, {load('load_end')} at end · host {env.get('host')}")
