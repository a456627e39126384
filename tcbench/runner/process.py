"""Run one JobSpec in its own process and turn every ending into a JobResult.

The parent never busy-waits: a reader thread blocks on the job's pipe and hands messages over a
queue; the parent waits on that queue with a timeout and checks the stop event, the stall clock and
the optional deadline between messages. Step records are written to the store as they arrive
(batched, at most 0.5 s late), so a job killed mid-run keeps every step it reported.

Nothing is left behind: the job runs in a process group of its own and dies with its parent
(``PR_SET_PDEATHSIG``); every ending — the job's own, a stop, a stall, a caller's exception — kills
the group, drains what the job had sent and writes it. Records the store cannot take now (locked,
disk full) are kept and retried, then spooled beside the store and merged when it is next opened.
The wait ends when the job's process exits, even if something else still holds its pipe. A plain worker job is
forked by the warm launcher, which has torch and transformers imported already; the others start as a new process
(``tcbench.runner.zygote_client``; ``TCBENCH_LAUNCHER=spawn`` starts every job as a new process).

The job speaks ``tcbench.job.protocol``; what each message changes in the result is ``tcbench.runner.inbox``'s,
how the job ended ``tcbench.runner.ending``'s, and its figures are computed in ``tcbench.measure.job``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from statistics import median
from typing import Any

from tcbench.host.env import job_env as job_env_info
from tcbench.host.env import codegen_key, load_now
from tcbench.job.backends import Backend, backend_class, get_backend
from tcbench.job.protocol import End, Log, Phase, Step, Turn, decode
from tcbench.measure.job import allreduce_summary, compile_counts, figures, mfu_reference
from tcbench.runner import artifacts as team_artifacts
from tcbench.runner.ending import conclude
from tcbench.runner.inbox import handle
from tcbench.runner.preflight import check as preflight
from tcbench.runner.turns import Turns
from tcbench.runner.zygote_client import Forked, JobProcess, start_job, start_spares
from tcbench.host.probe import peak_flops
from tcbench.core.events import JobEnded, JobStarted, Observer
from tcbench.core.extras import CompilePhases
from tcbench.core.results import JobResult, StepRecord
from tcbench.core.spec import JobSpec
from tcbench.host.paths import home, private_dir
from tcbench.store.api import HEARTBEAT_S, Store
from tcbench.store.base import StoreError, transient


_POLL_S = 0.25
# Step records reach the store in small batches: one SQLite commit per step would wake this process
# (and steal a core from the job's OpenMP threads) on every step of a fast job.
_FLUSH_S = 0.5
STALL_STEPS = 20        # a job is stalled after max(spec.stall_s, STALL_STEPS x its median step) without a message
_WRITE_WAIT_S = 2.0     # while the job runs, a locked store delays nothing: the steps are kept and retried
_RETRY_S = 5.0
_FINAL_WAIT_S = 30.0    # at the end, how long to wait for a locked store before spooling
_EOF_GRACE_S = 30.0    # after the job closed its pipe without an end message, how long it may take to exit
_EXIT_GRACE_S = 1.0     # after the job's process exited, how long to wait for the rest of its messages


class _Writer:
    """The job's steps on their way to the store: kept until written, retried, spooled at the end if need be."""

    def __init__(self, store: Store, run_id: int) -> None:
        self.store, self.run_id = store, run_id
        self.pending: list[StepRecord] = []
        self.last_write = self.last_beat = time.monotonic()
        self.last_try = 0.0
        self.error = ""     # why the last write failed (empty once one succeeds)

    def flush(self, idle: bool) -> None:
        """Write pending steps when the queue is idle or the last write is _FLUSH_S old; beat when silent."""
        now = time.monotonic()
        if self.pending and (idle or now - self.last_write > _FLUSH_S):
            if self.error and now - self.last_try < _RETRY_S:
                return
            self.last_try = now
            try:
                self.store.add_steps(self.run_id, self.pending, timeout=_WRITE_WAIT_S)
            except Exception as exc:  # noqa: BLE001 - locked or full: keep them, try again
                if not transient(exc):
                    raise
                self.error = f"{type(exc).__name__}: {exc}"
                return
            self.pending, self.error = [], ""
            self.last_write = self.last_beat = now
        elif now - self.last_beat > HEARTBEAT_S:
            self.beat()

    def beat(self, **started: Any) -> None:
        self.last_beat = time.monotonic()
        try:
            self.store.beat(self.run_id, **started)
        except Exception as exc:  # noqa: BLE001 - a heartbeat is best effort
            if not transient(exc):
                raise

    def close(self, result: JobResult) -> None:
        """The remaining steps and the run's final row: written, or else spooled (a warning says where)."""
        try:
            if self.pending:
                self.store.add_steps(self.run_id, self.pending, timeout=_FINAL_WAIT_S)
                self.pending = []
            self.store.finish_run(result, timeout=_FINAL_WAIT_S)
            return
        except Exception as exc:  # noqa: BLE001
            if not transient(exc):
                raise
            cause = f"{type(exc).__name__}: {exc}"
        try:
            path = self.store.spool(self.run_id, self.pending, result)
        except StoreError as exc:
            result.extra.store_error = str(exc)
            warnings.warn(f"tcbench: {exc} (the store said: {cause})", RuntimeWarning, stacklevel=3)
            return
        result.extra.spooled = str(path)
        warnings.warn(f"tcbench: the store {self.store.path} could not be written ({cause}); run {self.run_id}'s "
                      f"{len(self.pending)} unwritten step(s) and its result are kept in {path} and merged when the "
                      "store is next opened", RuntimeWarning, stacklevel=3)
        self.pending = []


def backend_status(name: str) -> tuple[bool, str]:
    """(available, reason) for a backend, checked without importing torch."""
    return get_backend(name).available()


def _cache_dirs(spec: JobSpec) -> tuple[Path, Path | None]:
    """The compile cache for this job and, for cache='cold' or 'artifacts', the temporary folder to delete. The
    shared cache has a folder per thread count and CPU (``codegen_key``): a hit is compiled code for this job."""
    if spec.cache in ("cold", "artifacts"):   # artifacts: loaded into a cache as empty as a new machine's
        tmp = Path(tempfile.mkdtemp(prefix=f"tcbench-{spec.cache}-cache-"))   # mkdtemp makes it 0700
        return tmp, tmp
    private_dir(home() / "cache", tighten=True)
    return private_dir(home() / "cache" / codegen_key(_threads(spec)), tighten=True), None


def cache_state_of(cache: str, kept: bool, grew: bool, phases: CompilePhases | None) -> str:
    """A compiled job's ``cache_state``: its spec's ``cache`` where that is "cold" or "artifacts"; else "cold" when
    its backend keeps no cache (``kept``) or it compiled a graph that AOTAutograd's or Inductor's cache did not hold
    (``phases``' misses), "warm" when every graph came from them. Where the compiler gave no counts, whether the
    cache's files grew (``grew``) decides. The counts come first because a warm job can add files: on CUDA the
    first job to load a graph from the FX cache compiled one Triton kernel binary anew (8 files, 2 s) while all 3
    graphs were hits, and was labelled cold (H200, torch 2.11, benchmarks/gpu.md run 6)."""
    if cache in ("cold", "artifacts"):
        return cache
    if not kept:
        return "cold"
    counts = [] if phases is None else [phases.aot_cache_misses, phases.fx_cache_misses]
    if any(c is not None for c in counts):
        return "cold" if any(counts) else "warm"
    return "cold" if grew else "warm"


def _count_files(path: Path) -> int:
    return sum(len(files) for _, _, files in os.walk(path)) if path.exists() else 0


def caller_path() -> str:
    """PYTHONPATH for a job: the caller's working directory and the folders it added to ``sys.path`` (a
    notebook's ``sys.path.insert``, its PYTHONPATH), so a job imports what the caller can import."""
    import site
    import sysconfig

    known = {os.path.realpath(p) for p in (*sysconfig.get_paths().values(), *site.getsitepackages(),
                                           site.getusersitepackages())}
    stdlib = tuple(os.path.realpath(sysconfig.get_paths()[k]) + os.sep for k in ("stdlib", "platstdlib"))
    entries = [os.getcwd(), *(os.path.abspath(p) for p in sys.path if p)]
    keep: list[str] = []
    for p in entries:
        real = os.path.realpath(p)
        if os.path.isdir(p) and real not in known and not real.startswith(stdlib) and p not in keep:
            keep.append(p)
    return os.pathsep.join(keep)


# glibc's malloc with fixed thresholds (mallopt(3); the caller's own MALLOC_* settings win). Left dynamic, it hands
# a step's larger buffers back to the kernel when they are freed and faults them in again the next step: a tcbench
# job of the demo's spec took 1,700 page faults a step (11 % of its time in the kernel), and how much that cost
# differed from process to process. Measured on the demo's spec (tiny GPT-2, 1 thread; 8 forked jobs of 160 steps
# per backend and setting): the median step of Inductor 30.5-31.3 ms instead of 30.4-38.4, eager 29.9-31.5 instead
# of 30.9-40.4; the spread of job medians between processes 0.008-0.021 (log) instead of 0.03-0.11; eager's peak
# above its baseline 94-121 MiB against 98-114.
ALLOCATOR_ENV = {"MALLOC_MMAP_THRESHOLD_": str(32 * 2**20),   # the largest glibc allows: below it, reuse the heap
                 "MALLOC_TRIM_THRESHOLD_": str(2**30)}        # keep up to 1 GiB freed at the heap's top


def job_env(spec: JobSpec, backend: type[Backend], cache: Path, run_dir: Path) -> dict[str, str]:
    """The job process's environment: offline hub, one thread setting, the compile caches, the caller's imports,
    the allocator's thresholds (``ALLOCATOR_ENV``); ``backend``: the job's backend class
    (``backend_class(spec.backend)``)."""
    env = {k: v for k, v in os.environ.items() if k not in _SCRIPT_ENV}   # never another job's channel
    for name, value in ALLOCATOR_ENV.items():
        env.setdefault(name, value)
    env["PYTHONPATH"] = caller_path()
    threads = str(_threads(spec))
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS=threads, PYTHONUNBUFFERED="1",
               TCBENCH_PARENT_PID=str(os.getpid()), TCBENCH_RUN_DIR=str(run_dir),
               TORCHINDUCTOR_CACHE_DIR=str(cache / "inductor"), TCBENCH_XLA_CACHE=str(cache / "xla"),
               TCBENCH_ARTIFACTS=team_artifacts.folder(),
               TOKENIZERS_PARALLELISM="false",
               # torch.cuda.is_available() by NVML, not the CUDA driver: a warm launcher whose imports ask stays free
               # of a CUDA context and its threads (a forked job could not use them, and it is not forked then)
               PYTORCH_NVML_BASED_CUDA_CHECK="1")
    backend.job_env(spec, env)   # USE_TORCH_XLA, PJRT_DEVICE, TORCH_LOGS with debug
    return env


_SCRIPT_ENV = ("TCBENCH_FD", "TCBENCH_SPEC", "TCBENCH_SCRIPT_PID", "TCBENCH_BACKEND")


def _command(spec: JobSpec, backend: type[Backend], fd: int, run_dir: Path,
             cache: Path) -> tuple[list[str], str, dict[str, str]]:
    """(argv, working directory, extra environment) of the job process: tcbench's worker, or the user's
    script started as ``python script.py args`` from the caller's working directory, told its job through
    the environment (tcbench.job.track reads it)."""
    if spec.script is None and spec.world_size > 1:   # torchrun's ranks, their messages forwarded by the launcher
        return [sys.executable, "-m", "tcbench.job.launch", str(fd), spec.to_json(), str(run_dir)], str(run_dir), {}
    if spec.script is None:
        return [sys.executable, "-m", "tcbench.job.worker", spec.to_json(), str(fd), str(run_dir)], str(run_dir), {}
    env = dict(TCBENCH_FD=str(fd), TCBENCH_SPEC=spec.to_json(), TCBENCH_BACKEND=spec.backend)
    env.update(backend.script_env(cache))
    return [sys.executable, spec.script, *spec.script_args], os.getcwd(), env


def _reader(stream: Any, q: queue.Queue) -> None:
    """The job's messages, decoded, onto ``q``; None when its pipe closes. A line that is no message becomes a
    log line."""
    with stream:
        for line in stream:
            try:
                q.put(decode(line))
            except json.JSONDecodeError:   # not JSON: the job's own output, shown as it is
                q.put(Log(line.rstrip()))
            except ValueError as exc:      # JSON, but no message of the protocol: named, not dropped
                q.put(Log(f"[tcbench] the runner cannot read this job message ({exc}): {line.rstrip()}"[:2000]))
    q.put(None)


def _signal_group(proc: JobProcess, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)   # the job and everything it started (it leads its own process group)
    except (ProcessLookupError, PermissionError):
        pass


def _kill(proc: JobProcess) -> None:
    """End the job's process group: SIGTERM, then SIGKILL after 1 s (a stopped process only obeys SIGKILL)."""
    if proc.poll() is None:
        _signal_group(proc, signal.SIGTERM)
        try:
            proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
            proc.wait()
    _signal_group(proc, signal.SIGKILL)   # helpers it started that outlived it


def _await_exit(proc: JobProcess, stop: threading.Event | None) -> None:
    """Give a process whose pipe closed without an ``end`` message up to _EOF_GRACE_S to exit by itself, so that
    its own exit code (not our SIGTERM) says how it ended; a stop request cuts the wait short."""
    deadline = time.monotonic() + _EOF_GRACE_S
    while proc.poll() is None and time.monotonic() < deadline and not (stop is not None and stop.is_set()):
        time.sleep(_POLL_S / 4)


def _tail(path: Path, n: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


def _threads(spec: JobSpec) -> int:
    """Threads per process: the spec's, else the cores shared out among its data-parallel processes."""
    return spec.threads or max(1, len(os.sched_getaffinity(0)) // spec.nproc)


def run(spec: JobSpec, observer: Observer | None = None, stop: threading.Event | None = None,
        store: Store | None = None, comparison_id: int | None = None, round: int = 0,
        job: str | None = None, label: str = "", draw: object = None, turns: Turns | None = None) -> JobResult:
    """Run one job in its own process and return its JobResult (a failure is a status, never a raise).

    ``label`` names the job in its comparison (default: the backend; ``"eager (A/A)"`` for an A/A twin).
    ``draw``: jobs of different draws are never forked by the same warm launcher (a comparison passes one per round:
    ``tcbench.runner.zygote_client``). ``turns``: the job takes its measured steps in turns with the other jobs of its
    lock-step round, each run from a thread of its own (``tcbench.runner.turns``; ``job`` is its name there).
    A KeyboardInterrupt in the caller stops the job, keeps every step it sent, stores the run as
    ``interrupted`` and is raised again.
    """
    spec = preflight(spec)   # a bad input is a named error before anything is stored or started
    backend = backend_class(spec.backend)   # the job's backend, looked up once: every step below asks this class
    store = store or Store()
    store.require_writable()
    job = job or f"{label or spec.backend}#{round}"
    notify = observer or (lambda event: None)
    run_id = store.insert_run(spec, comparison_id, round, label=label, pid=os.getpid(), host=socket.gethostname())
    writer = _Writer(store, run_id)
    # run folders are named by time and made unique: several stores (and processes) may share one TCBENCH_HOME,
    # and two of them may start their run 7 in the same second; a folder is never shared
    run_dir = Path(tempfile.mkdtemp(prefix=f"{time.strftime('%Y%m%d-%H%M%S')}-{run_id}-{spec.backend}-",
                                    dir=private_dir(home() / "runs", tighten=True)))
    result = JobResult(spec=spec, status="running", run_id=run_id, artifacts=str(run_dir), round=round, label=label,
                       env=job_env_info(_threads(spec)))
    notify(JobStarted(job=job, backend=spec.backend, label=result.name, run_id=run_id, round=round, spec=spec,
                      alone=comparison_id is None))
    try:
        ok, reason = backend_status(spec.backend)
        why_not = backend.parallel_unavailable(spec)
        if not ok:
            result.status, result.error = "unavailable", f"backend {spec.backend!r} is unavailable: {reason}"
        elif why_not:
            result.status, result.error = "unavailable", why_not
        else:
            fetch = backend.shares_artifacts and spec.cache == "artifacts"
            shared = [team_artifacts.fetch(store, spec)] if fetch else []
            _execute(spec, backend, result, store, writer, notify, stop, run_dir, job, draw, turns)
            shared.append(team_artifacts.keep(store, result))
            if any(shared):
                result.extra.store_artifacts = "; ".join(s for s in shared if s)
    except BaseException as exc:   # KeyboardInterrupt, an observer that raised, ...: the run is still recorded
        result.status = "interrupted"
        result.error = (f"the caller stopped waiting ({type(exc).__name__}: {exc}); "
                        "the steps measured so far are kept")[:2000]
        _set_figures(result, spec, result.extra.probe)
        raise
    finally:
        if turns is not None:   # no more turns for it (also when it never started): the others go on
            turns.ended(job, run_dir)
        _remove_pipes(run_dir)
        result.env["load_end"] = load_now()
        writer.close(result)
        notify(JobEnded(job=job, backend=spec.backend, label=result.name, run_id=run_id, result=result))
    return result


def _remove_pipes(run_dir: Path) -> None:
    """Remove the named pipes a job's processes made in its run folder (a data-parallel job's ``channel.fifo``, left
    behind when its launcher was killed): a tool that reads every file under the home would hang on one."""
    try:
        entries = list(os.scandir(run_dir))
    except OSError:
        return
    for entry in entries:
        try:
            if stat.S_ISFIFO(entry.stat(follow_symlinks=False).st_mode):
                os.unlink(entry.path)
        except OSError:
            pass


def _probe(spec: JobSpec, store: Store) -> dict:
    """The matmul peak for MFU (the job's threads and dtype), or why there is none."""
    try:
        return peak_flops(_threads(spec), spec.precision, store)
    except Exception as exc:  # MFU is then unknown; the job still runs
        return {"error": f"the peak-FLOPs probe failed: {exc}"[:300]}


def _stall_limit(spec: JobSpec, records: list[StepRecord]) -> float:
    """Seconds without any message after which the job is stalled: max(stall_s, STALL_STEPS x median step)."""
    steps = [r.step_s for r in records if r.step_s]
    return max(spec.stall_s, STALL_STEPS * median(steps)) if steps else spec.stall_s


def _execute(spec: JobSpec, backend: type[Backend], result: JobResult, store: Store, writer: _Writer,
             notify: Observer, stop: threading.Event | None, run_dir: Path, job: str, draw: object = None,
             turns: Turns | None = None) -> None:
    probe = result.extra.probe = _probe(spec, store)
    cache, tmp = _cache_dirs(spec)
    compile_cache = backend.compile_cache(cache)   # None: nothing kept that a later job could load
    before = _count_files(compile_cache) if compile_cache is not None else 0
    read_fd, write_fd = os.pipe()
    log_path = run_dir / "worker.log"
    t0 = time.monotonic()
    argv, cwd, extra = _command(spec, backend, write_fd, run_dir, cache)
    if turns is not None:
        extra.update(turns.attach(job, run_dir))
    asked = time.monotonic()
    try:
        with open(log_path, "w") as log:   # its own process group, ended as one; forked by the launcher if it can be
            proc = start_job(spec, backend, argv, cwd, {**job_env(spec, backend, cache, run_dir), **extra}, write_fd,
                             log, run_dir, draw)
    except BaseException:   # not started (a KeyboardInterrupt while the launcher imports): no pipe left open
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)
    result.extra.launcher = "fork" if isinstance(proc, Forked) else "spawn"
    result.extra.start_s = time.monotonic() - asked
    result.extra.launcher_pid = proc.launcher if isinstance(proc, Forked) else None
    writer.beat(worker_pid=proc.pid, artifacts=str(run_dir))
    q: queue.Queue = queue.Queue()
    reader = threading.Thread(target=_reader, args=(os.fdopen(read_fd), q), daemon=True)
    reader.start()
    try:
        end, ending = _wait(proc, q, spec, result, writer, notify, stop, job, t0, turns)
    finally:
        _kill(proc)   # a no-op when it has ended; on an exception here the job must not outlive the wait
        if turns is not None:
            turns.ended(job, run_dir)
        start_spares()   # a job that ended before its steps (failed): the next round's launchers are still wanted
        _drain(q, result, writer.pending)
        proc.wait()
        result.wall_s = time.monotonic() - t0
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        result.log_tail = _tail(log_path)
    if spec.compiled:
        result.cache_state = cache_state_of(spec.cache, compile_cache is not None,
                                            compile_cache is not None and _count_files(compile_cache) > before,
                                            result.extra.compile_phases)
    conclude(result, end, proc.returncode, ending)
    result.extra.allreduce = allreduce_summary(result.extra.allreduce_steps, result.records, spec.warmup_steps)
    _set_figures(result, spec, probe, **compile_counts(result.extra.counters, result.extra.counters_after_warmup))


def _wait(proc: JobProcess, q: queue.Queue, spec: JobSpec, result: JobResult, writer: _Writer,
          notify: Observer, stop: threading.Event | None, job: str, t0: float,
          turns: Turns | None = None) -> tuple[End | None, str]:
    """Take the job's messages until it ends: (its own End or None, why the runner ended it or ""). A lock-step job's
    ``Turn`` goes to ``turns``; while it waits for its turn its silence is no stall."""
    end: End | None = None
    ending = ""                          # why the runner ended the job (stopped / stalled / timed out)
    exited: float | None = None          # when the job's process was seen to have exited
    heard = time.monotonic()             # the last message from the job: the stall clock
    while True:
        writer.flush(idle=q.empty())
        now = time.monotonic()
        if turns is not None and turns.waiting(job):
            heard = now
        if not ending:
            ending = _reason_to_end(spec, result, stop, now - t0, now - heard if end is None else 0.0)
            if ending:
                _kill(proc)
        if exited is None and proc.poll() is not None:
            exited = now
        try:
            msg = q.get(timeout=_POLL_S)
        except queue.Empty:
            if exited is not None and time.monotonic() - exited > _EXIT_GRACE_S:
                return end, ending   # the job is gone; whatever still holds its pipe is not ours to wait for
            continue
        if msg is None:   # the pipe closed: the process may still be tearing down (a script's interpreter)
            if end is None:
                _await_exit(proc, stop)
            return end, ending
        heard = time.monotonic()
        if isinstance(msg, Turn) and turns is not None:
            turns.arrived(job, msg.waits)
            if turns.started:   # the round's compiles are done: the next round's launchers import beside its steps
                start_spares()
        elif isinstance(msg, Phase) and msg.phase == "measuring" and turns is None:
            start_spares()
        end = handle(msg, result, writer.pending, notify, job) or end


def _reason_to_end(spec: JobSpec, result: JobResult, stop: threading.Event | None, ran: float, silent: float) -> str:
    """Why the runner ends the job now ("" while it may go on): a stop, its timeout, or ``silent`` seconds
    without a message past the stall limit."""
    if stop is not None and stop.is_set():
        return "stopped by the user; the steps measured so far are kept"
    if spec.timeout_s is not None and ran > spec.timeout_s:
        return f"timed out after timeout_s={spec.timeout_s:g} s; the steps measured so far are kept"
    limit = _stall_limit(spec, result.records)
    if silent > limit:
        phase = result.extra.phase or "starting"
        return (f"stalled: no report for {silent:.0f} s while {phase} (limit max(stall_s={spec.stall_s:g}, "
                f"{STALL_STEPS} x median step) = {limit:.0f} s); the steps measured so far are kept")
    return ""


def _drain(q: queue.Queue, result: JobResult, pending: list) -> None:
    """Steps the job had already sent when the wait ended (nothing measured is dropped)."""
    while True:
        try:
            msg = q.get(timeout=0.2)
        except queue.Empty:
            return
        if msg is None:
            return
        if isinstance(msg, Step):
            handle(msg, result, pending, lambda e: None, "")


def _set_figures(result: JobResult, spec: JobSpec, probe: dict, **given: Any) -> None:
    """The job's figures from its records and what it reported (also for a job cut short by the caller)."""
    result.records.sort(key=lambda r: r.step)
    probe = mfu_reference(result.device, spec, probe)   # on a GPU: the profile's datasheet peak
    result.extra.probe = {k: v for k, v in probe.items() if k != "cached"}
    phases = result.extra.compile_phases
    result.figures = figures(result.records, spec, probe, result.env.get("threads") or _threads(spec),
                             result.extra.sched, result.device or "cpu", n_params=result.extra.n_params,
                             flops_per_step=result.extra.flops_per_step,
                             **{**(dataclasses.asdict(phases) if phases else {}), **given})
