"""torch.compile with the Inductor compiler: the model (forward + backward) and the optimizer step
(``compile_optimizer``), the whole model or its repeated block (``compile_scope``), Python or C++ around the
kernels (``cpp_wrapper``).

The optimizer stays eager by default, with torch's fused AdamW kernel (what HF ``Trainer`` runs): compiling
``optimizer.step`` was worth a lot against the eager foreach/for-loop AdamW (DESIGN.md: 301 -> 229 ms on a small
BERT), but against the fused kernel it gains nothing on a CPU (lock-step, 2026-11-29: the fused step 1.019x and
1.017x the compiled one on tiny GPT-2 at 1 thread, 1.030x and 0.993x on small BERT at 2 threads) and costs 2-5 s of
every warm compile (benchmarks/vs_trainer.md); ``compile_optimizer=True`` compiles it. The backward runs the
AOT-compiled graph dynamo captured with the forward. Everything else (device, sync, memory, the fp16 scaler path) is
the eager backend's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from typing import Any, Callable

from tcbench.core.results import CompilePhases
from tcbench.core.spec import JobSpec
from tcbench.job import artifacts, precompiled
from tcbench.job.backends.base import adamw, data_parallel
from tcbench.job.backends.eager import EagerBackend
from tcbench.job.diagnostics import DynamoCollector
from tcbench.host.requirements import backend_status


class InductorBackend(EagerBackend):
    name = "inductor"
    runtime_threads = False
    shares_artifacts = True
    inductor_settings = True

    # -- parent side (base.Backend) -----------------------------------------------------------------------------
    @classmethod
    def job_env(cls, spec: JobSpec, env: dict[str, str]) -> None:
        super().job_env(spec, env)
        if spec.debug:   # dynamo's own account of each recompile and graph break, in the job's log
            env.setdefault("TORCH_LOGS", "recompiles,graph_breaks")

    # -- script side (base.Backend) -----------------------------------------------------------------------------
    @classmethod
    def collector(cls) -> Any:
        return DynamoCollector(cls.name)

    @classmethod
    def compile_script(cls, model: Any, optimizer: Any, spec: JobSpec, device: Callable[[], Any]) -> None:
        """``model.compile()`` (forward and backward; ``state_dict`` keys unchanged) and ``optimizer.step`` compiled:
        a script's optimizer is its own, often torch's unfused default, which compiling speeds up (tcbench's own jobs
        build theirs fused and leave it eager unless ``compile_optimizer``)."""
        mode = None if spec.compile_mode == "default" else spec.compile_mode
        model.compile(mode=mode)
        if optimizer is not None:
            compile_optimizer_step(optimizer, mode)

    @classmethod
    def trainer_args(cls, args: Any, spec: JobSpec) -> dict[str, Any]:
        return dict(torch_compile=True, torch_compile_backend="inductor",
                    torch_compile_mode=None if spec.compile_mode == "default" else spec.compile_mode)

    @classmethod
    def trainer_configured(cls, args: Any) -> bool:
        return bool(args.torch_compile)   # the script compiles itself: torch_compile=True

    # -- the job process ----------------------------------------------------------------------------------------
    def available(self) -> tuple[bool, str]:
        return backend_status(self.name)   # torch's metadata and the C++ compiler Inductor calls ($CXX or g++)

    def setup(self, spec: JobSpec, cache_dir: str) -> Any:
        device = super().setup(spec, cache_dir)
        self.spec, self.artifacts = spec, os.environ.get(artifacts.ENV)
        self.artifact_fields, self.artifact_state = None, None
        self.isa_checked = device.type != "cpu"
        self.diag = self.collector()   # before anything is compiled: graph breaks and recompiles from here on
        print(f"tcbench: Dynamo's trace-log function names {trace_log_names_on_demand()}", flush=True)
        return device

    def prepare(self, model: Any, spec: JobSpec) -> None:
        import torch

        self.model, self.comm = data_parallel(model.to(self.device).train(), self.device, spec.precision)
        # compiled: foreach AdamW, which Inductor fuses into its own kernels; eager: the fused kernel
        self.opt = adamw(self.model.parameters(), spec, self.device.type, fused=not spec.compile_optimizer)
        self.scaler = torch.amp.GradScaler(self.device.type) if spec.precision == "fp16" else None
        why_traced = precompiled.unavailable(spec)   # "": the loss is loaded precompiled (torch >= 2.14)
        if self.artifacts:
            # the key lists the CPU's vector ISAs: Inductor's own check of them builds and loads a program per ISA
            # (6.4 s of a forked gpt2-tiny job's 9.4 s before its first step here); answered from the record first
            self._check_isa()
            self.artifact_fields = artifacts.key_fields(spec, self.device)
            if not why_traced:   # its artifacts carry the program, never those of a traced job (debug=True) of its spec
                self.artifact_fields["loss"] = "precompiled"
            if spec.cache == "artifacts":   # before anything is compiled: Inductor then finds what they hold
                self.artifact_state = artifacts.load(self.artifacts, self.artifact_fields, programs_folder())
                print(f"tcbench: compile artifacts {self.artifact_state}", flush=True)
        mode = None if spec.compile_mode == "default" else spec.compile_mode
        # CUDA graphs replay into the same output buffers: each step must say that a new one begins, or the previous
        # step's outputs still in use (seen on an H200: gpt2, reduce-overhead) are found overwritten
        self.mark_step = torch.compiler.cudagraph_mark_step_begin if uses_cuda_graphs(
            spec.compile_mode, self.device.type) else None
        if spec.cpp_wrapper:   # this job's process only: Inductor's config is per process
            import torch._inductor.config as inductor_config

            inductor_config.cpp_wrapper = True
        self.regions, self.whole_step, self.precompiled, self.loss_program = None, None, None, None
        if spec.compile_scope == "step":   # one compiled call per step: forward, loss, backward, optimizer step
            self.forward = self.model
            self.opt_step = self.opt.step if spec.compile_optimizer else torch.compiler.disable(self.opt.step)
            self.whole_step = torch.compile(super().step, mode=mode)
            self.regions = "the training step (forward, loss, backward" + (
                ", optimizer step)" if spec.compile_optimizer else "; the optimizer step eager)")
            print(f"tcbench: compiling {self.regions} (compile_scope='step')", flush=True)
            return
        if spec.compile_scope == "blocks":   # regional compilation: the repeated block, one graph for all of them
            name, blocks = repeated_blocks(self.model)
            for block in blocks:
                block.compile(mode=mode)
            self.forward = self.model
            self.regions = f"{name}: {len(blocks)} × {type(blocks[0]).__name__}"
            print(f"tcbench: compiling {self.regions} (compile_scope='blocks')", flush=True)
        else:
            self.forward = self._precompiled_or_jit(spec, mode, why_traced)
        self.opt_step = torch.compile(self.opt.step, mode=mode) if spec.compile_optimizer else self.opt.step

    def _precompiled_or_jit(self, spec: JobSpec, mode: str | None, why: str) -> Any:
        """The compiled model's forward: its loss loaded precompiled where this torch and spec allow (``why`` is "";
        ``tcbench.job.precompiled``), else ``torch.compile(model)``, which Dynamo traces in every process."""
        import torch

        def jit() -> Any:
            return torch.compile(self.model, mode=mode)

        if why:
            self.precompiled = f"not used: {why}"
            return jit()
        self._check_isa()   # the key lists the CPU's vector ISAs
        fields = self.artifact_fields or {**artifacts.key_fields(spec, self.device), "loss": "precompiled"}
        self.loss_program = precompiled.PrecompiledLoss(self.model, fields, programs_folder(), jit)
        return self.loss_program

    def _check_isa(self) -> None:
        if not self.isa_checked:
            self.isa_checked = True
            print(f"tcbench: Inductor's vector ISA check {vec_isa_checked_once()}", flush=True)

    def step(self, batch: dict) -> Any:
        self._check_isa()   # in the first step, as Inductor's own check, unless the artifacts' key asked before
        if self.mark_step is not None:
            self.mark_step()
        with self.diag.step(batch):
            return self.whole_step(batch) if self.whole_step is not None else super().step(batch)

    def diagnostics(self) -> dict:
        return self.diag.collect()

    def counters(self) -> dict:
        from torch._dynamo.utils import counters

        stats = counters["stats"]
        return {"compiles": int(stats.get("unique_graphs", 0)),
                "graph_breaks": int(sum(counters["graph_break"].values())),
                "frames_captured": int(stats.get("calls_captured", 0))}

    def compile_phases(self) -> CompilePhases:
        """The phases so far; after warmup (when it is read) a job that compiled something new, or whose key has
        no artifacts yet, keeps its compile artifacts under its key."""
        loss = self.loss_program
        phases = dataclasses.replace(compile_phases(), compiled_regions=self.regions,
                                     precompiled=loss.state if loss is not None else self.precompiled)
        if self.artifact_fields is None:
            return phases
        key = artifacts.key_of(self.artifact_fields)
        if self.spec.cache != "artifacts":
            stored = os.path.exists(os.path.join(self.artifacts, key + ".bin"))
            if not stored or phases.fx_cache_misses or phases.aot_cache_misses:
                program = self.loss_program.program() if self.loss_program is not None else None
                self.artifact_state = artifacts.save(self.artifacts, self.artifact_fields, program)
            else:
                self.artifact_state = f"kept {key} (stored before; nothing new compiled)"
        return dataclasses.replace(phases, artifact_key=key, artifact_state=self.artifact_state)

    def trace(self, folder: str) -> None:
        """debug=True: torch's structured compile trace (``TORCH_TRACE``) into ``folder``, what tlparse reads."""
        start_torch_trace(folder)

    def trace_report(self, folder: str, out: str) -> str:
        """debug=True, at the end: tlparse's HTML report of the trace in ``folder`` (when tlparse is installed)."""
        return tlparse_report(folder, out)

    def report(self) -> str:
        from torch._dynamo.utils import compile_times, counters

        lines = ["dynamo counters:"]
        for group, values in counters.items():
            if values:
                lines.append(f"  {group}: {dict(values)}")
        lines.append("compile times:\n" + str(compile_times(repr="str", aggregate=True)))
        return "\n".join(lines)


# the functions torch.compile times (torch._dynamo.utils.dynamo_timed; the same names in torch 2.9 and 2.14), summed
# over every graph:
FRAME = "_compile.compile_inner"               # Dynamo's compile of one frame, the backend's compile included
BACKEND = "OutputGraph.call_user_compiler"     # AOTAutograd with Inductor's compile of the forward inside
LAZY_BACKWARD = "backward._backward_impl"     # the backward graph, compiled at its first call
INDUCTOR = "compile_fx_inner"                  # Inductor's lowering, codegen and compile (or FX-cache load), per graph
CAPTURE = "fullgraph_capture"                  # torch >= 2.14's aot_compile (tcbench.job.precompiled): all of it
DISPATCH = "create_aot_dispatcher_function"    # ... of which AOTAutograd, with Inductor's compile inside


def compile_phases() -> CompilePhases:
    """This process's compile time so far in phases, from ``torch._dynamo.utils.compile_times`` (the seconds each
    timed function took, summed): Dynamo = frame − backend; AOTAutograd = backend + lazy backward − Inductor;
    Inductor = its compile of every graph (0 when every graph came from AOTAutograd's cache: Inductor never ran).
    Cache hits and misses from Dynamo's counters. The loss compiled by ``aot_compile`` (torch ≥ 2.14,
    ``tcbench.job.precompiled``) is timed as one capture: Dynamo = capture − AOTAutograd's dispatcher, AOTAutograd =
    that dispatcher − Inductor. No phase times when no frame was compiled (a precompiled loss loaded), or under a
    torch that names its timers otherwise."""
    from torch._dynamo.utils import compile_times, counters

    caches = dict(aot_cache_hits=int(counters["aot_autograd"].get("autograd_cache_hit", 0)),
                  aot_cache_misses=int(counters["aot_autograd"].get("autograd_cache_miss", 0)),
                  fx_cache_hits=int(counters["inductor"].get("fxgraph_cache_hit", 0)),
                  fx_cache_misses=int(counters["inductor"].get("fxgraph_cache_miss", 0)))
    names, values = compile_times(repr="csv", aggregate=True)
    took = {n: float(v) for n, v in zip(names, values)}
    if FRAME not in took and CAPTURE in took:   # the loss compiled by aot_compile: Dynamo = capture − AOTAutograd's
        capture, dispatch, inductor = (took.get(n, 0.0) for n in (CAPTURE, DISPATCH, INDUCTOR))
        return CompilePhases(compile_dynamo_s=max(capture - dispatch, 0.0), compile_aot_s=max(dispatch - inductor, 0.0),
                             compile_backend_s=inductor, **caches)
    if FRAME not in took:
        return CompilePhases(**caches)
    frame, backend, backward, inductor = (took.get(n, 0.0) for n in (FRAME, BACKEND, LAZY_BACKWARD, INDUCTOR))
    return CompilePhases(compile_dynamo_s=max(frame - backend, 0.0),
                         compile_aot_s=max(backend + backward - inductor, 0.0), compile_backend_s=inductor, **caches)


CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")   # the modes whose compiled code Inductor records as CUDA graphs


def uses_cuda_graphs(compile_mode: str, device_type: str) -> bool:
    """Whether Inductor runs ``compile_mode`` as CUDA graphs on a ``device_type`` device (only on CUDA)."""
    return device_type == "cuda" and compile_mode in CUDA_GRAPH_MODES


def compile_optimizer_step(optimizer: Any, mode: str | None) -> None:
    """A user's ``optimizer.step`` compiled in place; an LR scheduler made before or after still sees its steps."""
    import types

    import torch

    compiled = torch.compile(optimizer.step, mode=mode)

    def step(self: Any, *args: Any, **kwargs: Any) -> Any:
        return compiled(*args, **kwargs)

    if hasattr(optimizer.step, "_wrapped_by_lr_sched"):   # a scheduler made before: it still sees its step
        step._wrapped_by_lr_sched = True                  # type: ignore[attr-defined]
    optimizer.step = types.MethodType(step, optimizer)


def repeated_blocks(model: Any) -> tuple[str, list]:
    """The model's repeated block for regional compilation: its largest ``nn.ModuleList`` (by parameters) of at
    least two modules of one class (GPT-2's ``transformer.h``, BERT's ``encoder.layer``, a user model's layers);
    (its name, its blocks). A model without one is a ValueError naming ``compile_scope``."""
    import torch

    found = [(sum(p.numel() for p in lst.parameters()), name, list(lst)) for name, lst in model.named_modules()
             if isinstance(lst, torch.nn.ModuleList) and len(lst) >= 2 and len({type(m) for m in lst}) == 1]
    if not found:
        raise ValueError(f"compile_scope='blocks' is not allowed for {type(model).__name__}: it has no nn.ModuleList "
                         "of two or more blocks of one class; allowed: compile_scope='model'")
    _, name, blocks = max(found, key=lambda f: f[0])
    return name.removeprefix("module."), blocks   # a data-parallel job's model sits in DDP's .module


def start_torch_trace(folder: str) -> None:
    """torch's structured trace of every compile from here on, one log file in ``folder``. torch reads
    ``TORCH_TRACE`` when it sets up its logging (at import, which a forked job inherits from its launcher), so the
    logging is set up again (``torch._logging._internal``: no public call re-reads it)."""
    from torch._logging import _internal

    os.makedirs(folder, exist_ok=True)
    os.environ["TORCH_TRACE"] = folder
    _internal.LOG_TRACE_HANDLER = None
    _internal._init_logs()


def tlparse_report(folder: str, out: str) -> str:
    """tlparse's HTML report (``out/index.html``) of the newest trace log in ``folder``; what happened, in words."""
    import glob
    import subprocess
    import sys

    logs = sorted(glob.glob(os.path.join(folder, "*.log")), key=os.path.getmtime)
    if not logs:
        return f"no compile trace in {folder}"
    exe = shutil.which("tlparse") or shutil.which("tlparse", path=os.path.dirname(sys.executable))
    if exe is None:
        return f"compile trace in {logs[-1]} (pip install tlparse for its HTML report)"
    try:
        done = subprocess.run([exe, logs[-1], "-o", out, "--overwrite", "--no-browser"], capture_output=True,
                              text=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as exc:   # the job's own end must still go out
        return f"compile trace in {logs[-1]}; tlparse did not finish ({type(exc).__name__}: {exc})"
    if done.returncode != 0 or not os.path.exists(os.path.join(out, "index.html")):
        return f"compile trace in {logs[-1]}; tlparse failed: {(done.stderr or done.stdout).strip()[-300:]}"
    return f"compile trace report (tlparse): {os.path.join(out, 'index.html')}"


def vec_isa_checked_once() -> str:
    """Inductor checks in every new process that its C++ compiler can build and load code for each vector ISA the
    CPU has (AVX-512, its BF16 extension, AVX2, AMX): a compile and a new Python that imports torch per check,
    4.2 s of a warm job's 8.4 s of compile latency on gpt2 tiny here. The answers depend only on the compiler,
    the CPU's flags and torch, so the first job keeps them in the compile cache, keyed by those, and later jobs
    replay them: Inductor's own check runs with its build-and-load step answered from the record (the lists it
    caches are the ones it would have made). Inductor's config is not touched, so the FX graph cache key stays.
    Returns how it went, for the job's log: "replayed", "checked", "known" (Inductor had its answers before this
    job: nothing was asked) or why it was left to Inductor."""
    import platform

    import torch

    if platform.machine() not in ("x86_64", "AMD64"):
        return "left to Inductor (not x86)"
    try:   # private helpers of Inductor (torch 2.9 to 2.14): if they move, Inductor checks as it always did
        from torch._inductor import cpu_vec_isa as isa
        from torch._inductor.runtime.cache_dir_utils import cache_dir

        key = hashlib.sha256(json.dumps([isa._get_isa_dry_compile_fingerprint(""), sorted(isa.x86_isa_checker()),
                                         torch.__version__]).encode()).hexdigest()[:16]
        record = os.path.join(cache_dir(), f"vec-isa-{key}.json")
        try:
            with open(record) as f:
                answers = {k: v for k, v in json.load(f).items() if isinstance(v, bool)}
        except (OSError, ValueError, AttributeError):   # none yet, or unreadable: checked again and rewritten
            answers = {}
        # "known": nothing asked (Inductor's list was cached before this job: a launcher's import made it)
        real, how = isa.VecISA.check_build, "known"

        def check_build(self: Any, code: str) -> bool:
            nonlocal how
            which = hashlib.sha256(f"{type(self).__name__}|{self._arch_flags}|{code}".encode()).hexdigest()[:16]
            if which not in answers:
                how = "checked"
                answers[which] = bool(real(self, code))
            elif how == "known":
                how = "replayed"
            return answers[which]

        isa.VecISA.check_build = check_build
        try:
            found = [str(i) for i in isa.valid_vec_isa_list()]   # cached by Inductor for this process
        finally:
            isa.VecISA.check_build = real
    except (ImportError, AttributeError, OSError, ValueError, TypeError) as exc:
        return f"left to Inductor ({type(exc).__name__}: {exc})"
    if how == "checked":
        os.makedirs(os.path.dirname(record), exist_ok=True)
        tmp = f"{record}.{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(answers, f)
        os.replace(tmp, record)
    return f"{how}: {', '.join(found) or 'no vector ISA'}"


def programs_folder() -> str:
    """Where this job's precompiled losses are kept (``tcbench.job.precompiled``): beside Inductor's caches, so that
    a cold cache (``cache="cold"``) has none."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return os.path.join(cache_dir(), precompiled.FOLDER)


def trace_log_names_on_demand() -> str:
    """Dynamo (torch 2.9 on Python ≥ 3.11) names the function of every line it puts into a graph, for its
    ``trace_call`` debug log, and computes the name whether or not that log is on: the first time a source file is
    named, it tokenizes the whole file in Python (``torch._dynamo.funcname_cache``). For gpt2 tiny that is 15 files,
    transformers' ``modeling_utils.py`` among them, 0.8 s of every process's compile, warm or cold, against a warm
    compile of 3-4 s (2-core AMD EPYC). The name feeds nothing but the trace logs (``trace_call``, ``trace_source``),
    so this job asks for it only while one of them logs; the compiled program is the same. Returns how it went, for
    the job's log: "on demand", or why it was left as torch has it."""
    import logging

    try:   # private names of Dynamo (torch 2.9 to 2.14): if they move, Dynamo names every line as it always did
        from torch._dynamo import symbolic_convert as sc

        named, logs = sc.get_funcname, (sc.trace_call_log, sc.trace_source_log)
    except (ImportError, AttributeError) as exc:
        return f"left to Dynamo ({type(exc).__name__}: {exc})"
    if getattr(named, "on_demand", False):
        return "on demand"

    def get_funcname(filename: str, lineno: int) -> str | None:
        return named(filename, lineno) if any(log.isEnabledFor(logging.DEBUG) for log in logs) else None

    get_funcname.on_demand = True   # type: ignore[attr-defined]
    sc.get_funcname = get_funcname
    return "on demand"
