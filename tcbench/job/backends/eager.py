"""Native PyTorch: the baseline every compiled backend is compared with."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

from tcbench.core.spec import JobSpec
from tcbench.job.factory import batch_size_of, loss_of
from tcbench.job.backends.base import TrainerMismatch, adamw, autocast_ctx, data_parallel, local_device
from tcbench.host.requirements import backend_status


class EagerBackend:
    name = "eager"
    runtime_threads = False
    forkable = True
    shares_artifacts = False
    torch_xla = False
    inductor_settings = False

    # -- parent side (base.Backend) -----------------------------------------------------------------------------
    @classmethod
    def job_env(cls, spec: JobSpec, env: dict[str, str]) -> None:
        env["USE_TORCH_XLA"] = "0"   # else transformers believes it runs on XLA when torch_xla is installed

    @classmethod
    def script_env(cls, cache: Path) -> dict[str, str]:
        return {}

    @classmethod
    def compile_cache(cls, cache: Path) -> Path:
        return cache / "inductor"   # nothing compiled: the folder its compiled twin writes to, counted alike

    @classmethod
    def parallel_unavailable(cls, spec: JobSpec) -> str:
        return ""

    @classmethod
    def preflight(cls, spec: JobSpec) -> None:
        return None

    # -- script side (base.Backend) -----------------------------------------------------------------------------
    @classmethod
    def collector(cls) -> Any:
        return None   # no compiler: nothing to diagnose

    @classmethod
    def script_device(cls, spec: JobSpec | None) -> Any:
        return local_device(spec)

    @classmethod
    def compile_script(cls, model: Any, optimizer: Any, spec: JobSpec, device: Callable[[], Any]) -> None:
        return None   # the baseline runs as written

    @classmethod
    def cut_graph(cls) -> None:
        return None

    @classmethod
    def trainer_args(cls, args: Any, spec: JobSpec) -> dict[str, Any]:
        return dict(torch_compile=False, torch_compile_backend=None, torch_compile_mode=None) if args.torch_compile \
            else {}

    @classmethod
    def trainer_configured(cls, args: Any) -> bool:
        if args.torch_compile:
            raise TrainerMismatch("the eager baseline would be compiled (torch_compile=True): pass the "
                                  "TrainingArguments through tcbench.hf.training_args(args), which switches the "
                                  "compiler per job")
        return False

    # -- the job process ----------------------------------------------------------------------------------------
    def join_process_group(self, dist_name: str) -> None:
        import torch.distributed as dist

        dist.init_process_group(dist_name)

    def available(self) -> tuple[bool, str]:
        return backend_status(self.name)   # package metadata only: torch is not imported

    def setup(self, spec: JobSpec, cache_dir: str) -> Any:
        self.device = local_device(spec)
        self.spec = spec
        return self.device

    def prepare(self, model: Any, spec: JobSpec) -> None:
        import torch

        self.model, self.comm = data_parallel(model.to(self.device).train(), self.device, spec.precision)
        self.opt = adamw(self.model.parameters(), spec, self.device.type, fused=True)
        self.scaler = torch.amp.GradScaler(self.device.type) if spec.precision == "fp16" else None
        self.forward, self.opt_step = self.model, self.opt.step   # the compiled backend swaps these
        self.noise: list[dict] = []   # the noise-scale measurement's per-step samples (noise_micro_batches)

    def step(self, batch: dict) -> Any:
        if self.spec.noise_micro_batches:
            return self._noise_step(batch, self.spec.noise_micro_batches)
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

    def _noise_step(self, batch: dict, k: int) -> Any:
        """One optimizer step on the mean of k micro-batch gradients (the same update as the whole batch), keeping
        |G_b|² (the micro-batches' mean squared norm) and |G_B|² (the mean gradient's) for the noise scale.

        Mixed precision runs its forward under autocast as the job's steps do; the gradients are those of the fp32
        parameters (fp16's loss scaled and the gradients unscaled, a step with an overflow skipped and not kept, as
        GradScaler skips it)."""
        import torch

        params = [p for p in self.model.parameters() if p.requires_grad]
        n = batch_size_of(batch)
        parts = [{key: v.chunk(k)[i] if getattr(v, "ndim", 0) and v.shape[0] == n else v for key, v in batch.items()}
                 for i in range(k)]
        total, small, losses = None, 0.0, []
        for part in parts:
            with autocast_ctx(self.device.type, self.spec.precision):
                loss = loss_of(self.forward(**part))
            scaled = loss if self.scaler is None else self.scaler.scale(loss)
            grads = [torch.zeros_like(p) if g is None else g.float()
                     for p, g in zip(params, torch.autograd.grad(scaled, params, allow_unused=True))]
            if self.scaler is not None:
                torch._foreach_div_(grads, float(self.scaler.get_scale()))
            small += float(torch.stack(torch._foreach_norm(grads)).double().pow(2).sum())
            if total is None:
                total = grads
            else:
                torch._foreach_add_(total, grads)
            losses.append(loss.detach())
        torch._foreach_div_(total, float(k))
        big = float(torch.stack(torch._foreach_norm(total)).double().pow(2).sum())
        self.noise.append({"small_sq": small / k, "big_sq": big})   # a non-finite step is left out of the estimate
        if self.scaler is not None and not (math.isfinite(small) and math.isfinite(big)):   # fp16 overflowed
            self.scaler.update(self.scaler.get_scale() * self.scaler.get_backoff_factor())
            return torch.stack(losses).mean()
        for p, g in zip(params, total):
            p.grad = g.to(p.dtype)
        self.opt_step()
        self.opt.zero_grad(set_to_none=True)
        return torch.stack(losses).mean()

    def noise_samples(self) -> list[dict]:
        """Per step (in order): |G_b|² and |G_B|² of the noise-scale measurement ([] when it is off)."""
        return list(getattr(self, "noise", []))

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

    def compile_phases(self) -> None:
        return None   # nothing compiled

    def diagnostics(self) -> dict:
        return {}

    def report(self) -> str:
        return "eager: no compiler report"
