"""Starting a job's process: forked by the warm launcher (``tcbench.job.zygote``) when it can be, else a new one.

The launcher forks plain worker jobs (eager, inductor or xla, one process, not ``debug``) whose environment is the
one it was started with; everything else — a script, a torchrun job, a debug job — and every job when
``TCBENCH_LAUNCHER=spawn`` starts as a new ``python -m tcbench.job.worker`` process, as before. One launcher per
job environment (at most two at a time: ``_Launcher.KEYS``), started by the first job it can fork (that job waits
for its imports) and again for a new draw (a retired one ends once its last child has); it is keyed on the whole
job environment except
the per-job paths (run folder, compile caches), which nothing reads at import, plus the Python executable and the
newest change to tcbench's source. When the launcher cannot start, refuses or dies, the job starts as a new
process and its log says why: a job never fails because the fast path did.

**Every round its own launcher.** Children of one launcher share its address layout (its libraries, its heap), and
with it a luck of their own: a tiny GPT-2's eager step sat at about 30 ms or at about 36 ms for every job of one
launcher (README, "A first comparison you can trust"). So a job may carry a ``draw`` (a comparison passes one token
per round): a launcher serves one draw only, and a job of another draw gets a launcher that has served nobody. The
next one is started ahead of need (once the current one is ready; the XLA one once the round's jobs have compiled:
``start_spares``), on the CPUs its jobs leave free (``job_cpus``: a 1-thread job steps on the last CPU, the
launcher imports on the others), and kept as the spare; where no CPU is free, the next round's first job waits for a
new launcher's imports.

A forked job is handled like a Popen (``Forked``: pid, poll, wait, returncode; its exit status comes from the
launcher, its parent). The launcher is started from one long-lived thread of this process: its parent-death
signal follows the thread that started it, and a job may be started from a short-lived one (the panel's); it also
exits when its control socket closes. Several threads may start jobs at once; a forked copy of this process (the
tuning workers) starts a launcher of its own. The first job waits for the launcher's imports at most its
``stall_s`` (a stop request is seen once it has started).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
from concurrent.futures import Future
from itertools import count
from pathlib import Path
from queue import Queue
from typing import IO, Any, NoReturn, Protocol

from tcbench.core.spec import JobSpec
from tcbench.host.paths import home, private_dir
from tcbench.job.backends import Backend
from tcbench.job.process_tools import TURNS_ENV, job_cpus
from tcbench.job.zygote import RUN_DIR, launcher_environ, receive, send

LAUNCHER_ENV = "TCBENCH_LAUNCHER"
LAUNCHER_MODES = ("fork", "shared", "spawn")   # preflight refuses any other value before a job starts
# read by a job while it runs (the per-job paths) or by the runner: never at import, so not in the launcher's key
_NOT_AT_IMPORT = frozenset({RUN_DIR, "TORCHINDUCTOR_CACHE_DIR", "TCBENCH_XLA_CACHE", LAUNCHER_ENV, TURNS_ENV})
_ANSWER_S = 30.0    # a fork is answered in milliseconds; the launcher is single-threaded and never busy for long
_SOURCE = Path(__file__).resolve().parents[1]


class LaunchError(RuntimeError):
    """The launcher could not start this job (the runner then starts it as a new process)."""


class JobProcess(Protocol):
    """What the runner uses of a job's process: a ``subprocess.Popen`` or a ``Forked``."""

    pid: int
    returncode: int | None

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


class Forked:
    """A job the launcher forked, used as a Popen; its exit status is reported by the launcher."""

    def __init__(self, pid: int, launcher: int = 0) -> None:
        self.pid = pid
        self.launcher = launcher   # the launcher's pid
        self.returncode: int | None = None
        self._exited = threading.Event()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._exited.wait(timeout):
            raise subprocess.TimeoutExpired(f"forked job {self.pid}", timeout or 0.0)
        return self.returncode   # type: ignore[return-value]

    def ended(self, returncode: int) -> None:
        self.returncode = returncode
        self._exited.set()


def forkable(spec: JobSpec, backend: type[Backend]) -> bool:
    """Whether the launcher may fork this job: a plain worker job on a backend (``backend``, the spec's backend
    class) that runs in the launcher's imports."""
    return spec.script is None and spec.world_size == 1 and backend.forkable and not spec.debug


def start_job(spec: JobSpec, backend: type[Backend], argv: list[str], cwd: str, env: dict[str, str], msg_fd: int,
              log: IO[str], run_dir: Path, draw: object = None) -> JobProcess:
    """The job's process, in its own process group: forked by the launcher, else started as ``argv``. ``draw``: jobs
    of different draws never fork from the same launcher (None: any launcher of this environment)."""
    mode = os.environ.get(LAUNCHER_ENV, "fork")
    if mode == "shared":   # every round from one launcher: faster, but the rounds then share its luck (its layout)
        mode, draw = "fork", None
    if mode not in LAUNCHER_MODES:
        _note(log, f"{LAUNCHER_ENV}={mode!r} is none of 'fork', 'shared' and 'spawn'; this job starts as a new "
                   "process")
    elif mode == "fork" and forkable(spec, backend):
        request = {"spec": spec.to_json(), "run_dir": str(run_dir), "cwd": cwd, "env": env}
        spare = None if draw is None else free_cpus(int(env.get("OMP_NUM_THREADS") or 0), spec.world_size)
        try:
            return _LAUNCHER.fork(request, (msg_fd, log.fileno()), ready_s=spec.stall_s, draw=draw, spare_cpus=spare,
                                  spare_waits=backend.torch_xla)
        except Exception as exc:  # noqa: BLE001 - the fast path failing never fails the job
            _note(log, f"the warm launcher could not start this job ({exc}); it starts as a new process")
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                            pass_fds=(msg_fd,), cwd=cwd, start_new_session=True)   # its own process group


def free_cpus(threads: int, world_size: int = 1) -> tuple[int, ...] | None:
    """The CPUs a job of ``threads`` threads leaves free while it steps (``job_cpus``), or None when it leaves none."""
    steps_on = job_cpus(threads, world_size)
    if steps_on is None:
        return None
    return tuple(sorted(os.sched_getaffinity(0) - set(steps_on))) or None


def _note(log: IO[str], line: str) -> None:
    log.write(f"[tcbench] {line}\n")
    log.flush()


def _source_stamp() -> int:
    """The newest modification of tcbench's source: a launcher never serves code older than the caller's."""
    return max(p.stat().st_mtime_ns for p in _SOURCE.rglob("*.py"))


def _key(env: dict[str, str]) -> tuple:
    return sys.executable, _source_stamp(), tuple(sorted((k, v) for k, v in env.items() if k not in _NOT_AT_IMPORT))


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class _Starter:
    """Starts launcher processes from one long-lived thread (see the module docstring)."""

    def __init__(self) -> None:
        self._todo: Queue = Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def popen(self, argv: list[str], cpus: tuple[int, ...] | None = None, **kwargs: Any) -> subprocess.Popen:
        """``argv`` started from the starter's thread; with ``cpus``, on those CPUs from its first instruction (the
        thread takes them for the fork, the child inherits them)."""
        done: Future = Future()
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True, name="tcbench-launcher-starter")
                self._thread.start()
        self._todo.put((done, argv, cpus, kwargs))
        return done.result()

    def _run(self) -> None:
        while True:
            done, argv, cpus, kwargs = self._todo.get()
            mine = os.sched_getaffinity(0)   # this thread's
            try:
                if cpus:
                    os.sched_setaffinity(0, cpus)
                done.set_result(subprocess.Popen(argv, **kwargs))
            except BaseException as exc:  # noqa: BLE001 - handed to the thread that asked
                done.set_exception(exc)
            finally:
                os.sched_setaffinity(0, mine)


class _Zygote:
    """One launcher process, seen from here: its control socket, the requests waiting for an answer, its children."""

    def __init__(self, key: tuple, env: dict[str, str], starter: _Starter, cpus: tuple[int, ...] | None = None) -> None:
        self.key = key
        self.draw: object = None   # the jobs' draw it serves (``start_job``)
        self.served = False        # it has forked a job
        self.broken = ""     # why it must not be started again for this key (it never became ready, or refused)
        self.dead = False
        self._retired = False
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._answers: dict[int, tuple[threading.Event, list]] = {}
        self._jobs: dict[int, Forked] = {}
        self._ids = count(1)
        self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            fd = theirs.fileno()
            argv = [sys.executable, "-m", "tcbench.job.zygote", str(fd)]
            if cpus:   # it imports on ``cpus``, then takes this process's CPUs back for its children
                argv.append(",".join(map(str, sorted(os.sched_getaffinity(0)))))
            self._proc = starter.popen(argv, cpus=cpus,
                                       env=launcher_environ(env), pass_fds=(fd,), cwd=private_dir(home() / "runs"),
                                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL, start_new_session=True)
        except BaseException:
            self._sock.close()
            raise
        finally:
            theirs.close()
        threading.Thread(target=self._read, daemon=True, name="tcbench-launcher").start()

    def fork(self, request: dict, fds: tuple[int, int], ready_s: float) -> Forked:
        if not self._ready.wait(ready_s):
            self._fail(f"the launcher was not ready within {ready_s:g} s")
        if self.dead:
            raise LaunchError(self.broken or "the launcher has exited")
        answer: tuple[threading.Event, list] = (threading.Event(), [])
        with self._lock:
            self.served = True
            rid = next(self._ids)
            self._answers[rid] = answer
        try:
            send(self._sock, {"id": rid, **request}, fds)
            if not answer[0].wait(_ANSWER_S):
                raise LaunchError(f"the launcher did not answer within {_ANSWER_S:g} s")
        except BaseException:
            with self._lock:
                answered = self._answers.pop(rid, None) is None
            if answered and answer[1] and isinstance(answer[1][0], Forked):   # forked for a caller that left
                _signal_group(answer[1][0].pid, signal.SIGKILL)
            raise
        got = answer[1][0]
        if isinstance(got, LaunchError):   # it exited meanwhile
            raise got
        if isinstance(got, Forked):
            return got
        self._fail(got)   # it refused: it would refuse the next job too

    @property
    def ready(self) -> bool:
        """Its imports are done and it serves (or has exited)."""
        return self._ready.is_set()

    def abandon(self) -> None:
        """Drop this process's copy of the socket (see ``_Launcher.forget``)."""
        self._sock.close()

    def retire(self) -> None:
        """No new jobs: it ends once its last child has."""
        with self._lock:
            self._retired = True
            idle = not self._jobs
        if idle:
            self._close()

    def _fail(self, why: str) -> NoReturn:
        """It must not serve again, nor be restarted for this key."""
        self.broken = why
        self._close()
        raise LaunchError(why)

    def _close(self) -> None:
        with self._lock, contextlib.suppress(OSError):
            if not self.dead:   # its end of the socket sees EOF: it ends its children and exits
                self._sock.shutdown(socket.SHUT_RDWR)

    def _read(self) -> None:
        try:
            while True:
                message, fds = receive(self._sock)
                for fd in fds:
                    os.close(fd)
                if message is None:
                    return
                self._take(message)
        except (OSError, ValueError):
            return
        finally:
            self._gone()

    def _take(self, message: dict) -> None:
        if "ready" in message:
            self._ready.set()
        elif "id" in message:
            self._answer(message)
        elif "exited" in message:
            with self._lock:
                job = self._jobs.pop(message["exited"], None)
                idle = self._retired and not self._jobs
            if job is not None:
                job.ended(message["returncode"])
            if idle:
                self._close()
        elif "error" in message:   # before ready: its imports failed, or it is unsafe to fork
            self.broken = message["error"]

    def _answer(self, message: dict) -> None:
        """A fork's outcome, to the thread waiting for it; a child whose caller has gone is killed."""
        job = Forked(message["pid"], self._proc.pid) if "pid" in message else None
        with self._lock:
            if job is not None:
                self._jobs[job.pid] = job
            answer = self._answers.pop(message["id"], None)
            if answer is not None:
                answer[1].append(job or message["error"])
        if answer is not None:
            answer[0].set()
        elif job is not None:
            _signal_group(job.pid, signal.SIGKILL)

    def _gone(self) -> None:
        """The launcher has exited (or said something unreadable: it is told to): its children died with it
        (parent-death signal); nobody waits in vain."""
        self._close()
        returncode = self._proc.wait()
        with self._lock:
            self.dead = True
            self._sock.close()
            self.broken = self.broken or ("" if self._ready.is_set() else f"the launcher exited with code {returncode}")
            jobs, self._jobs = list(self._jobs.values()), {}
            answers, self._answers = list(self._answers.values()), {}
        self._ready.set()
        for event, got in answers:
            got.append(LaunchError(f"the launcher exited with code {returncode}"))
            event.set()
        for job in jobs:
            _signal_group(job.pid, signal.SIGKILL)
            job.ended(-signal.SIGKILL)


class _Launcher:
    """This process's launchers: for each job environment (``_key``; at most ``KEYS``, the least recently used
    retired first), the one of the current draw and the spare, started ahead of need for the next draw, that has
    served nobody. A round of eager, inductor and xla jobs uses two environments (the XLA jobs' says
    ``USE_TORCH_XLA=1``): each has its launcher and its spare, so neither waits for the other's imports."""

    KEYS = 2

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current: dict[tuple, _Zygote] = {}   # in order of use, the most recent last
        self._spare: dict[tuple, _Zygote] = {}
        self._wanted: dict[tuple, tuple[dict[str, str], tuple[int, ...]]] = {}   # spares asked for, not yet started
        self._starter = _Starter()

    def forget(self) -> None:
        """In a forked copy of this process (tuning workers): the parent's launchers, their threads and the lock are
        not this process's; the inherited sockets are closed here, never shut down (that would end the parent's)."""
        for zygote in [*self._current.values(), *self._spare.values()]:
            zygote.abandon()
        self._lock, self._current, self._spare, self._wanted = threading.Lock(), {}, {}, {}
        self._starter = _Starter()

    def start_spares(self, only: tuple | None = None) -> None:
        """Start the spares asked for (``only``: that key's), each importing on the CPUs its round's jobs leave
        free."""
        with self._lock:
            for key in [k for k in self._wanted if only is None or k == only]:
                env, cpus = self._wanted.pop(key)
                if key in self._current and key not in self._spare:
                    self._spare[key] = _Zygote(key, env, self._starter, cpus=cpus)

    def fork(self, request: dict, fds: tuple[int, int], ready_s: float, draw: object = None,
             spare_cpus: tuple[int, ...] | None = None, spare_waits: bool = False) -> Forked:
        """A child of the launcher of the request's environment (and ``draw``). A new draw's launcher asks for the
        next one (with ``spare_cpus``): started once this one is ready, or, ``spare_waits`` (the XLA jobs'), by
        ``start_spares``."""
        key, early = _key(request["env"]), False
        with self._lock:
            zygote = self._current.pop(key, None)
            if zygote is not None and zygote.broken:
                self._current[key] = zygote
                raise LaunchError(f"{zygote.broken} (earlier in this process)")
            if zygote is None or zygote.dead or (draw is not None and zygote.draw is not draw):
                if zygote is not None:
                    zygote.retire()
                env = {k: v for k, v in request["env"].items() if k not in _NOT_AT_IMPORT}
                zygote = self._unused(key) or _Zygote(key, env, self._starter)
                zygote.draw = draw
                if draw is not None and spare_cpus:   # the next draw's
                    self._wanted[key] = (env, spare_cpus)
                    early = not spare_waits
            self._current[key] = zygote
            while len(self._current) > self.KEYS:   # the environment used longest ago
                old = next(iter(self._current))
                self._current.pop(old).retire()
                self._wanted.pop(old, None)
                spare = self._spare.pop(old, None)
                if spare is not None:
                    spare.retire()
        forked = zygote.fork(request, fds, ready_s)
        if early:   # this one is ready: the next one imports beside this round's jobs, never beside its imports
            self.start_spares(only=key)
        return forked

    def close(self, wait_s: float = 2.0) -> None:
        """At this process's exit: the launchers end as they do when retired (their exit handlers run: torch's removes
        a temporary folder), not by the parent-death signal; each is waited for at most ``wait_s``."""
        with self._lock:
            zygotes = [*self._current.values(), *self._spare.values()]
            self._current, self._spare, self._wanted = {}, {}, {}
        for zygote in zygotes:
            zygote.retire()
            if zygote.ready:   # one still importing is not waited for: it dies with this process
                with contextlib.suppress(subprocess.TimeoutExpired):
                    zygote._proc.wait(wait_s)

    def _unused(self, key: tuple) -> _Zygote | None:
        """The spare of this key when it is alive and has served nobody (it is then taken); else None (a spare that
        cannot serve is retired)."""
        spare = self._spare.pop(key, None)
        if spare is not None and not spare.dead and not spare.broken and not spare.served:
            return spare
        if spare is not None:
            spare.retire()
        return None


_LAUNCHER = _Launcher()
os.register_at_fork(after_in_child=_LAUNCHER.forget)
atexit.register(_LAUNCHER.close)


def start_spares() -> None:
    """Start the next round's launchers that wait for this round's compiles: the runner calls it once they are done
    (a lock-step round's first turn; a job's measured steps in sequential rounds; a job's end), so that their
    imports run beside measured steps, on a core those leave free. The XLA jobs' launcher waits so (``spare_waits``):
    beside the next round's imports (torch's, transformers' and torch_xla's: 8-12 s of CPU) an XLA job's compile,
    which runs cold in every job on the CPU, took 17-20 s, against 12-15 s now and 9 s alone. Any other spare starts
    once the launcher it follows is ready: started beside the first round's launchers, the spares' imports made the
    demo's first launches take 20 s, against 8-10 s (benchmarks/demo_fresh.md). A round that starts before its spare
    is ready waits for its imports, as the first round does."""
    _LAUNCHER.start_spares()
