"""Run one JobSpec in its own process and turn every ending into a JobResult.

The parent never busy-waits: a reader thread blocks on the job's pipe and hands messages over a
queue; the parent waits on that queue with a timeout and checks the stop event, the stall clock and
the optional deadline between messages. Step records are written to the store as they arrive
(batched, at most 0.5 s late), so a job killed mid-run keeps every step it reported.

Nothing is left behind: the job runs in a process group of its own and dies with its parent
(``PR_SET_PDEATHSIG``); every ending — the job's own, a stop, a stall, a caller's exception — kills
the group, drains what the job had sent and writes it. Records the store cannot take now (locked,
disk full) are kept and retried, then spooled beside the store and merged when it is next opened.
The wait ends when the job's process exits, even if something else still holds its pipe.
"""

from __future__ import annotations

import json
import math
import os
import queue
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from statistics import median
from typing import Any, Callable

from tcbench.host.env import job_env as job_env_info
from tcbench.host.env import load_now
from tcbench.measure.metrics import job_figures
from tcbench.runner.preflight import check as preflight
from tcbench.host.probe import peak_flops
from tcbench.core.results import JobResult, StepRecord
from tcbench.core.spec import JobSpec
from tcbench.store.api import HEARTBEAT_S, STEP_COLUMNS, Store, StoreError, home, private_dir, transient

Observer = Callable[[dict], None]
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
            result.extra["store_error"] = str(exc)
            warnings.warn(f"tcbench: {exc} (the store said: {cause})", RuntimeWarning, stacklevel=3)
            return
        result.extra["spooled"] = str(path)
        warnings.warn(f"tcbench: the store {self.store.path} could not be written ({cause}); run {self.run_id}'s "
                      f"{len(self.pending)} unwritten step(s) and its result are kept in {path} and merged when the "
                      "store is next opened", RuntimeWarning, stacklevel=3)
        self.pending = []


def backend_status(name: str) -> tuple[bool, str]:
    """(available, reason) for a backend, checked without importing torch."""
    from tcbench.job.backends import get_backend

    return get_backend(name).available()


def _cache_dirs(spec: JobSpec) -> tuple[Path, Path | None]:
    """The compile cache for this job and, for cache='cold', the temporary folder to delete."""
    if spec.cache == "cold":
        tmp = Path(tempfile.mkdtemp(prefix="tcbench-cold-cache-"))   # mkdtemp makes it 0700
        return tmp, tmp
    return private_dir(home() / "cache", tighten=True), None


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


def job_env(spec: JobSpec, cache: Path, run_dir: Path) -> dict[str, str]:
    """The job process's environment: offline hub, one thread setting, the compile caches, the caller's imports."""
    env = {k: v for k, v in os.environ.items() if k not in _SCRIPT_ENV}   # never another job's channel
    env["PYTHONPATH"] = caller_path()
    threads = str(_threads(spec))
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS=threads, PYTHONUNBUFFERED="1",
               TCBENCH_PARENT_PID=str(os.getpid()), TCBENCH_RUN_DIR=str(run_dir),
               TORCHINDUCTOR_CACHE_DIR=str(cache / "inductor"), TCBENCH_XLA_CACHE=str(cache / "xla"),
               TOKENIZERS_PARALLELISM="false")
    if spec.backend == "xla":
        env.setdefault("PJRT_DEVICE", "CPU")
        env["USE_TORCH_XLA"] = "1"
    else:
        env["USE_TORCH_XLA"] = "0"   # else transformers believes it runs on XLA when torch_xla is installed
    if spec.debug and spec.backend == "inductor":
        env.setdefault("TORCH_LOGS", "recompiles,graph_breaks")
    return env


_SCRIPT_ENV = ("TCBENCH_FD", "TCBENCH_SPEC", "TCBENCH_SCRIPT_PID", "TCBENCH_BACKEND", "TCBENCH_STEPS",
               "TCBENCH_WARMUP_STEPS", "TCBENCH_LOSS_EVERY")


def _command(spec: JobSpec, fd: int, run_dir: Path, cache: Path) -> tuple[list[str], str, dict[str, str]]:
    """(argv, working directory, extra environment) of the job process: tcbench's worker, or the user's
    script started as ``python script.py args`` from the caller's working directory, told its job through
    the environment (tcbench.job.track reads it)."""
    if spec.script is None and spec.world_size > 1:   # torchrun's ranks, their messages forwarded by the launcher
        return [sys.executable, "-m", "tcbench.job.launch", str(fd), spec.to_json(), str(run_dir)], str(run_dir), {}
    if spec.script is None:
        return [sys.executable, "-m", "tcbench.job.worker", spec.to_json(), str(fd), str(run_dir)], str(run_dir), {}
    env = dict(TCBENCH_FD=str(fd), TCBENCH_SPEC=spec.to_json(), TCBENCH_BACKEND=spec.backend,
               TCBENCH_STEPS=str(spec.steps), TCBENCH_WARMUP_STEPS=str(spec.warmup_steps),
               TCBENCH_LOSS_EVERY=str(spec.loss_every))
    if spec.backend == "xla":   # torch_xla's persistent compilation cache, set before the script creates a device
        env.update(XLA_PERSISTENT_CACHE_PATH=str(cache / "xla"), XLA_PERSISTENT_CACHE_READ_ONLY="0")
    return [sys.executable, spec.script, *spec.script_args], os.getcwd(), env


def _reader(stream: Any, q: "queue.Queue[dict | None]") -> None:
    with stream:
        for line in stream:
            try:
                q.put(json.loads(line))
            except json.JSONDecodeError:
                q.put({"type": "log", "line": line.rstrip()})
    q.put(None)


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)   # the job and everything it started (it leads its own process group)
    except (ProcessLookupError, PermissionError):
        pass


def _kill(proc: subprocess.Popen) -> None:
    """End the job's process group: SIGTERM, then SIGKILL after 1 s (a stopped process only obeys SIGKILL)."""
    if proc.poll() is None:
        _signal_group(proc, signal.SIGTERM)
        try:
            proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
            proc.wait()
    _signal_group(proc, signal.SIGKILL)   # helpers it started that outlived it


def _await_exit(proc: subprocess.Popen, stop: threading.Event | None) -> None:
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
        job: str | None = None, label: str = "") -> JobResult:
    """Run one job in its own process and return its JobResult (a failure is a status, never a raise).

    ``label`` names the job in its comparison (default: the backend; ``"eager (A/A)"`` for an A/A twin).
    A KeyboardInterrupt in the caller stops the job, keeps every step it sent, stores the run as
    ``interrupted`` and is raised again.
    """
    spec = preflight(spec)   # a bad input is a named error before anything is stored or started
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
    notify({"type": "start", "job": job, "backend": spec.backend, "label": result.name, "round": round,
            "run_id": run_id, "spec": spec})
    try:
        ok, reason = backend_status(spec.backend)
        why_not = _parallel_unavailable(spec)
        if not ok:
            result.status, result.error = "unavailable", f"backend {spec.backend!r} is unavailable: {reason}"
        elif why_not:
            result.status, result.error = "unavailable", why_not
        else:
            _execute(spec, result, store, writer, notify, stop, run_dir, job)
    except BaseException as exc:   # KeyboardInterrupt, an observer that raised, ...: the run is still recorded
        result.status = "interrupted"
        result.error = (f"the caller stopped waiting ({type(exc).__name__}: {exc}); "
                        "the steps measured so far are kept")[:2000]
        _set_figures(result, spec, result.extra.get("probe") or {})
        raise
    finally:
        result.env["load_end"] = load_now()
        writer.close(result)
        notify({"type": "end", "job": job, "backend": spec.backend, "label": result.name, "run_id": run_id,
                "result": result})
    return result


XLA_CPU_COLLECTIVES = ("pytorch/xla#5005", "pytorch/xla#9089", "pytorch/xla#9496")


def _parallel_unavailable(spec: JobSpec) -> str:
    """Why this data-parallel job cannot run here ("" when it can): XLA's collectives on the PJRT CPU device.
    On TPU and CUDA PJRT devices an XLA job runs under torchrun like the others, its process group the
    ``xla://`` one and its gradients all-reduced by ``xm.optimizer_step`` before the update."""
    device = os.environ.get("PJRT_DEVICE", "CPU").upper()
    if spec.world_size == 1 or spec.backend != "xla":
        return ""
    if device not in ("CPU", ""):   # TPU / CUDA: torchrun + the "xla" process group, xm.optimizer_step
        return ""
    return (f"XLA data parallel (nproc={spec.nproc}) cannot run on the PJRT CPU device: torch_xla runs its CPU devices "
            f"as threads of one process and their collectives abort or hang ({', '.join(XLA_CPU_COLLECTIVES)}; "
            "xmp.spawn(nprocs=2) raises ValueError). Run it where PJRT_DEVICE=TPU or CUDA, or use backend='eager' or "
            "'inductor' with nproc > 1 here")


def _probe(spec: JobSpec, store: Store) -> dict:
    """The matmul peak for MFU (the job's threads and dtype), or why there is none."""
    try:
        return peak_flops(_threads(spec), spec.precision, store)
    except Exception as exc:  # MFU is then unknown; the job still runs
        return {"error": f"the peak-FLOPs probe failed: {exc}"[:300]}


def _datasheet_peak(spec: JobSpec) -> dict:
    from tcbench.core.profiles import profile

    dtype = "fp32" if spec.precision == "fp32" else spec.precision
    try:
        tflops = profile(spec.profile).peak_tflops.get(dtype)
    except Exception:  # noqa: BLE001 - a profile without a figure: MFU says so
        tflops = None
    if not tflops:
        return {"error": f"the profile {spec.profile!r} has no {dtype} datasheet peak"}
    return {"flops": tflops * 1e12, "disturbed": "", "source": f"{spec.profile} datasheet"}


def _stall_limit(spec: JobSpec, records: list[StepRecord]) -> float:
    """Seconds without any message after which the job is stalled: max(stall_s, STALL_STEPS x median step)."""
    steps = [r.step_s for r in records if r.step_s]
    return max(spec.stall_s, STALL_STEPS * median(steps)) if steps else spec.stall_s


def _execute(spec: JobSpec, result: JobResult, store: Store, writer: _Writer, notify: Observer,
             stop: threading.Event | None, run_dir: Path, job: str) -> None:
    probe = result.extra["probe"] = _probe(spec, store)
    cache, tmp = _cache_dirs(spec)
    before = _count_files(cache / spec.backend if spec.backend == "xla" else cache / "inductor")
    read_fd, write_fd = os.pipe()
    log_path = run_dir / "worker.log"
    t0 = time.monotonic()
    argv, cwd, extra = _command(spec, write_fd, run_dir, cache)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**job_env(spec, cache, run_dir), **extra}, pass_fds=(write_fd,), cwd=cwd,
                                start_new_session=True)   # its own process group: ended as one
    os.close(write_fd)
    writer.beat(worker_pid=proc.pid, artifacts=str(run_dir))
    q: queue.Queue = queue.Queue()
    reader = threading.Thread(target=_reader, args=(os.fdopen(read_fd), q), daemon=True)
    reader.start()
    end, ending = None, ""    # ending: why the runner ended the job (stopped / stalled / timed out)
    exited: float | None = None          # when the job's process was seen to have exited
    heard = time.monotonic()             # the last message from the job: the stall clock
    try:
        while True:
            writer.flush(idle=q.empty())
            now = time.monotonic()
            if not ending and stop is not None and stop.is_set():
                ending = "stopped by the user; the steps measured so far are kept"
                _kill(proc)
            if not ending and spec.timeout_s is not None and now - t0 > spec.timeout_s:
                ending = f"timed out after timeout_s={spec.timeout_s:g} s; the steps measured so far are kept"
                _kill(proc)
            limit = _stall_limit(spec, result.records)
            if not ending and end is None and now - heard > limit:
                phase = result.extra.get("phase", "starting")
                ending = (f"stalled: no report for {now - heard:.0f} s while {phase} (limit max(stall_s="
                          f"{spec.stall_s:g}, {STALL_STEPS} x median step) = {limit:.0f} s); the steps measured "
                          "so far are kept")
                _kill(proc)
            if exited is None and proc.poll() is not None:
                exited = now
            try:
                msg = q.get(timeout=_POLL_S)
            except queue.Empty:
                if exited is not None and time.monotonic() - exited > _EXIT_GRACE_S:
                    break   # the job is gone; whatever still holds its pipe is not ours to wait for
                continue
            if msg is None:   # the pipe closed: the process may still be tearing down (a script's interpreter)
                if end is None:
                    _await_exit(proc, stop)
                break
            heard = time.monotonic()
            end = _handle(msg, result, writer.pending, notify, job) or end
    finally:
        _kill(proc)   # a no-op when it has ended; on an exception here the job must not outlive the wait
        _drain(q, result, writer.pending)
        proc.wait()
        result.wall_s = time.monotonic() - t0
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        result.log_tail = _tail(log_path)
    after = _count_files(cache / spec.backend if spec.backend == "xla" else cache / "inductor")
    if spec.compiled:
        result.cache_state = "cold" if (after > before or spec.cache == "cold") else "warm"
    _conclude(result, end, proc.returncode, ending, spec, probe)


def _drain(q: queue.Queue, result: JobResult, pending: list) -> None:
    """Steps the job had already sent when the wait ended (nothing measured is dropped)."""
    while True:
        try:
            msg = q.get(timeout=0.2)
        except queue.Empty:
            return
        if msg is None:
            return
        if msg.get("type") == "step":
            _handle(msg, result, pending, lambda e: None, "")


def _handle(msg: dict, result: JobResult, pending: list, notify: Observer, job: str) -> dict | None:
    kind = msg.get("type")
    base = {"job": job, "backend": result.spec.backend, "label": result.name, "run_id": result.run_id}
    if kind == "end" and msg.get("rank"):   # another rank of a data-parallel job: kept, not the job's end
        result.extra.setdefault("rank_ends", {})[str(msg["rank"])] = {k: msg.get(k) for k in ("status", "error")}
        return None
    if kind == "step":
        rec = StepRecord(**{k: msg.get(k) for k in STEP_COLUMNS})
        if result.records and rec.step <= result.records[-1].step:
            return None   # sent again (a job interrupted in its write re-sends on the way out): steps only grow
        result.records.append(rec)
        pending.append(rec)
        if "allreduce_bytes" in msg:   # data parallel: this step's gradient all-reduce (rank 0's view)
            result.extra.setdefault("allreduce_steps", []).append(
                [msg["step"], msg["allreduce_bytes"], msg["allreduce_s"], msg.get("buckets")])
        notify({"type": "step", **base, "record": rec})
    elif kind == "parallel":
        result.extra.update(world_size=msg["world_size"], dist_backend=msg["backend"])
    elif kind == "meta":
        result.device = msg["device"]
        result.extra.update(n_params=msg["n_params"], flops_per_step=msg["flops_per_step"])
        if msg.get("tokenizer"):
            result.extra["tokenizer"] = msg["tokenizer"]
        result.env.update(msg.get("env") or {}, threads=msg.get("threads", result.env.get("threads")))
    elif kind == "phase":
        result.extra["phase"] = msg["phase"]
        notify({"type": "phase", **base, "phase": msg["phase"]})
    elif kind == "compiler":
        result.extra["compiler"] = {k: v for k, v in msg.items() if k != "type"}
        notify({"type": "compiler", **base, **result.extra["compiler"]})
    elif kind == "sched":
        result.extra["sched"] = {k: v for k, v in msg.items() if k != "type"}
    elif kind == "counters":
        result.extra["counters_after_warmup"] = msg["counters"]
    elif kind == "eval":   # the held-out loss per batch; "initial": before the first step (did it learn?)
        key = "eval_loss_initial" if msg.get("when") == "initial" else "eval_loss"
        losses = [float(x) for x in msg.get("losses") or [msg["eval_loss"]]]
        result.extra[key] = msg["eval_loss"]
        result.extra[key.replace("loss", "losses")] = losses
        if len(losses) > 1:
            result.extra[key + "_se"] = statistics.stdev(losses) / math.sqrt(len(losses))
    elif kind == "log":
        notify({"type": "log", **base, "line": msg["line"]})
    elif kind == "end":
        return msg
    return None


def _conclude(result: JobResult, end: dict | None, returncode: int, ending: str, spec: JobSpec,
              probe: dict) -> None:
    recompiles = graph_breaks = None
    if end is not None:
        result.status, result.error = end["status"], end.get("error", "")
        counters = end.get("counters") or {}
        result.extra["counters"] = counters
        if end.get("diagnostics"):   # graph breaks, recompiles, fallbacks, host transfers: where and why
            result.extra["diagnostics"] = end["diagnostics"]
        if end.get("noise"):   # the gradient noise scale from the steady steps' micro-batch gradient norms
            _noise_scale(result, spec, end["noise"])
        if end.get("traceback"):
            result.extra["traceback"] = end["traceback"]
        warm = result.extra.get("counters_after_warmup") or {}
        if "compiles" in counters and "compiles" in warm:
            recompiles = counters["compiles"] - warm["compiles"]
        graph_breaks = counters.get("graph_breaks")
        if spec.script is not None and returncode > 0 and result.ok:
            result.status, result.error = _script_ending(result, returncode)
    elif ending:
        result.status, result.error = "interrupted", ending
    elif returncode < 0:
        sig = signal.Signals(-returncode).name
        hint = " (possibly the kernel's out-of-memory killer)" if sig == "SIGKILL" else ""
        result.status, result.error = "interrupted", f"the job process was killed by {sig}{hint}"
    elif spec.script is not None:
        result.status, result.error = _script_ending(result, returncode)
    else:
        result.status = "failed"
        result.error = f"the job process exited with code {returncode} before reporting; log tail:\n" + result.log_tail[-1500:]
    _rank_failure(result, ending)
    _allreduce_summary(result, spec)
    _set_figures(result, spec, probe, recompiles_after_warmup=recompiles, graph_breaks=graph_breaks)


def _rank_failure(result: JobResult, ending: str) -> None:
    """A data-parallel job ends as its first failing rank says (torchrun then stops the others, rank 0 too)."""
    failed = {r: e for r, e in (result.extra.get("rank_ends") or {}).items() if e.get("status") != "ok"}
    if not failed or ending:   # a stop, a stall or a timeout says why itself
        return
    rank, first = next(iter(failed.items()))
    if result.status in ("ok", "failed", "interrupted"):
        result.status = first.get("status") or "failed"
        result.error = f"rank {rank}: {first.get('error') or 'failed'}"[:2000]


def _allreduce_summary(result: JobResult, spec: JobSpec) -> None:
    """The steady steps' gradient all-reduce: bytes and milliseconds per step (median, IQR) and its share of the
    step (communication / step time; the buckets overlap the backward, so this bounds what overlap could hide)."""
    rows = [r for r in result.extra.get("allreduce_steps") or [] if r[0] >= spec.warmup_steps]
    steps = {rec.step: rec.step_s for rec in result.records}
    if not rows:
        return
    ms = sorted(r[2] * 1e3 for r in rows)
    q = statistics.quantiles(ms, n=4) if len(ms) > 1 else [ms[0]] * 3
    shares = [r[2] / steps[r[0]] for r in rows if steps.get(r[0])]
    result.extra["allreduce"] = {"bytes_per_step": int(median(r[1] for r in rows)), "ms_median": q[1],
                                 "ms_q1": q[0], "ms_q3": q[2], "buckets": rows[-1][3], "steps": len(rows),
                                 "share_of_step": median(shares) if shares else None}


def _noise_scale(result: JobResult, spec: JobSpec, samples: list[dict]) -> None:
    from tcbench.tuning.noise import estimate

    result.extra["noise_samples"] = samples
    steady = samples[spec.warmup_steps:]
    steady = steady[len(steady) // 2:] if len(steady) >= 4 else steady   # it grows as the loss falls: the later half
    try:
        est = estimate(steady, spec.batch_size, spec.batch_size // spec.noise_micro_batches, run_id=result.run_id,
                       seed=spec.seed)
    except ValueError as exc:   # too few steady steps (the job ended early)
        result.extra["noise_scale_error"] = str(exc)
        return
    result.extra["noise_scale"] = est.to_dict()


def _script_ending(result: JobResult, returncode: int) -> tuple[str, str]:
    """(status, error) of a script that ended on its own without an ``end`` message, or with an error after it."""
    n = len(result.records)
    if returncode == 0 and n:
        return "ok", ""
    if returncode == 0:
        return "failed", ("the script exited (code 0) without reporting a step, so nothing was measured: wrap its "
                          "loop in `with tcbench.track() as t:` and call `t.step(loss)` per step, or add "
                          "`tcbench.job.hf.TcbenchCallback()` to its Trainer's callbacks (see examples/)")
    done = f"after {n} measured step(s), which are kept" if n else "before reporting a step"
    return "failed", f"the script exited with code {returncode} {done}; log tail:\n" + result.log_tail[-1500:]


def _batch_size(spec: JobSpec, records: list[StepRecord]) -> int:
    """The batch samples/s is counted with: a script's own per-step batch (samples_s x step_s), else the spec's."""
    sizes = [r.samples_s * r.step_s for r in records if not r.warmup and r.samples_s and r.step_s]
    return max(1, round(median(sizes))) if spec.script is not None and sizes else spec.batch_size


def _set_figures(result: JobResult, spec: JobSpec, probe: dict, **given: Any) -> None:
    """The job's figures from its records and what it reported (also for a job cut short by the caller)."""
    result.records.sort(key=lambda r: r.step)
    sched = result.extra.get("sched") or {}
    threads = result.env.get("threads") or _threads(spec)
    wait = sched.get("wait_s")
    waiting = 1 if sched.get("wait_main_only") else threads   # a rank's main thread alone, or every thread
    wait_share = None if wait is None or not sched.get("wall_s") else wait / (sched["wall_s"] * waiting)
    if result.device.startswith("cuda"):   # on a GPU the reference is the profile's datasheet peak
        probe = _datasheet_peak(spec)
    result.extra["probe"] = {k: v for k, v in probe.items() if k != "cached"}
    result.figures = job_figures(result.records, _batch_size(spec, result.records), spec.warmup_steps, threads=threads,
                                 wait_share=wait_share, steal_share=sched.get("steal_share"), probe=probe,
                                 blocks=spec.world_size > 1, n_params=result.extra.get("n_params"),
                                 flops_per_step=result.extra.get("flops_per_step"), **given)
