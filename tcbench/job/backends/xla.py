"""PyTorch/XLA: lazy tensors traced per step and compiled by XLA at ``torch_xla.sync()``.

Runs on the PJRT device that exists (CPU here with ``PJRT_DEVICE=CPU``; TPU/GPU where their
plugin is installed). The device is created in ``setup``, before any autograd runs in the process
(after a CPU backward, creating it crashes the autograd engine). The optimizer is the syncfree
AdamW (no host sync for inf checks); batches arrive through ``MpDeviceLoader``.

Data parallel (nproc > 1, TPU or CUDA PJRT devices only): torchrun starts one process per device, the process
group is torch_xla's (``xla://``), each process reads its own shard with the same seed, and
``xm.optimizer_step`` all-reduces the gradients before the update. The all-reduce is part of the compiled
step graph, so its time is not measured apart (bytes: 4 per parameter in fp32). On the CPU device such a job
is ``unavailable`` (``XlaBackend.parallel_unavailable``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

from tcbench.core.results import CompilePhases
from tcbench.core.spec import JobSpec, SpecError
from tcbench.job.factory import loss_of
from tcbench.job.backends.base import BackendUnavailable
from tcbench.job.diagnostics import XlaCollector
from tcbench.host.requirements import backend_status

XLA_CPU_COLLECTIVES = ("pytorch/xla#5005", "pytorch/xla#9089", "pytorch/xla#9496")


class XlaBackend:
    name = "xla"
    runtime_threads = True
    forkable = True        # from a launcher that imported torch_xla but created no PJRT client (job.zygote)
    shares_artifacts = False
    torch_xla = True
    inductor_settings = False

    # -- parent side (base.Backend) -----------------------------------------------------------------------------
    @classmethod
    def job_env(cls, spec: JobSpec, env: dict[str, str]) -> None:
        env.setdefault("PJRT_DEVICE", "CPU")
        env["USE_TORCH_XLA"] = "1"

    @classmethod
    def script_env(cls, cache: Path) -> dict[str, str]:
        # torch_xla's persistent compilation cache, set before the script creates a device
        return dict(XLA_PERSISTENT_CACHE_PATH=str(cache / "xla"), XLA_PERSISTENT_CACHE_READ_ONLY="0")

    @classmethod
    def compile_cache(cls, cache: Path) -> Path | None:
        """torch_xla's persistent cache, where the PJRT device can load what it holds: the CPU client cannot
        ("Failed to deserialize executable: UNIMPLEMENTED" in every job's log, and a full compile each time), so on the
        CPU no cache is kept and every XLA job's compile is cold."""
        return cache / "xla" if loads_executables() else None

    @classmethod
    def parallel_unavailable(cls, spec: JobSpec) -> str:
        """XLA's collectives on the PJRT CPU device. On TPU and CUDA PJRT devices an XLA job runs under torchrun
        like the others, its process group the ``xla://`` one and its gradients all-reduced by
        ``xm.optimizer_step`` before the update."""
        device = os.environ.get("PJRT_DEVICE", "CPU").upper()
        if spec.world_size == 1 or device not in ("CPU", ""):   # TPU / CUDA: torchrun + the "xla" process group
            return ""
        return (f"XLA data parallel (nproc={spec.nproc}) cannot run on the PJRT CPU device: torch_xla runs its CPU "
                f"devices as threads of one process and their collectives abort or hang "
                f"({', '.join(XLA_CPU_COLLECTIVES)}; xmp.spawn(nprocs=2) raises ValueError). Run it where "
                "PJRT_DEVICE=TPU or CUDA, or use backend='eager' or 'inductor' with nproc > 1 here")

    @classmethod
    def preflight(cls, spec: JobSpec) -> None:
        """A data-parallel job on GPUs needs GPU_NUM_DEVICES to match its processes (the troubleshooting page's
        "Missing XLA configuration" when it does not)."""
        wanted = os.environ.get("GPU_NUM_DEVICES")
        if spec.nproc == 1 or wanted is None or wanted == str(spec.nproc):
            return
        raise SpecError("nproc", spec.nproc, f"{wanted} (GPU_NUM_DEVICES in the environment)",
                        f"nproc={spec.nproc} but GPU_NUM_DEVICES={wanted}: torch_xla would fail with \"Missing XLA "
                        f"configuration\"; set GPU_NUM_DEVICES={spec.nproc} (the devices per machine) "
                        f"or nproc={wanted}")

    # -- script side (base.Backend) -----------------------------------------------------------------------------
    @classmethod
    def collector(cls) -> Any:
        return XlaCollector(cls.name)

    @classmethod
    def script_device(cls, spec: JobSpec | None) -> Any:
        os.environ.setdefault("PJRT_DEVICE", "CPU")
        import torch_xla

        return torch_xla.device()

    @classmethod
    def compile_script(cls, model: Any, optimizer: Any, spec: JobSpec, device: Callable[[], Any]) -> None:
        """The model moved to the XLA device and the optimizer re-pointed at the moved parameters."""
        move_model(model, optimizer, device())

    @classmethod
    def cut_graph(cls) -> None:
        import torch_xla

        torch_xla.sync()     # cut the lazy graph: the step's work is compiled (first time) and launched

    @classmethod
    def trainer_args(cls, args: Any, spec: JobSpec) -> dict[str, Any]:
        check_trainer_device(args)
        return {"optim": "adamw_torch"} if "fused" in str(getattr(args.optim, "value", args.optim)) else {}

    @classmethod
    def trainer_configured(cls, args: Any) -> bool:
        check_trainer_device(args)
        return True

    # -- the job process ----------------------------------------------------------------------------------------
    def available(self) -> tuple[bool, str]:
        return backend_status(self.name)   # missing, or a major.minor other than torch's: unavailable, with why

    def setup(self, spec: JobSpec, cache_dir: str) -> Any:
        import torch_xla
        import torch_xla.runtime as xr

        if loads_executables():
            os.makedirs(cache_dir, exist_ok=True)
            xr.initialize_cache(cache_dir, readonly=False)   # persistent compilation cache
        self.spec = spec
        if spec.precision != "fp32" and xr.device_type() not in ("TPU", "CUDA", "GPU"):
            raise BackendUnavailable(
                f"precision={spec.precision!r} needs XLA autocast, which torch_xla supports on TPU and CUDA only; "
                f"this PJRT device is {xr.device_type()} (use precision='fp32' with the xla backend here)")
        self.device = torch_xla.device()
        self.diag = self.collector()   # compiles, executions and transfers from here on
        return self.device

    def join_process_group(self, dist_name: str) -> None:
        import torch.distributed as dist
        import torch_xla.distributed.xla_backend  # noqa: F401 - registers the "xla" backend and xla://

        dist.init_process_group(dist_name, init_method="xla://")   # configured by torchrun's environment

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
        """XLA's own compile (its ``CompileTime`` metric); its lazy tracing is spread over the steps, not timed
        apart."""
        import torch_xla.debug.metrics as met

        data = met.metric_data("CompileTime")
        return CompilePhases(compile_backend_s=float(data[1]) / 1e9 if data else 0.0)

    def diagnostics(self) -> dict:
        return self.diag.collect()

    def report(self) -> str:
        import torch_xla.debug.metrics as met

        return met.metrics_report()


def loads_executables() -> bool:
    """Whether this PJRT device (``PJRT_DEVICE``, CPU by default) loads a serialized executable back: TPU and CUDA
    do; torch_xla 2.9's CPU client does not."""
    return os.environ.get("PJRT_DEVICE", "CPU").upper() not in ("CPU", "")


def check_trainer_device(args: Any) -> None:
    """A Trainer on another device than XLA's would label an eager run as xla."""
    if args.device.type != "xla":
        raise RuntimeError(f"TCBENCH_BACKEND=xla, but the Trainer's device is {args.device}: transformers "
                           "was imported with USE_TORCH_XLA=0 (import tcbench.hf before transformers, or set "
                           "USE_TORCH_XLA=1 and PJRT_DEVICE)")


def move_model(model: Any, optimizer: Any, dev: Any) -> None:
    """Move the model to ``dev`` keeping shared (tied) parameters shared, and re-point the optimizer at it.

    Moving to XLA, ``Module.to`` gives every module a new parameter of its own, so a tied pair (GPT-2's
    ``lm_head`` and ``wte``) would be trained as two; HF's Trainer re-ties after the move for the same reason.
    """
    places: dict[int, list[tuple[Any, str]]] = {}   # id(parameter) -> the (module, name)s holding it
    for module in model.modules():
        for name, p in module._parameters.items():
            if p is not None:
                places.setdefault(id(p), []).append((module, name))
    model.to(dev)
    moved = {}
    for key, holders in places.items():
        first = holders[0][0]._parameters[holders[0][1]]
        for module, name in holders[1:]:
            module._parameters[name] = first
        moved[key] = first
    if optimizer is None:
        return
    for group in optimizer.param_groups:
        group["params"] = [moved.get(id(p), p) for p in group["params"]]
        if group.get("fused"):   # fused kernels exist for CPU/CUDA only
            group["fused"], group["foreach"] = False, None
    if optimizer.defaults.get("fused"):
        optimizer.defaults["fused"] = False
    state = {moved.get(id(p), p): {k: v.to(dev) if hasattr(v, "to") else v for k, v in s.items()}
             for p, s in optimizer.state.items()}
    optimizer.state.clear()
    optimizer.state.update(state)
