"""The warm launcher ("zygote"): one process that has imported torch, transformers and tcbench's job modules forks
one child per measured job, so a job starts in milliseconds instead of paying Python's start and those imports
(a tiny eager job's first step came 4 s sooner on 2 cores: benchmarks/startup.md). Each job is still a process of
its own: its memory, a crash, its compile caches stay in it.

Run as ``python -m tcbench.job.zygote <control-fd> [<cpus>]`` by the runner (``tcbench.runner.zygote_client``),
which turns it off with ``TCBENCH_LAUNCHER=spawn`` (default ``fork``). Start method: ``os.fork()``, called here
explicitly — not ``multiprocessing``, whose default start method Python 3.14 changed from fork to forkserver.

Forking is safe because nothing but imports happens before it: no tensor op, no OpenMP pool, no CUDA context, no
PJRT client (``unsafe_state`` checks, and the launcher refuses to fork unless it has exactly one thread, counted
in ``/proc/self/task``). Imports read the environment: transformers reads ``USE_TORCH_XLA``, libgomp
``OMP_NUM_THREADS``, torch ``TORCH_LOGS``, Inductor its config. So the launcher serves only jobs whose environment
is the one it was started with (the runner keys it on that), and only plain worker jobs (eager, inductor or xla, one
process, not ``debug``); a script, a torchrun job or a debug job is started as a new process. The XLA jobs'
launcher (its environment says ``USE_TORCH_XLA=1``) imports torch_xla too, which starts no thread and no runtime:
each child creates its own PJRT client (a spawned XLA job spent 6 of its 17 s importing before its first step).

The wire: a ``SOCK_SEQPACKET`` Unix socket pair, one JSON object per packet. The launcher sends
``{"ready": pid}`` once its imports are done (or ``{"error": why}`` and exits); a request ``{"id", "spec",
"run_dir", "cwd", "env"}`` comes with two descriptors (``socket.send_fds``): the write end of the job's message pipe
and its log file. The answer is ``{"id", "pid"}`` once the child leads its own process group (or ``{"id",
"error"}``), and ``{"exited": pid, "returncode": n}`` when the launcher has reaped it (a pidfd per child says
when). At the end of its control socket (the runner closed it, or died) the launcher kills its children's process
groups and exits; it also dies with the runner (``PR_SET_PDEATHSIG``).

A child becomes the job a new process would have been: its own session and process group, the parent-death
signal, the job's environment (``os.environ`` replaced; ``sys.path`` from its working folder and PYTHONPATH), its
working folder, stdout/stderr on the run's log file, default signal handlers, numpy's generator reseeded, the
launcher's file pages mapped (so that its RSS, and the memory figures taken from it, start where a new process's
would), then ``tcbench.job.worker.main`` and ``os._exit`` with its code — the launcher's ``atexit`` handlers are not
the job's (one of torch's deletes a folder the launcher and every other child share). ``/proc/<pid>/environ`` shows
a process's environment as it was at exec, so the launcher's keeps a slot for ``TCBENCH_RUN_DIR`` that each child
fills with its run folder: a dead job's leftovers are found by it (``tcbench.host.processes``). The launcher's own
environment differs from a job's in two ways only: that slot, and OpenBLAS kept to one thread
(``launcher_environ``).
"""

from __future__ import annotations

import atexit
import ctypes
import errno
import json
import os
import re
import select
import signal
import socket
import sys
import traceback
from typing import NoReturn, Sequence

from tcbench.job.process_tools import die_with_parent, stdlib_first, thread_names
from tcbench.core.catalog import MODELS

MAX_PACKET = 1 << 20
RUN_DIR = "TCBENCH_RUN_DIR"
RESERVE = 4096   # bytes of the launcher's initial TCBENCH_RUN_DIR: room for a child's run folder
PAGE = os.sysconf("SC_PAGE_SIZE")
MADV_POPULATE_READ = 22   # Linux >= 5.14


# -- the wire, both sides -------------------------------------------------------------------------------------
def send(sock: socket.socket, message: dict, fds: Sequence[int] = ()) -> None:
    socket.send_fds(sock, [json.dumps(message).encode()], list(fds))


def receive(sock: socket.socket) -> tuple[dict | None, list[int]]:
    """One message and the descriptors that came with it; (None, []) when the other side has closed."""
    data, fds, flags, _ = socket.recv_fds(sock, MAX_PACKET, 2)
    if not data or flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
        for fd in fds:
            os.close(fd)
        if data:
            raise ValueError(f"a launcher message longer than {MAX_PACKET} bytes or with more than 2 descriptors")
        return None, []
    return json.loads(data), fds


def launcher_environ(env: dict[str, str]) -> dict[str, str]:
    """The launcher's environment: the jobs' own without their run folder; two libraries without the threads they
    start at import (a fork needs one thread), unless the jobs ask for them: OpenBLAS without a thread pool (numpy's
    starts OMP_NUM_THREADS - 1 threads; torch computes with its own BLAS, so a forked job's numpy keeps one thread),
    and pyarrow's jemalloc without its background purging thread (pandas imports pyarrow where it is installed: on
    an H200 machine that thread alone kept every job from being forked); the run folder's slot last (a child
    overwrites the tail of the environment block, nothing after it)."""
    return {**{k: v for k, v in env.items() if k != RUN_DIR},
            "OPENBLAS_NUM_THREADS": env.get("OPENBLAS_NUM_THREADS", "1"),
            "JE_ARROW_MALLOC_CONF": env.get("JE_ARROW_MALLOC_CONF", "background_thread:false"), RUN_DIR: "-" * RESERVE}


# -- the launcher ---------------------------------------------------------------------------------------------
def preload() -> None:
    """Import what a job imports before its memory baseline (taken once model and data are loaded), so that a child
    starts with it: torch, Inductor's compiler (``torch.compile``'s first call imports it: 1.3 s of a forked gpt2-tiny
    Inductor job's 4.9 s here), transformers (which imports Dynamo) with the catalog's model classes (transformers
    imports a model's module on first access), tcbench's job modules. The memory a launcher's imports leave free but
    resident no longer lowers a child's peak: the baseline is taken on a trimmed heap (``RssMeter``)."""
    import numpy  # noqa: F401
    import tokenizers  # noqa: F401
    import torch  # noqa: F401
    import torch._inductor.compile_fx  # noqa: F401
    import transformers
    import transformers.modeling_utils  # noqa: F401

    import tcbench.job.backends  # noqa: F401
    import tcbench.job.data
    import tcbench.job.diagnostics  # noqa: F401
    import tcbench.job.models  # noqa: F401
    import tcbench.job.worker  # noqa: F401

    for info in MODELS.values():
        getattr(transformers, info.config_class), getattr(transformers, info.model_class)
    if os.environ.get("USE_TORCH_XLA") == "1":   # the XLA jobs' launcher (XlaBackend.job_env): no client, no thread
        import torch_xla.core.xla_model  # noqa: F401
        import torch_xla.debug.metrics  # noqa: F401
        import torch_xla.runtime  # noqa: F401
    tcbench.job.data.preload_shipped()   # the shipped task, read and encoded (the tokenizer's parallelism is off)


def mapped_file_pages() -> list[tuple[int, int]]:
    """(address, length) of each run of file-backed pages this process has mapped (its libraries' code and data
    that its imports touched), from /proc/self/pagemap's present bits."""
    import numpy as np

    runs: list[tuple[int, int]] = []
    with open("/proc/self/maps") as maps, open("/proc/self/pagemap", "rb", buffering=0) as pagemap:
        for line in maps:
            fields = line.split()
            if len(fields) < 6 or not fields[5].startswith("/") or not fields[1].startswith("r"):
                continue
            low, high = (int(x, 16) for x in fields[0].split("-"))
            entries = os.pread(pagemap.fileno(), (high - low) // PAGE * 8, low // PAGE * 8)
            present = (np.frombuffer(entries, dtype=np.uint64) >> np.uint64(63)).astype(np.int8)
            edges = np.flatnonzero(np.diff(np.concatenate(([0], present, [0]))))   # where runs start and end
            runs += [(low + int(a) * PAGE, int(b - a) * PAGE) for a, b in zip(edges[::2], edges[1::2])]
    return runs


# The CUDA driver's idle thread ("cuda00001800007") that NVML's device count starts: Inductor's import asks
# torch.cuda.is_available() (torch/_inductor/runtime/benchmarking.py), which under PYTORCH_NVML_BASED_CUDA_CHECK=1
# asks NVML and creates no CUDA context; nvmlShutdown does not end the thread. On an H200 (torch 2.11) a child forked
# beside it ran CUDA kernels and an Inductor compile (benchmarks/gpu.md, run 5). Allowed only while CUDA is not
# initialised: a context comes with threads of other names ("cuda-EvtHandlr"), which are refused.
DRIVER_THREAD = re.compile(r"cuda[0-9a-f]{8,}")


def unsafe_state() -> str:
    """Why forking this process now would be unsafe ("" when it is not): a thread beside this one (an OpenMP pool, a
    library's worker; the CUDA driver's idle thread, ``DRIVER_THREAD``, excepted), CUDA initialised, torch_xla's
    PJRT runtime initialised (importing torch_xla creates none)."""
    threads = thread_names()
    if len(threads) != 1 + sum(bool(DRIVER_THREAD.fullmatch(t)) for t in threads[1:]):
        return f"the launcher has {len(threads)} threads ({', '.join(threads)}); forking is only safe with one"
    if _xla_runtime_initialised():
        return "the launcher initialised torch_xla's PJRT runtime, which does not survive a fork"
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "the launcher initialised CUDA, which does not survive a fork"
    return ""


def _xla_runtime_initialised() -> bool:
    """Whether torch_xla, where this process imported it, has created its PJRT client (torch_xla 2.9's
    ``_XLAC._xla_runtime_is_initialized``; a torch_xla without it counts as initialised: never forked blind)."""
    if "torch_xla" not in sys.modules:
        return False
    xlac = sys.modules.get("_XLAC")
    check = getattr(xlac, "_xla_runtime_is_initialized", None)
    return check is None or bool(check())


class Launcher:
    """The serving loop: requests on the control socket, exits of children on their pidfds."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.pid = sock, os.getpid()
        self.poller = select.poll()
        self.poller.register(sock, select.POLLIN)
        self.children: dict[int, int] = {}   # pidfd -> pid
        ours = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        # sys.path less its first entry (this process's working folder) and PYTHONPATH's: what a child keeps
        self.base_path = [p for p in sys.path[1:] if p not in ours]
        self.file_pages = mapped_file_pages()

    def serve(self) -> None:
        """Until the control socket closes; the children are killed on the way out, however it ends."""
        try:
            while True:
                for fd, _ in self.poller.poll():
                    if fd in self.children:
                        self._reap(fd)
                        continue
                    request, fds = receive(self.sock)
                    if request is None:
                        return
                    self._answer(request, fds)
        finally:
            self._end_children()

    def _answer(self, request: dict, fds: list[int]) -> None:
        try:
            why = unsafe_state() or ("" if len(fds) == 2 else f"{len(fds)} descriptors instead of 2")
            pid = None if why else self._fork(request, fds)
        except OSError as exc:   # fork itself failed: memory, the process limit
            pid, why = None, f"fork failed: {exc}"
        finally:
            for fd in fds:
                os.close(fd)
        if pid is None:
            send(self.sock, {"id": request["id"], "error": why})
            return
        pidfd = os.pidfd_open(pid)
        self.children[pidfd] = pid
        self.poller.register(pidfd, select.POLLIN)
        send(self.sock, {"id": request["id"], "pid": pid})

    def _fork(self, request: dict, fds: list[int]) -> int:
        """Fork the job; returns once the child leads its own process group (or has died): the runner signals
        that group by the pid it is given."""
        ready_r, ready_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os.close(ready_r)
            run_child(self, request, fds, ready_w)
        os.close(ready_w)
        try:
            os.read(ready_r, 1)
        finally:
            os.close(ready_r)
        return pid

    def _reap(self, pidfd: int) -> None:
        pid = self.children.pop(pidfd)
        self.poller.unregister(pidfd)
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        send(self.sock, {"exited": pid, "returncode": os.waitstatus_to_exitcode(status)})

    def _end_children(self) -> None:
        for pidfd, pid in self.children.items():
            try:
                os.killpg(pid, signal.SIGKILL)   # the job and whatever it started
            except OSError:
                pass
            os.waitpid(pid, 0)
            os.close(pidfd)
        self.children.clear()


# -- a child --------------------------------------------------------------------------------------------------
def run_child(launcher: Launcher, request: dict, fds: list[int], ready_fd: int) -> NoReturn:
    """Become the job (see the module docstring), run the worker, exit with its code; never returns."""
    code = 1
    try:
        for fd in [launcher.sock.fileno(), *launcher.children]:   # the control socket, the other children's pidfds
            os.close(fd)
        os.setsid()
        msg_fd, log_fd = fds
        _take_stdio(log_fd)   # first: whatever fails from here is in the job's log
        _take_environment(request["env"], launcher.pid)
        die_with_parent()
        cwd = request["cwd"]
        paths = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
        _take_place(cwd, [cwd, *paths, *launcher.base_path])
        os.write(ready_fd, b".")
        os.close(ready_fd)
        _map_file_pages(launcher.file_pages)
        from tcbench.job import worker

        sys.argv = [worker.__file__, request["spec"], str(msg_fd), request["run_dir"]]
        code = worker.main(sys.argv[1:])
    except BaseException:  # noqa: BLE001 - whatever escaped the worker ends up in the job's log
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _take_environment(env: dict[str, str], parent: int) -> None:
    """The job's environment; its parent is the launcher (``die_with_parent`` checks the pid)."""
    os.environ.clear()
    os.environ.update(env, TCBENCH_PARENT_PID=str(parent))
    _show_run_dir(env.get(RUN_DIR, ""))


def _take_stdio(log_fd: int) -> None:
    """stdin from /dev/null, stdout and stderr to the run's log file."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)


def _take_place(cwd: str, path: list[str]) -> None:
    """Working folder, ``sys.path`` (as a new ``python -m`` there would have it), signals and seeds as a new
    Python process has them (the launcher ignores SIGINT)."""
    os.chdir(cwd)
    sys.path[:] = path
    signal.signal(signal.SIGINT, signal.default_int_handler)
    numpy = sys.modules.get("numpy")
    if numpy is not None:   # its global generator, seeded from the OS as in a new process (random reseeds itself)
        numpy.random.seed()


def _map_file_pages(runs: list[tuple[int, int]]) -> None:
    """Map the file pages the launcher has mapped, as a new process has them mapped after its imports: a fork
    shares them unmapped (Linux maps a child's file pages at first touch), so the job's steps would map them and
    its memory figures (RSS above the baseline taken before the steps) count them — 8 MiB more on gpt2 tiny,
    measured here. ≈ 30 ms for 340 MiB."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    for address, length in runs:
        if libc.madvise(address, length, MADV_POPULATE_READ) != 0 and ctypes.get_errno() == errno.EINVAL:
            for page in range(address, address + length, PAGE):   # before Linux 5.14: a read maps a page
                ctypes.c_char.from_address(page).value


def _show_run_dir(run_dir: str) -> None:
    """Write ``run_dir`` into the launcher's reserved TCBENCH_RUN_DIR slot, the last entry of the environment block
    ``/proc/self/environ`` shows; nothing else points there once ``os.environ`` is replaced. A slot that is not
    there (a launcher started by hand) or too short leaves the block as it is."""
    with open("/proc/self/stat", "rb") as f:
        stat = f.read()
    fields = stat[stat.rindex(b")") + 2:].split()
    start = int(fields[47])   # env_start, field 50 of proc(5); fields[0] is field 3
    with open("/proc/self/environ", "rb") as f:
        block = f.read()
    head = f"\0{RUN_DIR}=".encode()
    at = block.rfind(head) + len(head)
    value = run_dir.encode()
    room = len(block) - at - 1
    if at < len(head) or block[at:-1] != b"-" * room or len(value) > room:
        return
    ctypes.memmove(start + at, value + b"\0" * (room - len(value)), room)


def main(argv: list[str]) -> int:
    """``<control-fd> [<cpu>,<cpu>...]``: with CPUs, the launcher was started on a few CPUs only (one started ahead of
    need keeps off the cores a measured job steps on) and takes these back once its imports are done, for its
    children."""
    sock = socket.socket(fileno=int(argv[0]))
    die_with_parent()
    sys.path[:] = stdlib_first(sys.path)   # its imports (torch's of cProfile -> profile) never from the caller's folder
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the runner ends it (its socket, its death), never a Ctrl-C
    try:
        preload()
        if len(argv) > 1:
            os.sched_setaffinity(0, {int(c) for c in argv[1].split(",")})
        why = unsafe_state()
    except Exception:  # noqa: BLE001 - the runner says why in the job's log and starts the job itself
        why = "the launcher's imports failed: " + traceback.format_exc()[-1500:]
    if why:
        send(sock, {"error": why})
        return 1
    send(sock, {"ready": os.getpid()})
    Launcher(sock).serve()
    # its exit handlers (torch's removes the temporary folder of its remote-module template), not the interpreter's
    # teardown: unloading torch and transformers took about 2 s of CPU here, on whichever core a measured job of
    # the next round steps on (a comparison retires a launcher after every round)
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
