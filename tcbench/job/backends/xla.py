"""PyTorch/XLA: lazy tensors traced per step and compiled by XLA at ``torch_xla.sync()``.

Runs on the PJRT device that exists (CPU here with ``PJRT_DEVICE=CPU``; TPU/GPU where their
plugin is installed). The device is created in ``setup``, before any autograd runs in the process
(after a CPU backward, creating it crashes the autograd engine). The optimizer is the syncfree
AdamW (no host sync for inf checks); batches arrive through ``MpDeviceLoader``.

Data parallel (nproc > 1, TPU or CUDA PJRT devices only): torchrun starts one process per device, the process
group is torch_xla's (``xla://``), each process reads its own shard with the same seed, and
``xm.optimizer_step`` all-reduces the gradients before the update. The all-reduce is part of the compiled
step graph, so its time is not measured apart (bytes: 4 per parameter in fp32). On the CPU device such a job
is ``unavailable`` (see ``_runner._parallel_unavailable``).
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from tcbench.core.results import CompilePhases
from tcbench.core.spec import JobSpec
from tcbench.job.factory import loss_of
from tcbench.job.backends.base import BackendUnavailable


class XlaBackend:
    name = "xla"
    runtime_threads = True

    def available(self) -> tuple[bool, str]:
        from tcbench.host.requirements import backend_status

        return backend_status(self.name)   # missing, or a major.minor other than torch's: unavailable, with why

    def setup(self, spec: JobSpec, cache_dir: str) -> Any:
        import torch_xla
        import torch_xla.runtime as xr

        os.makedirs(cache_dir, exist_ok=True)
        xr.initialize_cache(cache_dir, readonly=False)   # persistent compilation cache
        self.spec = spec
        if spec.precision != "fp32" and xr.device_type() not in ("TPU", "CUDA", "GPU"):
            raise BackendUnavailable(
                f"precision={spec.precision!r} needs XLA autocast, which torch_xla supports on TPU and CUDA only; "
                f"this PJRT device is {xr.device_type()} (use precision='fp32' with the xla backend here)")
        self.device = torch_xla.device()
        from tcbench.job.diagnostics import setup as diagnose

        self.diag = diagnose("xla")   # compiles, executions and transfers from here on
        return self.device

    def prepare(self, model: Any, spec: JobSpec) -> None:
        from torch_xla.amp import syncfree

        self.model = model.to(self.device).train()
        self.opt = syncfree.AdamW(self.model.parameters(), lr=spec.lr)

    def wrap_loader(self, batches: Any) -> Any:
        """Batches are copied to the device by a background thread while the step runs."""
        import torch_xla.distributed.parallel_loader as pl

        return iter(pl.MpDeviceLoader(batches, self.device))

    def step(self, batch: dict) -> Any:
        with self.diag.step(batch):   # this step's input shapes, compiles, transfers and CPU fallbacks
            return self._step(batch)

    def _step(self, batch: dict) -> Any:
        import torch_xla
        import torch_xla.core.xla_model as xm

        if self.spec.precision == "fp32":
            loss = loss_of(self.model(**batch))
        else:
            from torch_xla.amp import autocast

            import torch
            dtype = torch.bfloat16 if self.spec.precision == "bf16" else torch.float16
            with autocast(self.device, dtype=dtype):
                loss = loss_of(self.model(**batch))
        loss.backward()
        # the troubleshooting page's data-parallel rule: gradients all-reduced (averaged over the replicas)
        # before the update; with one device (this CPU) optimizer_step is the plain step
        xm.optimizer_step(self.opt)
        self.opt.zero_grad(set_to_none=True)
        torch_xla.sync()        # cut the lazy graph here: compile (first time) and launch the step
        return loss.detach()

    def sync(self) -> None:
        import torch_xla.core.xla_model as xm

        xm.wait_device_ops()    # the timer stops only when the device has finished

    def peak_memory(self) -> int | None:
        import torch_xla.core.xla_model as xm

        try:
            info = xm.get_memory_info(self.device)
        except Exception:       # the CPU PJRT client reports no memory info
            return None
        peak = info.get("peak_bytes_used") or info.get("bytes_used")
        return int(peak) if peak else None

    def counters(self) -> dict:
        import torch_xla.debug.metrics as met

        compile_data = met.metric_data("CompileTime")
        exec_data = met.metric_data("ExecuteTime")
        return {"compiles": int(compile_data[0]) if compile_data else 0,
                "compile_time_s": float(compile_data[1]) / 1e9 if compile_data else 0.0,
                "executions": int(exec_data[0]) if exec_data else 0,
                "execute_time_s": float(exec_data[1]) / 1e9 if exec_data else 0.0,
                "graph_breaks": 0}

    def compile_phases(self) -> CompilePhases:
        """XLA's own compile (its ``CompileTime`` metric); its lazy tracing is spread over the steps, not timed apart."""
        import torch_xla.debug.metrics as met

        data = met.metric_data("CompileTime")
        return CompilePhases(compile_backend_s=float(data[1]) / 1e9 if data else 0.0)

    def diagnostics(self) -> dict:
        return self.diag.collect()

    def report(self) -> str:
        import torch_xla.debug.metrics as met

        return met.metrics_report()
