"""The job process: one spawned Python process trains one JobSpec and streams what it measures.

Run as ``python -m tcbench.job.worker <spec-json> <fd> <run-dir>``. Every message is one JSON line on
file descriptor ``fd`` (stdout/stderr go to the run's log file, so library prints cannot corrupt
the stream). Messages: ``log``, ``meta`` (after model and data load), ``step`` (one per optimizer step),
``counters`` (after warmup), ``end`` (status, error, counters). A crash, an OOM or a kill stays in
this process; the parent turns whatever arrived into a JobResult.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
import traceback

from tcbench.job.factory import batch_size_of, loss_of, seq_len_of
from tcbench.core.spec import JobSpec, is_factory


class _Channel:
    """JSON lines to the parent. Step records are sent in small batches (at most FLUSH_S late): a
    wake-up of the parent on every step steals a core from this job's OpenMP threads on a small machine.
    A background thread flushes what waits longer than FLUSH_S, so a job that hangs after a step (a user's
    script in a ``sleep``, a deadlock) has still delivered every step it measured.

    Lines are written whole, in ``write()`` calls of at most PIPE_BUF bytes: the data-parallel processes of one
    job share a FIFO, and the kernel keeps such writes from interleaving. In a data-parallel job only the
    machine's first process (LOCAL_RANK 0; rank 0 on one machine) reports; the other ranks send their ``end``
    alone (with ``rank``), so the parent learns which one failed."""

    FLUSH_S = 0.25
    PIPE_BUF = 4096

    def __init__(self, fd: int, rank: int = 0, reports: bool | None = None) -> None:
        self._fd, self.rank = fd, rank
        self.reports = rank == 0 if reports is None else reports   # this machine's first process reports
        self._lines: list[bytes] = []
        self._last = time.monotonic()
        self._lock = threading.Lock()
        self._closed = False
        self._flusher: threading.Thread | None = None

    def send(self, kind: str, **payload) -> None:
        if not self.reports and kind != "end":
            return
        line = (json.dumps({"type": kind, **payload, **({} if self.reports else {"rank": self.rank})}) + "\n").encode()
        with self._lock:
            self._lines.append(line)
            now = time.monotonic()
            if kind != "step" or now - self._last >= self.FLUSH_S:
                self._flush_locked(now)
            elif self._flusher is None:
                self._flusher = threading.Thread(target=self._flush_late, daemon=True, name="tcbench-flush")
                self._flusher.start()

    def flush(self) -> None:
        with self._lock:
            self._flush_locked(time.monotonic())

    def close(self) -> None:
        with self._lock:
            self._flush_locked(time.monotonic())
            self._closed = True
            os.close(self._fd)

    def _flush_locked(self, now: float) -> None:
        """Lines leave ``_lines`` as soon as their write returns: a KeyboardInterrupt (SIGINT) raised between
        two writes neither sends a line twice when the job's ``end`` flushes again nor drops one."""
        self._last = now
        try:
            while self._lines:
                n, size = 1, len(self._lines[0])
                while n < len(self._lines) and size + len(self._lines[n]) <= self.PIPE_BUF:
                    size += len(self._lines[n])
                    n += 1
                chunk = b"".join(self._lines[:n])
                while chunk:   # a pipe takes a write <= PIPE_BUF whole; a longer single line is split
                    chunk = chunk[os.write(self._fd, chunk):]
                del self._lines[:n]
        except OSError:   # the parent is gone, or the channel closed: nobody to tell
            self._lines = []

    def _flush_late(self) -> None:
        while not self._closed:
            time.sleep(self.FLUSH_S)
            with self._lock:
                if self._lines and not self._closed and time.monotonic() - self._last >= self.FLUSH_S:
                    self._flush_locked(time.monotonic())


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


class RssMeter:
    """CPU memory: the process's RSS high-water mark above the baseline taken after the model, optimizer and data are loaded."""

    def __init__(self) -> None:
        try:  # writing 5 to clear_refs resets VmHWM to the current RSS (Linux >= 4.0)
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            pass
        self.baseline = _status_kib("VmRSS") * 1024

    def peak_above_baseline(self) -> int:
        return max(_status_kib("VmHWM") * 1024 - self.baseline, 0)


def _classify(exc: BaseException) -> str:
    from tcbench.job.backends import BackendUnavailable

    if isinstance(exc, BackendUnavailable):
        return "unavailable"
    if isinstance(exc, KeyboardInterrupt):   # SIGINT (Jupyter's "Interrupt kernel" signals the process group)
        return "interrupted"
    text = f"{type(exc).__name__}: {exc}".lower()
    if isinstance(exc, MemoryError) or "out of memory" in text or "resource_exhausted" in text or "oom" in text.split():
        return "oom"
    return "failed"


def _announce(chan: _Channel, spec: JobSpec) -> None:
    if spec.backend == "eager":
        chan.send("log", line="[tcbench] native PyTorch (eager), no compiler configured")
        return
    chan.send("compiler", backend=spec.backend, mode=spec.compile_mode, precision=spec.precision, debug=spec.debug)
    chan.send("log", line=f"[tcbench] Found configuration for compiler {spec.backend}. Configuring tcbench "
                          f"{spec.backend} backend (mode={spec.compile_mode}, precision={spec.precision}) ...")
    if spec.debug:
        chan.send("log", line=f"[tcbench] {spec.backend} compiler set to debug mode: its report is kept in the run's artifacts")


def _sched_wait_s(main_only: bool = False) -> float | None:
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


def _cpu_jiffies() -> tuple[int, int] | None:
    """(steal, total) CPU time of the whole machine (/proc/stat): steal is what the hypervisor took."""
    try:
        with open("/proc/stat") as f:
            vals = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return (vals[7] if len(vals) > 7 else 0), sum(vals[:8])


def _gpu_env() -> dict:
    """GPU name, CUDA version and driver when a GPU is present (stored with the run's environment)."""
    import torch

    if not torch.cuda.is_available():
        return {}
    env = {"gpu": torch.cuda.get_device_name(0), "gpu_count": torch.cuda.device_count(), "cuda": torch.version.cuda}
    try:
        import subprocess

        env["gpu_driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                           capture_output=True, text=True, timeout=10).stdout.split("\n")[0].strip()
    except (OSError, subprocess.SubprocessError):
        env["gpu_driver"] = None
    return env


class Workload:
    """What a job trains on: its model (catalog, local folder or factory) and its batches (the shipped task,
    a CSV/JSONL file or a batch factory). Text data is tokenized with a local folder's own tokenizer when it
    has one, else with the shipped one."""

    def __init__(self, spec: JobSpec) -> None:
        from tcbench.job import data as _data
        from tcbench.job.models import model_task

        self.spec = spec
        self.custom_data = is_factory(spec.dataset)
        self.custom_model = spec.model_kind == "factory"
        if self.custom_data:
            self.task, self.num_labels, self.tokenizer, self.tokenizer_source = "custom", None, None, None
        else:
            self.task = "sequence-classification" if self.custom_model else model_task(spec.model)
            self.num_labels = _data.num_labels(_data.load_examples(spec.dataset, "train"))
            self.tokenizer, self.tokenizer_source = _data.job_tokenizer(spec.model)

    def model(self):
        from tcbench.job import factory as _factory
        from tcbench.job.models import build_model

        s = self.spec
        if self.custom_model:
            import torch

            torch.manual_seed(s.seed)
            return _factory.build_model(s.model, s.size, s.seq_len, self.num_labels, s.dropout, s.seed)
        return build_model(s.model, s.size, dropout=s.dropout, num_labels=self.num_labels or 2, seed=s.seed)

    def batches(self, split: str):
        from tcbench.job import data as _data
        from tcbench.job import factory as _factory

        s = self.spec
        seed = s.seed if split == "train" else s.seed + 1
        rank, world = _rank_world()
        shard = split == "train" and world > 1   # DistributedSampler's split: process r takes every world-th example
        if self.custom_data:   # a factory's stream cannot be split: each process draws its own with seed + rank
            return _factory.batches(s.dataset, s.batch_size, s.seq_len, s.seed + rank if shard else s.seed, split)
        examples = _data.load_examples(s.dataset, split)
        return _data.batches(self.task, examples[rank::world] if shard else examples, self.tokenizer, s.batch_size,
                             s.seq_len, s.padding, seed)

    def flops(self, n_params: int) -> float | None:
        """FLOPs of one training step: the catalog's formula for text models, counted for a factory model."""
        from tcbench.job import factory as _factory
        from tcbench.job.models import flops_per_step

        s = self.spec
        if not self.custom_model:
            return flops_per_step(s.model, s.size, n_params, s.batch_size, s.seq_len, self.task)
        first = next(self.batches("train"))
        return _factory.count_flops(s.model, s.size, s.seq_len, self.num_labels, s.dropout, s.seed, first)


def _rank_world() -> tuple[int, int]:
    """(rank, world size) under torchrun; (0, 1) for a single-process job."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def dist_backend(device_type: str) -> str:
    """The process group's backend for the job's device: NCCL on CUDA, XLA's own on an XLA device (TPU or
    CUDA PJRT), gloo on CPU."""
    return {"cuda": "nccl", "xla": "xla"}.get(device_type, "gloo")


def _init_data_parallel(chan: _Channel, device) -> int:
    """Join the job's process group; returns the world size (1: no group)."""
    rank, world = _rank_world()
    if world == 1:
        return 1
    import torch.distributed as dist

    backend = dist_backend(device.type)
    if backend == "xla":   # torch_xla's PJRT process group, which torchrun's environment configures
        import torch_xla.distributed.xla_backend  # noqa: F401 - registers the "xla" backend and xla://

        dist.init_process_group(backend, init_method="xla://")
    else:
        dist.init_process_group(backend)
    chan.send("parallel", world_size=world, backend=backend, local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", world)))
    return world


def train(spec: JobSpec, chan: _Channel, run_dir: str) -> None:
    """The measured loop: one straight path from spec to step records."""
    chan.send("phase", phase="loading")   # importing torch alone takes seconds: the stall clock starts here
    import torch

    from tcbench.job import data as _data
    from tcbench.job.models import count_params
    from tcbench.job.backends import get_backend

    torch.set_num_threads(spec.threads or max(1, len(os.sched_getaffinity(0)) // spec.nproc))
    backend = get_backend(spec.backend)
    _announce(chan, spec)
    chan.send("log", line=f"[tcbench] {torch.get_num_threads()} CPU thread(s) for this job")
    device = backend.setup(spec, os.environ.get("TCBENCH_XLA_CACHE", os.path.join(run_dir, "xla-cache")))
    world = _init_data_parallel(chan, device)

    work = Workload(spec)
    model = work.model()
    n_params = count_params(model)
    flops = work.flops(n_params)          # before prepare: a factory's count runs on a meta-device copy
    backend.prepare(model, spec)          # under torchrun: wrapped in DistributedDataParallel
    comm = getattr(backend, "comm", None)
    torch.manual_seed(spec.seed)
    # Encoding the data set happens here, before the meter: it is the same for every backend and batch size,
    # and its transient peak would otherwise dominate a small model's training memory.
    batches = work.batches("train")
    meter = RssMeter()   # baseline: after the model, the optimizer and the encoded data exist
    chan.send("meta", n_params=n_params, flops_per_step=flops, device=str(device), task=work.task,
              threads=torch.get_num_threads(), env=_gpu_env(), mem_baseline_bytes=meter.baseline,
              tokenizer=work.tokenizer_source)

    if hasattr(backend, "wrap_loader"):
        import itertools

        it = backend.wrap_loader(list(itertools.islice(batches, spec.steps)))
    else:
        it = (_data.batch_on_device(b, device) for b in batches)
    budget = None if spec.memory_budget_gb is None else spec.memory_budget_gb * 2**30
    if spec.eval_batches and not spec.compiled and chan.reports:   # the untrained model's loss: did it learn?
        chan.send("phase", phase="eval")
        losses = evaluate(spec, backend, work, device)
        chan.send("eval", when="initial", eval_loss=sum(losses) / len(losses), losses=losses)
    chan.send("phase", phase="compiling" if spec.compiled else "warmup")
    steady_from: tuple | None = None    # (wall, cpu, schedstat wait) when the steady steps began
    for step in range(spec.steps):
        if step == spec.warmup_steps:
            chan.send("phase", phase="measuring")
            steady_from = (time.perf_counter(), time.process_time(), _sched_wait_s(world > 1), _cpu_jiffies())
        batch = next(it)
        seq, samples = seq_len_of(batch), batch_size_of(batch)
        c0 = time.process_time()   # CPU time of all this process's threads: how much of the step it had the CPU
        t0 = time.perf_counter()
        loss_t = backend.step(batch)
        backend.sync()
        dt = time.perf_counter() - t0
        cpu = time.process_time() - c0
        # Reading the loss is a host<->device sync: only every loss_every steps (and the last one).
        read = (step + 1) % spec.loss_every == 0 or step == spec.steps - 1
        loss = float(loss_t) if read else None
        dev_peak = backend.peak_memory()
        mem = dev_peak if dev_peak is not None else meter.peak_above_baseline()
        # data parallel: rank 0 reports; a step is synchronous (the all-reduce), so the job's throughput is world×
        chan.send("step", step=step, step_s=dt, samples_s=world * samples / dt, tokens_s=world * samples * seq / dt,
                  mem_bytes=int(mem), loss=loss, warmup=step < spec.warmup_steps, seq_len=seq, cpu_s=cpu,
                  **(comm.take() if comm is not None else {}))
        if step == spec.warmup_steps - 1:
            chan.send("counters", when="after_warmup", counters=backend.counters())
        if loss is not None and not math.isfinite(loss):
            _finish(chan, backend, spec, run_dir, "diverged", f"loss became {loss} at step {step} (lr={spec.lr})")
            return
        if budget is not None and mem > budget:
            _finish(chan, backend, spec, run_dir, "oom",
                    f"peak memory {mem / 2**30:.2f} GiB at step {step} exceeds the profile's budget of "
                    f"{spec.memory_budget_gb:.2f} GiB (batch_size={spec.batch_size})")
            return
    _send_sched(chan, steady_from, main_only=world > 1)
    if spec.eval_batches and chan.reports:
        chan.send("phase", phase="eval")
        losses = evaluate(spec, backend, work, device)
        chan.send("eval", eval_loss=sum(losses) / len(losses), losses=losses)
    _finish(chan, backend, spec, run_dir, "ok", "")


def _send_sched(chan: _Channel, since: tuple | None, main_only: bool = False) -> None:
    """Over the steady steps: wall, CPU and run-queue wait seconds (the parent derives the shares); ``main_only``:
    the wait is the main thread's (``_sched_wait_s``)."""
    if since is None:
        return
    wall, cpu = time.perf_counter() - since[0], time.process_time() - since[1]
    wait, jiffies = _sched_wait_s(main_only), _cpu_jiffies()
    steal = None
    if jiffies and since[3] and jiffies[1] > since[3][1]:
        steal = (jiffies[0] - since[3][0]) / (jiffies[1] - since[3][1])
    chan.send("sched", wall_s=wall, cpu_s=cpu, wait_s=None if wait is None or since[2] is None else wait - since[2],
              steal_share=steal, wait_main_only=main_only)


def evaluate(spec: JobSpec, backend, work: "Workload", device) -> list[float]:
    """The loss of each of ``spec.eval_batches`` batches of the held-out split (no grad, eval mode; the same
    batches every time, so two evaluations of one job are paired batch by batch)."""
    import torch

    from tcbench.job import data as _data

    model = backend.model
    model = getattr(model, "module", model)   # DDP's replica on this process: no collective in an evaluation
    model.eval()
    batches = work.batches("eval")
    losses = []
    with torch.no_grad():
        for _ in range(spec.eval_batches):
            batch = _data.batch_on_device(next(batches), device)
            losses.append(loss_of(model(**batch)).detach())
        if hasattr(backend, "wrap_loader"):
            import torch_xla

            torch_xla.sync()
        values = [float(x) for x in torch.stack(losses).float().cpu()]
    model.train()
    return values


def _finish(chan: _Channel, backend, spec: JobSpec, run_dir: str, status: str, error: str) -> None:
    counters = backend.counters()
    if spec.debug:
        path = os.path.join(run_dir, f"{spec.backend}-compiler-report.txt")
        with open(path, "w") as f:
            f.write(backend.report())
        chan.send("log", line=f"[tcbench] compiler report written to {path}")
    noise = backend.noise_samples() if hasattr(backend, "noise_samples") else []
    chan.send("end", status=status, error=error, counters=counters, diagnostics=backend.diagnostics(),
              **({"noise": noise} if noise else {}))


def _die_with_parent() -> None:
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


def main(argv: list[str]) -> int:
    _die_with_parent()
    # SIGINT means "stop" even when the caller's shell started us with it ignored (a background job, nohup, CI)
    import signal

    signal.signal(signal.SIGINT, signal.default_int_handler)
    spec = JobSpec.from_json(argv[0])
    rank, _ = _rank_world()
    channel = os.environ.get("TCBENCH_CHANNEL")   # data parallel: the ranks share the launcher's FIFO
    chan = _Channel(os.open(channel, os.O_WRONLY) if channel else int(argv[1]), rank,
                    reports=os.environ.get("LOCAL_RANK", "0") == "0")
    run_dir = argv[2]
    try:
        train(spec, chan, run_dir)
    except BaseException as exc:  # the job's failure is data for the parent, not a crash
        traceback.print_exc()
        tb = traceback.format_exc()
        status = _classify(exc)
        keep = 6000 if chan.reports else 1500   # another rank's end stays one whole write on the shared FIFO
        chan.send("end", status=status, error=f"{type(exc).__name__}: {exc}"[:min(2000, keep)], traceback=tb[-keep:])
        chan.flush()
        return 1
    finally:
        _leave_group()
    chan.flush()
    return 0


def _leave_group() -> None:
    if "torch.distributed" not in sys.modules:
        return
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - the job's result is already sent
        pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
