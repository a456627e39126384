"""torch.compile with the Inductor compiler: the model (forward + backward) and the optimizer step.

Compiling ``optimizer.step`` separately is worth a lot on CPU (DESIGN.md: 301 -> 229 ms on a small
BERT); the backward runs the AOT-compiled graph dynamo captured with the forward. Everything else
(device, sync, memory, the fp16 scaler path) is the eager backend's.
"""

from __future__ import annotations

import importlib.util
import shutil
from typing import Any

from tcbench.core.spec import JobSpec
from tcbench.job.backends.base import data_parallel
from tcbench.job.backends.eager import EagerBackend


class InductorBackend(EagerBackend):
    name = "inductor"
    runtime_threads = False

    def available(self) -> tuple[bool, str]:
        from tcbench.host.requirements import backend_status

        return backend_status(self.name)   # torch's metadata and the C++ compiler Inductor calls ($CXX or g++)

    def setup(self, spec: JobSpec, cache_dir: str) -> Any:
        from tcbench.job.diagnostics import setup as diagnose

        device = super().setup(spec, cache_dir)
        self.diag = diagnose("inductor")   # before anything is compiled: graph breaks and recompiles from here on
        return device

    def prepare(self, model: Any, spec: JobSpec) -> None:
        import torch

        self.model, self.comm = data_parallel(model.to(self.device).train(), self.device, spec.precision)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=spec.lr, foreach=True)
        self.scaler = torch.amp.GradScaler(self.device.type) if spec.precision == "fp16" else None
        mode = None if spec.compile_mode == "default" else spec.compile_mode
        self.forward = torch.compile(self.model, mode=mode)
        self.opt_step = torch.compile(self.opt.step, mode=mode)

    def step(self, batch: dict) -> Any:
        with self.diag.step(batch):
            return super().step(batch)

    def diagnostics(self) -> dict:
        return self.diag.collect()

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
