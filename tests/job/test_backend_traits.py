"""The backends' contract (``tcbench.job.backends.base.Backend``): every REGISTRY backend has each trait, the parent
side answers without importing torch, and each answer is what the runner decided from the backend's name before
the decisions moved into the backends (the ``_by_name`` oracles below are that code, kept here)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tcbench import JobSpec
from tcbench.core.spec import SpecError
from tcbench.job.backends import REGISTRY, Backend, backend_class, get_backend

ROOT = Path(__file__).resolve().parents[2]
NAMES = sorted(REGISTRY)
FLAGS = ("runtime_threads", "forkable", "shares_artifacts", "torch_xla", "inductor_settings")
PARENT_SIDE = ("job_env", "script_env", "compile_cache", "parallel_unavailable", "preflight")
SCRIPT_SIDE = ("collector", "script_device", "compile_script", "cut_graph", "trainer_args",
               "trainer_configured")


# -- the decisions as the runner made them from the name ----------------------------------------------------------
def _job_env_by_name(spec: JobSpec, env: dict) -> None:
    if spec.backend == "xla":
        env.setdefault("PJRT_DEVICE", "CPU")
        env["USE_TORCH_XLA"] = "1"
    else:
        env["USE_TORCH_XLA"] = "0"
    if spec.debug and spec.backend == "inductor":
        env.setdefault("TORCH_LOGS", "recompiles,graph_breaks")


def _script_env_by_name(spec: JobSpec, cache: Path) -> dict:
    return dict(XLA_PERSISTENT_CACHE_PATH=str(cache / "xla"), XLA_PERSISTENT_CACHE_READ_ONLY="0") \
        if spec.backend == "xla" else {}


def _parallel_unavailable_by_name(spec: JobSpec) -> str:
    device = os.environ.get("PJRT_DEVICE", "CPU").upper()
    if spec.world_size == 1 or spec.backend != "xla" or device not in ("CPU", ""):
        return ""
    return (f"XLA data parallel (nproc={spec.nproc}) cannot run on the PJRT CPU device: torch_xla runs its CPU devices "
            f"as threads of one process and their collectives abort or hang (pytorch/xla#5005, pytorch/xla#9089, "
            "pytorch/xla#9496; xmp.spawn(nprocs=2) raises ValueError). Run it where PJRT_DEVICE=TPU or CUDA, or use "
            "backend='eager' or 'inductor' with nproc > 1 here")


# -- the contract ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_every_backend_has_the_protocols_traits_with_their_types(name):
    cls = backend_class(name)
    assert cls is REGISTRY[name] and cls.name == name and isinstance(get_backend(name), cls)
    declared = {k for k in vars(Backend) if not k.startswith("_")} | set(Backend.__annotations__)
    assert declared >= {*FLAGS, *PARENT_SIDE, *SCRIPT_SIDE, "join_process_group"}
    assert not [k for k in declared if not hasattr(cls, k)], f"{name} lacks part of base.Backend"
    assert all(type(getattr(cls, flag)) is bool for flag in FLAGS)


def test_an_unknown_backend_names_the_allowed_ones():
    with pytest.raises(ValueError, match="backend='tpu' is not allowed; allowed: eager, inductor, xla"):
        backend_class("tpu")


def test_every_backends_jobs_are_forked_and_only_inductor_shares_artifacts():
    assert {n for n in NAMES if backend_class(n).forkable} == {"eager", "inductor", "xla"}
    assert {n for n in NAMES if backend_class(n).shares_artifacts} == {"inductor"}
    assert {n for n in NAMES if backend_class(n).torch_xla} == {"xla"}


def test_only_inductor_jobs_read_the_inductor_settings():
    assert {n for n in NAMES if backend_class(n).inductor_settings} == {"inductor"}


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("debug", [False, True])
@pytest.mark.parametrize("preset", [{}, {"PJRT_DEVICE": "TPU", "TORCH_LOGS": "+dynamo", "USE_TORCH_XLA": "x"}])
def test_the_job_environment_is_as_before(name, debug, preset):
    spec = JobSpec(backend=name, debug=debug)
    env, expected = dict(preset), dict(preset)
    assert backend_class(name).job_env(spec, env) is None
    _job_env_by_name(spec, expected)
    assert env == expected


@pytest.mark.parametrize("device", [None, "CPU", "TPU", "CUDA"])
@pytest.mark.parametrize("name", NAMES)
def test_a_scripts_environment_and_the_compile_cache_are_as_before(name, device, tmp_path, monkeypatch):
    """XLA keeps no persistent cache on the PJRT CPU device, whose client cannot load a serialized executable."""
    _set_env(monkeypatch, "PJRT_DEVICE", device)
    cls = backend_class(name)
    spec = JobSpec(backend=name)
    env = cls.script_env(tmp_path)
    assert env == _script_env_by_name(spec, tmp_path) and all(isinstance(v, str) for v in env.values())
    cache = cls.compile_cache(tmp_path)
    if name != "xla":
        assert cache == tmp_path / "inductor"
    else:
        assert cache == (None if device in (None, "CPU") else tmp_path / "xla")


def _set_env(monkeypatch, name: str, value: str | None) -> None:
    """The variable set to ``value``, or absent for None."""
    if value is None:
        monkeypatch.delenv(name, raising=False)
    else:
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("nproc", [1, 2])
@pytest.mark.parametrize("device", [None, "CPU", "cpu", "", "TPU", "CUDA"])
def test_data_parallel_refusal_is_as_before(name, nproc, device, monkeypatch):
    _set_env(monkeypatch, "PJRT_DEVICE", device)
    spec = JobSpec(backend=name, nproc=nproc, threads=1)
    why = backend_class(name).parallel_unavailable(spec)
    assert isinstance(why, str) and why == _parallel_unavailable_by_name(spec)
    assert bool(why) == (name == "xla" and nproc == 2 and device in (None, "CPU", "cpu", ""))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("nproc, devices", [(1, None), (1, "4"), (2, None), (2, "2"), (2, "4")])
def test_preflight_refuses_only_xla_with_another_gpu_count(name, nproc, devices, monkeypatch):
    _set_env(monkeypatch, "GPU_NUM_DEVICES", devices)
    spec = JobSpec(backend=name, nproc=nproc, threads=1)
    if name == "xla" and nproc == 2 and devices == "4":
        with pytest.raises(SpecError, match="nproc=2 but GPU_NUM_DEVICES=4: torch_xla would fail"):
            backend_class(name).preflight(spec)
    else:
        assert backend_class(name).preflight(spec) is None


def test_the_parent_side_never_imports_torch(tmp_path):
    code = ("import os, sys, pathlib\n"
            "import tcbench.job.backends as b, tcbench.runner.process\n"
            "from tcbench import JobSpec\n"
            "for name, cls in b.REGISTRY.items():\n"
            "    spec = JobSpec(backend=name, nproc=2, threads=1, debug=True)\n"
            "    cls.job_env(spec, {}); cls.script_env(pathlib.Path('c')); cls.compile_cache(pathlib.Path('c'))\n"
            "    cls.parallel_unavailable(spec); cls.preflight(spec)\n"
            "    [getattr(cls, f) for f in ('forkable', 'shares_artifacts', 'torch_xla', 'runtime_threads')]\n"
            "print(sorted(m for m in ('torch', 'torch_xla', 'transformers') if m in sys.modules))")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("GPU_NUM_DEVICES", None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env,
                         cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_cuda_graph_modes_mark_each_step_begin_on_cuda_only():
    """On an H200, gpt2 under reduce-overhead failed ("accessing tensor output of CUDAGraphs that has been
    overwritten by a subsequent run"): each step of a CUDA-graph mode now begins with
    ``torch.compiler.cudagraph_mark_step_begin()``."""
    import contextlib

    from tcbench.job.backends.inductor import InductorBackend, uses_cuda_graphs

    assert uses_cuda_graphs("reduce-overhead", "cuda") and uses_cuda_graphs("max-autotune", "cuda")
    assert not uses_cuda_graphs("max-autotune-no-cudagraphs", "cuda") and not uses_cuda_graphs("default", "cuda")
    assert not uses_cuda_graphs("reduce-overhead", "cpu")
    calls = []
    backend = InductorBackend.__new__(InductorBackend)
    backend.isa_checked, backend.whole_step = True, lambda batch: calls.append("step") or "loss"
    backend.diag = type("Diag", (), {"step": lambda self, batch: contextlib.nullcontext()})()
    backend.mark_step = lambda: calls.append("mark")
    assert backend.step({}) == "loss" and calls == ["mark", "step"]
    backend.mark_step = None
    assert backend.step({}) == "loss" and calls == ["mark", "step", "step"]
