"""The Backend protocol: how one training step runs on one compiler stack.

A backend owns the device, the optimizer and the compiled step. The worker calls, in order:
``setup`` (device and caches, before any autograd), ``prepare`` (model and optimizer),
then ``step`` + ``sync`` per optimizer step, and ``counters``/``diagnostics``/``report`` at the end.
"""

from __future__ import annotations

import contextlib
from typing import Any, Protocol

from .._spec import JobSpec


class BackendUnavailable(RuntimeError):
    """Raised by ``setup`` when this backend cannot run this spec here; the job's status is ``unavailable``."""


class Backend(Protocol):
    name: str

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

    def diagnostics(self) -> dict:
        """What the compiler did and where (graph breaks, recompiles, fallbacks, host transfers) as plain data
        (``tcbench._diagnose.Collector.collect``); ``{}`` for a backend without a compiler."""

    def report(self) -> str:
        """The compiler's own report text (kept in the run's artifacts when debug=True)."""


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
    if spec is not None and spec.memory_budget_gb:
        total = torch.cuda.get_device_properties(0).total_memory
        fraction = spec.memory_budget_gb * 2**30 / total
        if fraction < 1.0:   # the result is then what an instance with that much memory would give
            torch.cuda.set_per_process_memory_fraction(fraction)
    return torch.device("cuda")
