"""What every job process shares, tcbench's worker and a user's script alike (``tcbench.job.track``): dying
with the parent, the CPU and memory meters, how an exception ends a job, and the messages both compose the
same way (the compiler announcement, the steady steps' scheduling, the job's ``End``).

Importing this module never imports torch.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

from tcbench.core.results import TRACE_DIR, TRACE_REPORT_DIR
from tcbench.core.spec import JobSpec
from tcbench.job.protocol import Channel, CompileTimes, Compiler, Counters, End, Log, Sched, Turn
from tcbench.job.backends import BackendUnavailable


def stdlib_first(path: list[str]) -> list[str]:
    """``path`` (a ``sys.path``) with the standard library's folders moved just after its first entry (the job's
    working folder), ahead of the caller's folders that PYTHONPATH put there: a ``profile.py`` or ``code.py`` lying
    in the caller's working folder never shadows the module of that name that torch imports, while the caller's
    own modules still come before site-packages."""
    import sys
    import sysconfig

    roots = tuple(os.path.realpath(sysconfig.get_paths()[k]) for k in ("stdlib", "platstdlib"))
    zipped = f"python{sys.version_info.major}{sys.version_info.minor}.zip"

    def std(p: str) -> bool:
        real = os.path.realpath(p) if p else ""
        return bool(real) and ("site-packages" not in real and "dist-packages" not in real) and (
            real in roots or real.startswith(tuple(r + os.sep for r in roots)) or os.path.basename(real) == zipped)

    head, rest = path[:1], path[1:]
    return [*head, *(p for p in rest if std(p)), *(p for p in rest if not std(p))]


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies (a kernel restart must not leave a job running)."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
        if str(os.getppid()) != os.environ.get("TCBENCH_PARENT_PID", str(os.getppid())):
            os._exit(1)                 # the parent died before the call: nobody to report to
    except (OSError, AttributeError):
        pass


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


class RssMeter:
    """CPU memory: the process's RSS high-water mark above the baseline taken after the model, optimizer and data
    are loaded. The heap is trimmed first (glibc's ``malloc_trim``): memory freed before the baseline but still
    resident (a launcher's imports, a child's own loading) would otherwise take part of the steps' allocations
    unseen, by an amount that differs between a forked and a new process (gpt2 tiny, Inductor, untrimmed: 74 MiB
    forked from a launcher that imported the compiler against 84-92 MiB spawned; trimmed: 98 against 101-118)."""

    def __init__(self) -> None:
        try:
            import ctypes

            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):   # not glibc: the baseline as it stands
            pass
        try:  # writing 5 to clear_refs resets VmHWM to the current RSS (Linux >= 4.0)
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            pass
        self.baseline = _status_kib("VmRSS") * 1024

    def peak_above_baseline(self) -> int:
        return max(_status_kib("VmHWM") * 1024 - self.baseline, 0)


def classify(exc: BaseException) -> str:
    """The status an exception ends a job with: unavailable, interrupted, oom or failed."""

    if isinstance(exc, BackendUnavailable):
        return "unavailable"
    if isinstance(exc, KeyboardInterrupt):   # SIGINT (Jupyter's "Interrupt kernel" signals the process group)
        return "interrupted"
    text = f"{type(exc).__name__}: {exc}".lower()
    if isinstance(exc, MemoryError) or "out of memory" in text or "resource_exhausted" in text or "oom" in text.split():
        return "oom"
    return "failed"


def sched_wait_s(main_only: bool = False) -> float | None:
    """Seconds this process's threads have been runnable but waiting for a CPU (Linux schedstat), or None.
    ``main_only``: the main thread's alone (a data-parallel rank: its communication threads wake for short work
    while the ranks' compute threads hold every core — the job's own wait, measured here at 10-12 % of the time
    on 2 cores against 3 % for the main thread — which must not read as another process)."""
    total = 0
    try:
        for tid in [str(os.getpid())] if main_only else os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                total += int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return total / 1e9


def cpu_jiffies() -> tuple[int, int] | None:
    """(steal, total) CPU time of the whole machine (/proc/stat): steal is what the hypervisor took."""
    try:
        with open("/proc/stat") as f:
            vals = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return (vals[7] if len(vals) > 7 else 0), sum(vals[:8])


def cpus_busy_s(cpus: tuple[int, ...] | None) -> float | None:
    """Seconds the CPUs ``cpus`` have been busy (not idle, not waiting for I/O) since boot, whoever ran on them
    (/proc/stat's per-CPU lines), or None."""
    if not cpus:
        return None
    wanted, busy = {f"cpu{c}" for c in cpus}, 0
    try:
        with open("/proc/stat") as f:
            for line in f:
                name, *vals = line.split()
                if name in wanted:
                    v = [int(x) for x in vals[:8]]
                    busy += sum(v) - v[3] - v[4]   # minus idle and iowait
                    wanted.discard(name)
    except (OSError, ValueError):
        return None
    return None if wanted else busy / os.sysconf("SC_CLK_TCK")


def gpu_env() -> dict:
    """GPU name, CUDA version and driver when a GPU is present (stored with the run's environment)."""
    import torch

    if not torch.cuda.is_available():
        return {}
    env = {"gpu": torch.cuda.get_device_name(0), "gpu_count": torch.cuda.device_count(), "cuda": torch.version.cuda,
           "gpu_capability": ".".join(map(str, torch.cuda.get_device_capability(0)))}
    try:
        import subprocess

        env["gpu_driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                           capture_output=True, text=True, timeout=10).stdout.split("\n")[0].strip()
    except (OSError, subprocess.SubprocessError):
        env["gpu_driver"] = None
    return env


# -- messages the worker and a script's tracker compose alike ----------------------------------------------------
def announce(chan: Channel, spec: JobSpec) -> None:
    """The backend's announcement: a log line for eager; the ``Compiler`` message and its log lines for a compiler."""
    if not spec.compiled:
        chan.send(Log(line="[tcbench] native PyTorch (eager), no compiler configured"))
        return
    chan.send(Compiler(backend=spec.backend, mode=spec.compile_mode, precision=spec.precision, debug=spec.debug,
                       scope=spec.compile_scope, optimizer=spec.compile_optimizer, cpp_wrapper=spec.cpp_wrapper))
    chan.send(Log(line=f"[tcbench] Found configuration for compiler {spec.backend}. Configuring tcbench "
                       f"{spec.backend} backend (mode={spec.compile_mode}, scope={spec.compile_scope}, "
                       f"compile_optimizer={spec.compile_optimizer}, cpp_wrapper={spec.cpp_wrapper}, "
                       f"precision={spec.precision}) ..."))
    if spec.debug:
        chan.send(Log(line=f"[tcbench] {spec.backend} compiler set to debug mode: its report is kept in the run's "
                           "artifacts"))


def job_cpus(threads: int, world_size: int, usable: set[int] | None = None) -> tuple[int, ...] | None:
    """The CPUs a job of ``threads`` threads steps on: the last ``threads`` of those it may use (``usable``, default
    this process's). None (not pinned): a data-parallel job (its ranks share the cores), ``threads`` covering every
    usable CPU, or ``TCBENCH_PIN=0``. The runner starts the next round's launcher on the others (``zygote_client``)."""
    cpus = sorted(os.sched_getaffinity(0) if usable is None else usable)
    if world_size > 1 or threads < 1 or threads >= len(cpus) or os.environ.get("TCBENCH_PIN", "1") == "0":
        return None
    return tuple(cpus[-threads:])


def pin_cpus(threads: int, world_size: int) -> tuple[int, ...] | None:
    """Pin every thread of this job to ``job_cpus``, for its steady steps: every job of a comparison then runs on
    the same cores (it no longer wanders between them, and the kernel's interrupts and other processes tend to land
    on CPU 0 first). The warmup stays unpinned, so a compiler's worker processes keep every core. None: not pinned
    (see ``job_cpus``)."""
    cpus = job_cpus(threads, world_size)
    if cpus is None:
        return None
    for tid in os.listdir("/proc/self/task"):   # sched_setaffinity(0) would pin the calling thread only
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:   # a thread that ended meanwhile
            pass
    return cpus


def steady_start(main_only: bool = False, cpus: tuple[int, ...] | None = None) -> tuple:
    """Where the steady steps begin: (wall, CPU, run-queue wait, machine jiffies, busy seconds of the pinned
    ``cpus``), for ``send_sched``. ``main_only`` None: no run-queue wait (see ``send_sched``)."""
    wait = None if main_only is None else sched_wait_s(main_only)
    return time.perf_counter(), time.process_time(), wait, cpu_jiffies(), cpus_busy_s(cpus)


TURNS_ENV = "TCBENCH_TURNS"   # "<fifo path>:<steps per turn>": the job runs in lock-step with others (runner.turns)


class TurnGate:
    """A lock-step job's gate (``tcbench.runner.turns``): before each block of ``block`` measured steps it says so
    (a ``Turn`` message) and waits for one byte on the FIFO the runner writes to when it is this job's turn."""

    def __init__(self, path: str, block: int) -> None:
        self.fd = os.open(path, os.O_RDONLY)   # the runner holds it open for writing: no wait here
        self.block = block

    @classmethod
    def from_env(cls) -> "TurnGate | None":
        value = os.environ.get(TURNS_ENV)
        if not value:
            return None
        path, _, block = value.rpartition(":")
        return cls(path, int(block))

    def starts_block(self, step: int, warmup: int) -> bool:
        return step >= warmup and (step - warmup) % self.block == 0

    def wait(self) -> None:
        if not os.read(self.fd, 1):   # the runner closed its end: it gives no turns any more
            raise RuntimeError("lock-step: the runner stopped giving this job turns")

    def take(self, chan: Channel, step: int, since: tuple | None, spans: tuple | None,
             main_only: bool | None = False, cpus: tuple[int, ...] | None = None) -> tuple:
        """Before a block that starts at ``step`` (the worker's and a script tracker's alike): the steady span since
        ``since`` added to ``spans``, the ``Turn`` sent, this job's turn waited for; (the spans, the new start of
        the steady steps, ``steady_start``). The wait is in neither."""
        if since is not None:
            spans = add_spans(spans, steady_span(since, main_only, cpus))
        chan.send(Turn(step=step))
        self.wait()
        return spans, steady_start(main_only=main_only, cpus=cpus)


def steady_span(since: tuple, main_only: bool | None = False, cpus: tuple[int, ...] | None = None) -> tuple:
    """What passed since ``since`` (``steady_start``): (wall, CPU, run-queue wait, (steal, all) machine jiffies,
    busy seconds of ``cpus``); a part that cannot be read is None."""
    now = steady_start(main_only, cpus)
    wait = None if now[2] is None or since[2] is None else now[2] - since[2]
    jiffies = None
    if now[3] and since[3]:
        jiffies = (now[3][0] - since[3][0], now[3][1] - since[3][1])
    busy = None if now[4] is None or since[4] is None else now[4] - since[4]
    return now[0] - since[0], now[1] - since[1], wait, jiffies, busy


def add_spans(a: tuple | None, b: tuple) -> tuple:
    """Two ``steady_span`` results summed (a part unknown in either is unknown)."""
    if a is None:
        return b
    def plus(x: Any, y: Any) -> Any:
        return None if x is None or y is None else x + y

    jiffies = None if a[3] is None or b[3] is None else (a[3][0] + b[3][0], a[3][1] + b[3][1])
    return a[0] + b[0], a[1] + b[1], plus(a[2], b[2]), jiffies, plus(a[4], b[4])


def send_sched(chan: Channel, since: tuple | None, main_only: bool | None = False,
               cpus: tuple[int, ...] | None = None, before: tuple | None = None) -> None:
    """Over the steady steps since ``since`` (``steady_start``), plus the spans summed in ``before`` (a lock-step
    job's earlier turns; its waits for a turn are in neither): wall, CPU and run-queue wait seconds (the parent
    derives the shares); ``main_only``: the wait is the main thread's (``sched_wait_s``), None: no wait at all;
    ``cpus``: the CPUs the steps were pinned to (``pin_cpus``), with the share of their time other processes used
    (their busy time minus this process's CPU time, over wall x CPUs)."""
    if since is None and before is None:
        return
    span = before if since is None else add_spans(before, steady_span(since, main_only, cpus))
    wall, cpu, wait, jiffies, busy = span
    steal = others = None
    if jiffies and jiffies[1] > 0:
        steal = jiffies[0] / jiffies[1]
    if busy is not None and cpus and wall > 0:
        others = min(max((busy - cpu) / (wall * len(cpus)), 0.0), 1.0)
    chan.send(Sched(wall_s=wall, cpu_s=cpu, wait_s=None if main_only is None else wait, steal_share=steal,
                    wait_main_only=bool(main_only), cpus=None if cpus is None else list(cpus), others_share=others))


def send_after_warmup(chan: Any, backend: Any, counters: dict) -> None:
    """What the compiler did by the end of warmup: its counters, and where its compile time went (a compiler whose
    timing cannot be read only says so in the log: the figures are a detail, the job goes on)."""
    chan.send(Counters(when="after_warmup", counters=counters))
    try:
        phases = backend.compile_phases() if hasattr(backend, "compile_phases") else None
    except Exception as exc:  # noqa: BLE001 - a renamed torch internal must not end the job
        chan.send(Log(line=f"[tcbench] compile phases not read: {type(exc).__name__}: {exc}"[:300]))
        return
    if phases is not None:
        chan.send(CompileTimes(**dataclasses.asdict(phases)))


def finish(chan: Channel, backend: Any, spec: JobSpec, run_dir: str, status: str, error: str) -> None:
    """The job's ``End`` with the backend's counters and diagnostics (with debug: its compiler report, and its
    compile trace's HTML report where the backend keeps a trace)."""
    counters = backend.counters()
    if spec.debug:
        path = os.path.join(run_dir, f"{spec.backend}-compiler-report.txt")
        with open(path, "w") as f:
            f.write(backend.report())
        chan.send(Log(line=f"[tcbench] compiler report written to {path}"))
        if hasattr(backend, "trace_report"):
            told = backend.trace_report(os.path.join(run_dir, TRACE_DIR), os.path.join(run_dir, TRACE_REPORT_DIR))
            chan.send(Log(line=f"[tcbench] {told}"))
    noise = backend.noise_samples() if hasattr(backend, "noise_samples") else []
    chan.send(End(status=status, error=error, counters=counters, diagnostics=backend.diagnostics(),
                  noise=noise or None))


def thread_names() -> list[str]:
    """Each thread's name (``/proc/self/task/<tid>/comm``; "?" for one that ended meanwhile), this one first."""
    names = []
    for tid in sorted(os.listdir("/proc/self/task"), key=lambda t: t != str(os.getpid())):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                names.append(f.read().strip())
        except OSError:
            names.append("?")
    return names
