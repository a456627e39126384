"""torch.compile with the Inductor compiler: the model (forward + backward) and the optimizer step.

Compiling ``optimizer.step`` separately is worth a lot on CPU (DESIGN.md: 301 -> 229 ms on a small
BERT); the backward runs the AOT-compiled graph dynamo captured with the forward.
"""

from __future__ import annotations

import importlib.util
import shutil
from typing import Any

from .._spec import JobSpec
from ._base import autocast_ctx, local_device


class InductorBackend:
    name = "inductor"

    def available(self) -> tuple[bool, str]:
        if importlib.util.find_spec("torch") is None:
            return False, "torch is not installed"
        if not (shutil.which("cc") or shutil.which("gcc") or shutil.which("g++")):
            return False, "Inductor on CPU needs a C++ compiler (gcc/g++) on PATH"
        return True, "torch.compile (Inductor)"

    def setup(self, spec: JobSpec, cache_dir: str) -> Any:
        self.device = local_device(spec)
        self.spec = spec
        return self.device

    def prepare(self, model: Any, spec: JobSpec) -> None:
        import torch

        self.model = model.to(self.device).train()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=spec.lr, foreach=True)
        self.scaler = torch.amp.GradScaler(self.device.type) if spec.precision == "fp16" else None
        mode = None if spec.compile_mode == "default" else spec.compile_mode
        self.cmodel = torch.compile(self.model, mode=mode)
        self.copt_step = torch.compile(self.opt.step, mode=mode)

    def step(self, batch: dict) -> Any:
        with autocast_ctx(self.device.type, self.spec.precision):
            loss = self.cmodel(**batch).loss
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.opt)
            self.scaler.update()
        else:
            loss.backward()
            self.copt_step()
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
        from torch._dynamo.utils import counters

        stats = counters["stats"]
        return {"compiles": int(stats.get("unique_graphs", 0)),
                "graph_breaks": int(sum(counters["graph_break"].values())),
                "frames_captured": int(stats.get("calls_captured", 0))}

    def report(self) -> str:
        from torch._dynamo.utils import compile_times, counters

        lines = ["dynamo counters:"]
        for group, values in counters.items():
            if values:
                lines.append(f"  {group}: {dict(values)}")
        lines.append("compile times:\n" + str(compile_times(repr="str", aggregate=True)))
        return "\n".join(lines)
