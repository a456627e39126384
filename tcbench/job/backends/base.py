"""The Backend protocol: how one training step runs on one compiler stack.

A backend owns the device, the optimizer and the compiled step. The worker calls, in order:
``setup`` (device and caches, before any autograd), ``prepare`` (model and optimizer),
then ``step`` + ``sync`` per optimizer step, ``counters`` and ``compile_phases`` after warmup, and
``counters``/``diagnostics``/``report`` at the end.

Everything that differs between backends outside the training step is asked of the backend too, never decided
from its name: the runner (the parent process, which never imports torch) reads the class attributes and calls
the classmethods marked *parent side*, which import nothing heavy; a user's own script
(``tcbench.job.track``, ``tcbench.job.hf``) calls those marked *script side*.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Callable, Protocol

from tcbench.core.results import CompilePhases
from tcbench.core.spec import JobSpec


class BackendUnavailable(RuntimeError):
    """Raised by ``setup`` when this backend cannot run this spec here; the job's status is ``unavailable``."""


class TrainerMismatch(RuntimeError):
    """Raised by ``trainer_configured`` when a Trainer's arguments would measure another backend than the job's."""


class Backend(Protocol):
    name: str
    # the backend's runtime runs worker threads of its own beside the job's (XLA's PJRT CPU client): their wait for a
    # CPU is the job's own doing, so only the main thread's wait can tell that another process took the CPU
    runtime_threads: bool
    # the warm launcher (torch and transformers imported, nothing else) may fork this backend's plain worker jobs;
    # a runtime that does not survive a fork (XLA's PJRT client) starts each job as a new process
    forkable: bool
    # cache="artifacts" fetches the team's stored compile artifacts for this backend's jobs (Inductor's)
    shares_artifacts: bool
    # the job trains on torch_xla's device: transformers must be imported with USE_TORCH_XLA=1 (else 0)
    torch_xla: bool
    # the spec's Inductor settings (compile_mode, compile_scope, compile_optimizer, cpp_wrapper) apply to its jobs
    inductor_settings: bool

    # -- parent side: no torch import ------------------------------------------------------------------------------
    @classmethod
    def job_env(cls, spec: JobSpec, env: dict[str, str]) -> None:
        """Add this backend's variables to a job process's environment ``env``, in place."""

    @classmethod
    def script_env(cls, cache: Path) -> dict[str, str]:
        """The extra environment of a user's script job (its caches, set before the script creates a device);
        ``cache``: the job's compile cache root."""

    @classmethod
    def compile_cache(cls, cache: Path) -> Path | None:
        """The folder under the compile cache root ``cache`` this backend's compiler writes to (its files are
        counted before and after the job); None where it keeps nothing that a later job could load (every job's
        compile is then cold)."""

    @classmethod
    def parallel_unavailable(cls, spec: JobSpec) -> str:
        """Why this (data-parallel) job cannot run here, as the result's error text; "" when it can."""

    @classmethod
    def preflight(cls, spec: JobSpec) -> None:
        """The machine's settings this backend needs for ``spec``, checked before any process starts; a mismatch
        raises ``tcbench.core.spec.SpecError``."""

    # -- script side: a user's own training loop -------------------------------------------------------------------
    @classmethod
    def collector(cls) -> Any:
        """A ``tcbench.job.diagnostics.Collector`` for this backend's compiler, made before anything is compiled;
        None without a compiler."""

    @classmethod
    def script_device(cls, spec: JobSpec | None) -> Any:
        """The torch device a user's script trains on (``spec``: the job's, None outside a job)."""

    @classmethod
    def compile_script(cls, model: Any, optimizer: Any, spec: JobSpec, device: Callable[[], Any]) -> None:
        """Switch this backend's compiler on for a user's model and optimizer (``optimizer`` may be None), in place;
        ``device()`` gives the script's device."""

    @classmethod
    def cut_graph(cls) -> None:
        """Cut and launch the work traced so far (a lazy backend, XLA: a user's step before the device sync, the
        worker's held-out evaluation before its losses are read); a no-op for an eager device."""

    @classmethod
    def trainer_args(cls, args: Any, spec: JobSpec) -> dict[str, Any]:
        """The changes to a Hugging Face ``TrainingArguments`` that switch this backend's compiler on (or off)."""

    @classmethod
    def trainer_configured(cls, args: Any) -> bool:
        """Whether a Trainer's ``args`` already run this backend's compiler (True: the script is configured);
        ``args`` that contradict the job raise ``TrainerMismatch`` (or RuntimeError when the Trainer cannot run
        at all)."""

    # -- the job process -------------------------------------------------------------------------------------------
    def join_process_group(self, dist_name: str) -> None:
        """Join torchrun's process group with torch.distributed's backend ``dist_name`` (``dist_backend``)."""

    def available(self) -> tuple[bool, str]:
        """(usable, reason) without creating a device; the reason says why not."""

    def setup(self, spec: JobSpec, cache_dir: str) -> Any:
        """Configure caches and create the device; returns the torch device."""

    def prepare(self, model: Any, spec: JobSpec) -> None:
        """Move the model, build the optimizer and (for compilers) the compiled step."""

    def step(self, batch: dict) -> Any:
        """One optimizer step (forward, backward, update); returns the detached loss tensor."""

    def sync(self) -> None:
        """Block until the device has finished the step (the timer stops after this)."""

    def peak_memory(self) -> int | None:
        """Peak device bytes where the device reports them (CUDA, XLA); None: use process RSS."""

    def counters(self) -> dict:
        """Compiler counters: compiles, graph breaks, ... (cheap; read after warmup and at the end)."""

    def compile_phases(self) -> CompilePhases | None:
        """Where the compile time went so far (``CompilePhases``; read once, after warmup); None without a
        compiler."""

    def diagnostics(self) -> dict:
        """What the compiler did and where (graph breaks, recompiles, fallbacks, host transfers) as plain data
        (``tcbench.job.diagnostics.Collector.collect``); ``{}`` for a backend without a compiler."""

    def report(self) -> str:
        """The compiler's own report text (kept in the run's artifacts when debug=True)."""


def dist_backend(device_type: str) -> str:
    """The process group's backend for the job's device: NCCL on CUDA, XLA's own on an XLA device (TPU or
    CUDA PJRT), gloo on CPU."""
    return {"cuda": "nccl", "xla": "xla"}.get(device_type, "gloo")


def autocast_ctx(device_type: str, precision: str):
    """Autocast for bf16/fp16 mixed precision; a no-op context for fp32."""
    import torch

    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device_type, dtype=dtype)


def adamw(params: Any, spec: JobSpec, device_type: str, fused: bool) -> Any:
    """AdamW with the fastest kernel the device offers (fused on CPU/CUDA, foreach otherwise)."""
    import torch

    if fused and device_type in ("cpu", "cuda"):
        return torch.optim.AdamW(params, lr=spec.lr, fused=True)
    return torch.optim.AdamW(params, lr=spec.lr, foreach=True)


def local_device(spec: JobSpec | None = None) -> Any:
    """CUDA when present (capped to the profile's per-device memory when the GPU is larger), else CPU."""
    import torch

    if not torch.cuda.is_available():
        return torch.device("cpu")
    index = int(os.environ.get("LOCAL_RANK", "0"))   # torchrun: one GPU per data-parallel process
    torch.cuda.set_device(index)
    fraction = memory_fraction(spec.memory_budget_gb if spec else None,
                               torch.cuda.get_device_properties(index).total_memory)
    if fraction is not None:   # the result is then what an instance with that much memory would give
        torch.cuda.set_per_process_memory_fraction(fraction, index)
    return torch.device("cuda", index)


def memory_fraction(budget_gb: float | None, total_bytes: int) -> float | None:
    """The share of a GPU's ``total_bytes`` a job capped at ``budget_gb`` GiB may allocate (what
    ``torch.cuda.set_per_process_memory_fraction`` takes: the caching allocator then refuses, as out of memory,
    what would take the process past it), or None when there is no cap or the GPU is not larger than it."""
    if not budget_gb:
        return None
    fraction = budget_gb * 2**30 / total_bytes
    return fraction if fraction < 1.0 else None


class CommLog:
    """What DDP's gradient all-reduce cost per step: bytes sent into the collective and seconds from a bucket's
    launch to its completion (a bucket waits for the slowest process too; buckets overlap the backward, so the
    seconds are the communication's length, not the time it added to the step)."""

    def __init__(self, compress: bool) -> None:
        import threading

        self.compress = compress   # fp16/bf16 jobs all-reduce in FP16, as SageMaker's data-parallel library does
        self.lock = threading.Lock()
        self.bytes, self.seconds, self.buckets = 0, 0.0, 0

    def add(self, nbytes: int, seconds: float) -> None:
        with self.lock:
            self.bytes += nbytes
            self.seconds += seconds
            self.buckets += 1

    def take(self) -> dict:
        """This step's totals (and reset): {"allreduce_bytes", "allreduce_s", "buckets"}."""
        with self.lock:
            out = {"allreduce_bytes": self.bytes, "allreduce_s": self.seconds, "buckets": self.buckets}
            self.bytes, self.seconds, self.buckets = 0, 0.0, 0
        return out


def _timed_allreduce(log, bucket):   # no annotations: DDP checks them (and ours are strings here)
    """A DDP communication hook: the default all-reduce (mean of the gradients), timed, in FP16 if asked."""
    import time

    import torch
    import torch.distributed as dist

    buffer = bucket.buffer()
    tensor = buffer.to(torch.float16) if log.compress and buffer.dtype != torch.float16 else buffer
    tensor.div_(dist.get_world_size())
    t0 = time.perf_counter()
    fut = dist.all_reduce(tensor, async_op=True).get_future()

    def done(f: Any) -> Any:
        out = f.value()[0]
        log.add(out.numel() * out.element_size(), time.perf_counter() - t0)
        if out is not buffer:
            buffer.copy_(out)
        return buffer

    return fut.then(done)


def data_parallel(model: Any, device: Any, precision: str) -> tuple[Any, CommLog | None]:
    """(the model wrapped in DistributedDataParallel with a timed all-reduce, its CommLog) under torchrun with
    more than one process; (the model, None) otherwise."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized() or dist.get_world_size() == 1:
        return model, None
    from torch.nn.parallel import DistributedDataParallel

    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    log = CommLog(compress=precision in ("fp16", "bf16"))
    ddp.register_comm_hook(log, _timed_allreduce)
    return ddp, log
