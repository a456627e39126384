"""Run one JobSpec in its own process and turn every ending into a JobResult.

The parent never busy-waits: a reader thread blocks on the job's pipe and hands messages over a
queue; the parent waits on that queue with a timeout and checks the stop event and the deadline
between messages. Step records are written to the store as they arrive (batched, at most 0.5 s late),
so a job killed mid-run keeps every step it reported.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

from ._metrics import job_figures, peak_flops
from ._results import JobResult, StepRecord
from ._spec import JobSpec
from ._store import Store, home

Observer = Callable[[dict], None]
_POLL_S = 0.25
# Step records reach the store in small batches: one SQLite commit per step would wake this process
# (and steal a core from the job's OpenMP threads) on every step of a fast job.
_FLUSH_S = 0.5


def backend_status(name: str) -> tuple[bool, str]:
    """(available, reason) for a backend, checked without importing torch."""
    from ._backends import get_backend

    return get_backend(name).available()


def _cache_dirs(spec: JobSpec) -> tuple[Path, Path | None]:
    """The compile cache for this job and, for cache='cold', the temporary folder to delete."""
    if spec.cache == "cold":
        tmp = Path(tempfile.mkdtemp(prefix="tcbench-cold-cache-"))
        return tmp, tmp
    return home() / "cache", None


def _count_files(path: Path) -> int:
    return sum(len(files) for _, _, files in os.walk(path)) if path.exists() else 0


def job_env(spec: JobSpec, cache: Path) -> dict[str, str]:
    """The job process's environment: offline hub, one thread setting, the compile caches."""
    env = dict(os.environ)
    threads = str(spec.threads or len(os.sched_getaffinity(0)))
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS=threads, PYTHONUNBUFFERED="1",
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


def _reader(stream: Any, q: "queue.Queue[dict | None]") -> None:
    for line in stream:
        try:
            q.put(json.loads(line))
        except json.JSONDecodeError:
            q.put({"type": "log", "line": line.rstrip()})
    q.put(None)


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _tail(path: Path, n: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


def run(spec: JobSpec, observer: Observer | None = None, stop: threading.Event | None = None,
        store: Store | None = None, comparison_id: int | None = None, round: int = 0,
        job: str | None = None) -> JobResult:
    """Run one job in its own process and return its JobResult (a failure is a status, never a raise)."""
    store = store or Store()
    job = job or f"{spec.backend}#{round}"
    notify = observer or (lambda event: None)
    run_id = store.insert_run(spec.to_json(), spec, comparison_id, round)
    # run folders are named by time as well: several stores may share one TCBENCH_HOME
    run_dir = home() / "runs" / f"{time.strftime('%Y%m%d-%H%M%S')}-{run_id}-{spec.backend}"
    run_dir.mkdir(parents=True, exist_ok=True)
    result = JobResult(spec=spec, status="running", run_id=run_id, artifacts=str(run_dir))
    notify({"type": "start", "job": job, "backend": spec.backend, "round": round, "run_id": run_id, "spec": spec})
    ok, reason = backend_status(spec.backend)
    if not ok:
        result.status, result.error = "unavailable", f"backend {spec.backend!r} is unavailable: {reason}"
    else:
        _execute(spec, result, store, notify, stop, run_dir, job)
    _store_result(store, result)
    notify({"type": "end", "job": job, "backend": spec.backend, "run_id": run_id, "result": result})
    return result


def _execute(spec: JobSpec, result: JobResult, store: Store, notify: Observer, stop: threading.Event | None,
             run_dir: Path, job: str) -> None:
    try:
        peak = peak_flops(spec.threads, store)
        result.peak_flops = peak["fp32" if spec.precision == "fp32" else "bf16"]
    except Exception as exc:  # MFU is then unknown; the job still runs
        result.extra["probe_error"] = str(exc)
    cache, tmp = _cache_dirs(spec)
    before = _count_files(cache / spec.backend if spec.backend == "xla" else cache / "inductor")
    read_fd, write_fd = os.pipe()
    log_path = run_dir / "worker.log"
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "tcbench._worker", spec.to_json(), str(write_fd), str(run_dir)],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=job_env(spec, cache), pass_fds=(write_fd,), cwd=str(run_dir))
    os.close(write_fd)
    q: queue.Queue = queue.Queue()
    reader = threading.Thread(target=_reader, args=(os.fdopen(read_fd), q), daemon=True)
    reader.start()
    end, stopped, timed_out = None, False, False
    pending: list[StepRecord] = []   # steps not yet in the store (flushed at least every _FLUSH_S)
    last_flush = time.monotonic()
    while True:
        if pending and (q.empty() or time.monotonic() - last_flush > _FLUSH_S):
            store.add_steps(result.run_id, pending)
            pending, last_flush = [], time.monotonic()
        if stop is not None and stop.is_set():
            stopped = True
            _kill(proc)
        if time.monotonic() - t0 > spec.timeout_s:
            timed_out = True
            _kill(proc)
        try:
            msg = q.get(timeout=_POLL_S)
        except queue.Empty:
            continue
        if msg is None:
            break
        end = _handle(msg, result, pending, notify, job) or end
    if pending:
        store.add_steps(result.run_id, pending)
    proc.wait()
    result.wall_s = time.monotonic() - t0
    after = _count_files(cache / spec.backend if spec.backend == "xla" else cache / "inductor")
    if spec.compiled:
        result.cache_state = "cold" if (after > before or spec.cache == "cold") else "warm"
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)
    result.log_tail = _tail(log_path)
    _conclude(result, end, proc.returncode, stopped, timed_out, spec)


def _handle(msg: dict, result: JobResult, pending: list, notify: Observer, job: str) -> dict | None:
    kind = msg.get("type")
    base = {"job": job, "backend": result.spec.backend, "run_id": result.run_id}
    if kind == "step":
        rec = StepRecord(**{k: msg[k] for k in ("step", "step_s", "samples_s", "tokens_s", "mem_bytes", "loss",
                                                "warmup", "seq_len")})
        result.records.append(rec)
        pending.append(rec)
        notify({"type": "step", **base, "record": rec})
    elif kind == "meta":
        result.n_params, result.flops_per_step, result.device = msg["n_params"], msg["flops_per_step"], msg["device"]
        result.extra["threads"] = msg.get("threads")
    elif kind == "counters":
        result.extra["counters_after_warmup"] = msg["counters"]
    elif kind == "eval":
        result.extra["eval_loss"] = msg["eval_loss"]
    elif kind == "log":
        notify({"type": "log", **base, "line": msg["line"]})
    elif kind == "end":
        return msg
    return None


def _conclude(result: JobResult, end: dict | None, returncode: int, stopped: bool, timed_out: bool,
              spec: JobSpec) -> None:
    if end is not None:
        result.status, result.error = end["status"], end.get("error", "")
        counters = end.get("counters") or {}
        result.extra["counters"] = counters
        if end.get("traceback"):
            result.extra["traceback"] = end["traceback"]
        warm = result.extra.get("counters_after_warmup") or {}
        if "compiles" in counters and "compiles" in warm:
            result.recompiles_after_warmup = counters["compiles"] - warm["compiles"]
        result.graph_breaks = counters.get("graph_breaks")
    elif stopped:
        result.status, result.error = "interrupted", "stopped by the user; the steps measured so far are kept"
    elif timed_out:
        result.status, result.error = "interrupted", f"timed out after timeout_s={spec.timeout_s:.0f} s"
    elif returncode < 0:
        sig = signal.Signals(-returncode).name
        hint = " (possibly the kernel's out-of-memory killer)" if sig == "SIGKILL" else ""
        result.status, result.error = "interrupted", f"the job process was killed by {sig}{hint}"
    else:
        result.status = "failed"
        result.error = f"the job process exited with code {returncode} before reporting; log tail:\n" + result.log_tail[-1500:]
    result.records.sort(key=lambda r: r.step)
    result.__dict__.update(job_figures(result.records, spec.batch_size, spec.warmup_steps, result.flops_per_step,
                                       result.peak_flops))


def _store_result(store: Store, result: JobResult) -> None:
    figures = {k: getattr(result, k) for k in ("status", "error", "median_step_s", "samples_s", "tokens_s",
                                                "warmup_s", "compile_latency_s", "cache_state", "peak_mem_bytes",
                                                "mfu", "flops_per_step", "peak_flops", "n_params", "final_loss",
                                                "recompiles_after_warmup", "graph_breaks", "device", "wall_s",
                                                "artifacts", "log_tail")}
    store.finish_run(result.run_id, figures, result.extra)
