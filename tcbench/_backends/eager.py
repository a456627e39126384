"""Native PyTorch: the baseline every compiled backend is compared with."""

from __future__ import annotations

import importlib.util
from typing import Any

from .._spec import JobSpec
from .._factory import loss_of
from ._base import adamw, autocast_ctx, local_device


class EagerBackend:
    name = "eager"

    def available(self) -> tuple[bool, str]:
        from .._requirements import backend_status

        return backend_status(self.name)   # package metadata only: torch is not imported

    def setup(self, spec: JobSpec, cache_dir: str) -> Any:
        self.device = local_device(spec)
        self.spec = spec
        return self.device

    def prepare(self, model: Any, spec: JobSpec) -> None:
        import torch

        self.model = model.to(self.device).train()
        self.opt = adamw(self.model.parameters(), spec, self.device.type, fused=True)
        self.scaler = torch.amp.GradScaler(self.device.type) if spec.precision == "fp16" else None
        self.forward, self.opt_step = self.model, self.opt.step   # the compiled backend swaps these

    def step(self, batch: dict) -> Any:
        with autocast_ctx(self.device.type, self.spec.precision):
            loss = loss_of(self.forward(**batch))
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.opt)
            self.scaler.update()
        else:
            loss.backward()
            self.opt_step()
        self.opt.zero_grad(set_to_none=True)
        return loss.detach()

    def sync(self) -> None:
        if self.device.type == "cuda":
            import torch

            torch.cuda.synchronize()

    def peak_memory(self) -> int | None:
        if self.device.type == "cuda":
            import torch

            return int(torch.cuda.max_memory_allocated())
        return None

    def counters(self) -> dict:
        return {}

    def diagnostics(self) -> dict:
        return {}

    def report(self) -> str:
        return "eager: no compiler report"
