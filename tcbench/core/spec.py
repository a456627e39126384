"""JobSpec: the one frozen description of a training job that crosses every layer.

A pair is data, not code: the compiled job of a comparison is
``dataclasses.replace(native, backend="inductor")``, so the two differ in nothing else.
Validation checks values (types, ranges, names; a profile's name against the shipped catalog file, read again
only when it changed); it never touches the network or the environment. What needs the disk or the machine otherwise (a
dataset file, a local model folder, the cores this process may use) is checked by
``tcbench.runner.preflight.check`` before any process starts.
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import os
import re
from dataclasses import dataclass
from typing import Any

from tcbench.core.catalog import MODELS, SIZES, max_positions
from tcbench.core.profiles import LOCAL, catalog, close_matches

BACKENDS = ("eager", "inductor", "xla")
NATIVE = BACKENDS[0]   # the baseline every compiled job is compared with: native PyTorch
PRECISIONS = ("fp32", "bf16", "fp16")
PADDINGS = ("max_length", "longest", "bucket")
INDUCTOR_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
CACHE_MODES = ("shared", "cold", "artifacts")
COMPILE_SCOPES = ("model", "blocks", "step")


class SpecError(ValueError):
    """A JobSpec field with a value that is not allowed: ``.field``, ``.value`` and ``.allowed`` (in words)."""

    def __init__(self, field: str, value: Any, allowed: str, message: str | None = None) -> None:
        self.field, self.value, self.allowed = field, value, allowed
        super().__init__(message or f"{field}={value!r} is not allowed; allowed: {allowed}")


SEED_MAX = 2**32 - 1   # numpy's and torch's seeds are unsigned 32-bit
WEEK_S = 7 * 24 * 3600   # the longest any time limit may be (a job's stall_s and timeout_s, a comparison's budget_s)


def allowed_text(values: Any) -> str:
    return ", ".join(repr(v) for v in values)


def _bound(low: float | None, high: float | None, open_low: bool, open_high: bool, whole: bool) -> str:
    kind = "a whole number" if whole else "a finite number"
    if low is not None and high is not None:
        if whole and not (open_low or open_high):
            return f"{kind} in {low}..{high}"
        return f"{kind} with {low} {'<' if open_low else '<='} x {'<' if open_high else '<='} {high}"
    if low is not None:
        return f"{kind} {'>' if open_low else '>='} {low}"
    return kind


def check_number(field: str, value: Any, low: float | None = None, high: float | None = None, *,
                 whole: bool = False, open_low: bool = False, open_high: bool = False,
                 optional: bool = False) -> Any:
    """``value`` as a plain int (``whole``) or float, or a SpecError naming the field, the value and the range.

    Text ("60"), bools, NaN and infinities are refused; numpy scalars become Python numbers.
    ``optional``: None is allowed (and returned).
    """
    if value is None and optional:
        return None
    allowed = ("None or " if optional else "") + _bound(low, high, open_low, open_high, whole)
    kind = numbers.Integral if whole else numbers.Real
    if isinstance(value, bool) or not isinstance(value, kind):
        raise SpecError(field, value, allowed, f"{field}={value!r} is not allowed; it must be {allowed}, "
                                               f"not a {type(value).__name__}")
    number = int(value) if whole else float(value)
    if (not math.isfinite(number) or (low is not None and (number <= low if open_low else number < low))
            or (high is not None and (number >= high if open_high else number > high))):
        raise SpecError(field, value, allowed, f"{field}={value!r} is not allowed; it must be {allowed}")
    return value if type(value) in (int, float) else number


# what makes two jobs the same workload: a speedup between jobs that differ in any of these is not a compiler's
WORKLOAD_FIELDS = ("model", "size", "dataset", "seq_len", "script", "script_args")


def check_same_workload(field: str, label: str, reference: "JobSpec", other: "JobSpec") -> None:
    """A SpecError naming ``field`` and ``label`` when ``other`` trains another workload than ``reference`` (another
    model, size, data set, sequence length or script): its ratio against the reference would not measure a
    compiler, a batch or a setting but a different job."""
    for name in WORKLOAD_FIELDS:
        mine, theirs = getattr(reference, name), getattr(other, name)
        if mine != theirs:
            raise SpecError(field, label, f"the reference's workload ({name}={mine!r})",
                            f"{field}: {label!r} has {name}={theirs!r} where the reference has {mine!r}; allowed: the "
                            f"same model, size, data set, sequence length and script as the reference (a ratio "
                            f"between different jobs measures neither a compiler nor a setting)")


def check_profile(name: Any) -> str:
    """The catalog spelling of the instance profile ``name`` (``"g5.2xlarge"`` -> ``"ml.g5.2xlarge"``),
    or a SpecError with the nearest names. Reads the shipped catalog only (cached), never the host."""

    names = [LOCAL, *(p.name for p in catalog())]
    wanted = name.strip() if isinstance(name, str) else None
    for candidate in ((wanted, wanted.lower(), "ml." + wanted.lower()) if wanted else ()):
        if candidate in names:
            return candidate
    close = close_matches((wanted or "").lower(), names)
    hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
    allowed = f"{LOCAL!r} or an instance profile of tcbench.profiles() ({len(names)} profiles)"
    raise SpecError("profile", name, allowed, f"profile={name!r} is not a known instance profile; {hint}"
                                              f"allowed: {allowed}")


FACTORY = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")   # "package.module:function"
MODEL_ALLOWED = (f"{allowed_text(MODELS)}, a local folder path, or a factory 'package.module:function' returning a "
                 "torch.nn.Module")
DATASET_ALLOWED = ("'builtin', the path of a .csv/.jsonl file, or a batch factory 'package.module:function' "
                   "yielding dicts of tensors")


def is_factory(name: Any) -> bool:
    """True for an importable ``"package.module:function"`` (a model or a batch factory)."""
    return isinstance(name, str) and bool(FACTORY.match(name))


def is_local_folder(model: str) -> bool:
    return not is_factory(model) and (os.sep in model or model.startswith(".") or os.path.isdir(model))


@dataclass(frozen=True)
class JobSpec:
    """Everything that defines one measured training job.

    The defaults are ``make demo``'s job: tiny GPT-2 on the shipped task, batch 8 of 64 tokens, lr 2e-3 (its loss
    falls from ~8.3 within 40 steps, so loss parity can be judged), 40 steps of which 5 warm up, and 1 CPU thread
    (on a shared machine a second OpenMP thread that waits for a core slows every step: ``threads=None`` takes
    every core this process may use, divided by ``nproc``).

    model: a catalog name (``tcbench.models()``), a local folder ``from_pretrained`` can read, or an
    importable factory ``"package.module:function"`` returning a ``torch.nn.Module`` whose
    ``forward(**batch)`` returns a loss tensor or an object with ``.loss`` (called with the keyword
    arguments it accepts among ``size``, ``seq_len``, ``num_labels``, ``dropout``, ``seed``). For a
    script job, the name its runs are shown under (default: the script's file name).
    size: ``tiny`` / ``small`` (teaching/test presets) or ``base`` (the published dimensions); for a
    factory, any word the factory understands.
    dataset: ``"builtin"`` (the shipped task), a .csv/.jsonl file, or a batch factory
    ``"package.module:function"`` called as ``fn(batch_size=, seq_len=, seed=, split="train"|"eval")`` that
    yields dicts of tensors (shapes may change between batches; each new shape a compiler sees is a recompile).
    backend: ``eager`` (native PyTorch), ``inductor`` (torch.compile) or ``xla`` (PyTorch/XLA).
    steps counts every optimizer step, the first ``warmup_steps`` of which are reported apart.
    loss_every: the loss tensor is read on the host every k steps only (a read is a device sync).
    dropout: ``None`` keeps the architecture's default; ``0.0`` makes eager and compiled jobs
    draw no random masks, for a tight loss-parity check.
    eval_batches: after training, the mean loss over this many batches of the held-out ``eval`` split
    (0: no evaluation); reported as ``JobResult.extra.eval_loss``.
    eval_every: with ``eval_batches``, the same held-out batches are also evaluated after every this many steps
    (0: never), each with the steps, samples and wall time so far, the evaluations' own time left out:
    ``JobResult.extra.eval_curve`` (time to quality). A compiled model's evaluation graph is compiled at the first
    of them, and their memory counts in the job's peak.
    stop_at_loss: with ``eval_every``, training ends at the first of those evaluations at or below this loss (time
    to quality: no steps are spent past the target); None trains all ``steps``.
    memory_budget_gb: the per-device memory a job may use; None takes the instance profile's budget
    when the job starts (``"this-machine"`` has none); a CPU job whose measured peak exceeds it is ``oom``.
    profile: ``"this-machine"`` or a name of ``tcbench.profiles()`` (kept in the catalog's spelling).
    seed: 0..2**32-1 (numpy's and torch's seeds).
    compile_scope (Inductor): ``"model"`` compiles the whole model (and ``optimizer.step`` with
    ``compile_optimizer``); ``"blocks"`` compiles the repeated transformer block instead (regional compilation: each
    block of the model's largest ``nn.ModuleList`` of one class is compiled, and identical blocks share one compiled
    graph), leaving the rest of the model eager; the blocks found are named in the result
    (``JobResult.compiled_regions``); ``"step"`` compiles the whole training step as one function (forward, loss,
    backward and optimizer step: Dynamo runs the backward where it breaks the graph; the optimizer step that follows
    in the same call is compiled with ``compile_optimizer``).
    compile_optimizer (Inductor): False (the default) leaves the optimizer eager with torch's fused kernel
    (``AdamW(fused=True)``, what HF ``Trainer`` runs), the model alone compiled; True compiles ``optimizer.step``
    (AdamW, foreach) beside the model. On a CPU the fused eager step was as fast or faster (four lock-step
    comparisons, 2026-11-29: 0.99-1.03×) and its warm compile 2-5 s shorter (benchmarks/vs_trainer.md).
    With ``compile_scope="step"`` the optimizer step stays eager inside the compiled step unless this is True.
    cpp_wrapper (Inductor): True has Inductor generate C++ instead of Python around its kernels
    (``torch._inductor.config.cpp_wrapper``): less Python per step, a longer compile.
    cache: ``"shared"`` (the compile caches of ``$TCBENCH_HOME``, kept between jobs; a compiled job also keeps its
    compile artifacts there, ``tcbench.job.artifacts``), ``"cold"`` (a fresh, empty compile cache: an honest cold
    compile) or ``"artifacts"`` (a fresh compile cache into which the artifacts stored for the job's key are loaded
    first: what a teammate's or a new machine's first job gets; Inductor only).
    stall_s: the job is stopped (``interrupted``, "stalled") when it sends nothing — no step, no phase
    announcement — for max(stall_s, 20 × its median step) seconds; the job announces its long phases
    (model load, compile/warmup, eval), each of which restarts the clock.
    timeout_s: an optional cap on the whole job's wall-clock seconds (None: no cap; a long job that
    keeps reporting is never killed).
    script: the path of your own training script (``tcbench.track()`` or ``tcbench.hf.TcbenchCallback``
    inside) run instead of tcbench's loop, with ``script_args``; model, size, dataset, padding, lr and
    batch size are then the script's business (``batch_size`` is only the fallback for samples/s when the
    script does not say), and ``steps`` caps the steps it is measured for.
    noise_micro_batches: 0 (off), or k >= 2 dividing ``batch_size``: each step's gradient is taken over k
    micro-batches separately (the same update) to measure the gradient noise scale (``tcbench.tuning.lr.noise``;
    eager, fp32 only); the estimate is ``JobResult.extra.noise_scale``.
    nproc: data-parallel processes on this machine (1: a single process). N > 1 runs the job under torchrun
    (``torch.distributed.run``) with DistributedDataParallel — gloo on CPU, NCCL on CUDA — each process on its
    own shard of the data with the same seed; ``batch_size`` is per process, the global batch
    ``global_batch`` = batch_size × nproc. Eager and Inductor (torch.compile of the DDP model); XLA on TPU and
    CUDA PJRT devices (torchrun, the ``xla://`` process group, ``xm.optimizer_step``); XLA's multi-process
    collectives do not run on the CPU device (such a job is ``unavailable``).
    nnodes, node_rank, rdzv_endpoint: a job over several machines. Call ``tc.run`` with the same spec on each
    of ``nnodes`` machines, ``node_rank`` 0 … nnodes−1 telling them apart, and ``rdzv_endpoint`` "host:port"
    of node 0 (where torchrun's rendezvous store listens; a free port reachable from every node). World size
    ``world_size`` = nproc × nnodes; each machine's result holds the steps its first process measured (the
    same synchronous steps on every node) and the job's global throughput.
    """

    model: str = "gpt2"
    size: str = "tiny"
    backend: str = "eager"
    batch_size: int = 8
    seq_len: int = 64
    steps: int = 40
    warmup_steps: int = 5
    lr: float = 2e-3
    seed: int = 0
    precision: str = "fp32"
    profile: str = "this-machine"
    padding: str = "max_length"
    dataset: str = "builtin"
    compile_mode: str = "default"
    compile_scope: str = "model"
    compile_optimizer: bool = False
    cpp_wrapper: bool = False
    loss_every: int = 1
    dropout: float | None = None
    threads: int | None = 1
    cache: str = "shared"
    memory_budget_gb: float | None = None
    debug: bool = False
    stall_s: float = 300.0
    timeout_s: float | None = None
    eval_batches: int = 0
    eval_every: int = 0
    stop_at_loss: float | None = None
    script: str | None = None
    script_args: tuple[str, ...] = ()
    noise_micro_batches: int = 0
    nproc: int = 1
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None

    def __post_init__(self) -> None:
        self._check_choice("backend", self.backend, BACKENDS)
        self._check_choice("precision", self.precision, PRECISIONS)
        self._check_choice("padding", self.padding, PADDINGS)
        self._check_choice("compile_mode", self.compile_mode, INDUCTOR_MODES)
        self._check_choice("cache", self.cache, CACHE_MODES)
        self._check_choice("compile_scope", self.compile_scope, COMPILE_SCOPES)
        self._check_script()
        if not isinstance(self.model, str) or not self.model:
            raise SpecError("model", self.model, MODEL_ALLOWED)
        catalog = self.script is None and self.model in MODELS
        if self.script is None and not catalog and not is_local_folder(self.model) and not is_factory(self.model):
            raise SpecError("model", self.model, MODEL_ALLOWED,
                            f"model={self.model!r} is unknown; allowed: {MODEL_ALLOWED}")
        if catalog:
            self._check_choice("size", self.size, SIZES)
        elif not isinstance(self.size, str) or not self.size:
            raise SpecError("size", self.size, "a non-empty word (the factory's size argument)")
        if not isinstance(self.dataset, str) or not self.dataset.strip():
            raise SpecError("dataset", self.dataset, DATASET_ALLOWED)
        for name in ("debug", "compile_optimizer", "cpp_wrapper"):
            if not isinstance(getattr(self, name), bool):
                raise SpecError(name, getattr(self, name), "True or False")
        self._set("profile", check_profile(self.profile))
        for name in ("batch_size", "seq_len", "steps", "loss_every"):
            self._number(name, 1, whole=True)
        for name in ("warmup_steps", "eval_batches", "eval_every"):
            self._number(name, 0, whole=True)
        if self.eval_every and not self.eval_batches:
            raise SpecError("eval_every", self.eval_every, "0 when eval_batches=0 (there is nothing to evaluate)")
        if self.stop_at_loss is not None:
            self._number("stop_at_loss", 0, open_low=True)
            if not self.eval_every:
                raise SpecError("stop_at_loss", self.stop_at_loss,
                                "None when eval_every=0 (no evaluation during training can reach it)")
        self._number("seed", 0, SEED_MAX, whole=True)
        if self.steps <= self.warmup_steps:
            raise SpecError("warmup_steps", self.warmup_steps, f"0..{self.steps - 1} (fewer than steps={self.steps})",
                            f"steps={self.steps} must be greater than warmup_steps={self.warmup_steps} "
                             "(steady-state figures need at least one step after warmup)")
        if catalog:
            limit = max_positions(self.model, self.size)
            if limit is not None and self.seq_len > limit:
                raise SpecError("seq_len", self.seq_len, f"1..{limit}",
                                f"seq_len={self.seq_len} is beyond {self.model} ({self.size})'s {limit} positions; "
                                f"allowed: 1..{limit}")
        self._number("lr", 0, open_low=True)
        self._number("dropout", 0, 1, open_high=True, optional=True)
        self._number("threads", 1, whole=True, optional=True)
        self._number("memory_budget_gb", 0, open_low=True, optional=True)
        self._number("stall_s", 0, WEEK_S, open_low=True)
        self._number("timeout_s", 0, WEEK_S, open_low=True, optional=True)
        self._check_noise()
        self._check_parallel()

    @property
    def world_size(self) -> int:
        """The data-parallel processes of the job over all its machines (nproc × nnodes)."""
        return self.nproc * self.nnodes

    @property
    def global_batch(self) -> int:
        """The samples of one optimizer step over all data-parallel processes (batch_size × nproc × nnodes)."""
        return self.batch_size * self.world_size

    def _check_parallel(self) -> None:
        self._number("nproc", 1, 64, whole=True)
        self._number("nnodes", 1, 64, whole=True)
        self._number("node_rank", 0, self.nnodes - 1, whole=True)
        self._check_endpoint()
        if self.world_size == 1:
            return
        for name, value, allowed in (("script", self.script, None),
                                     ("noise_micro_batches", self.noise_micro_batches, 0)):
            if value != allowed:
                raise SpecError(name, value, repr(allowed), f"{name}={value!r} cannot run data-parallel (nproc="
                                f"{self.nproc}, nnodes={self.nnodes}); allowed with nproc > 1 or nnodes > 1: "
                                f"{name}={allowed!r}")

    def _check_endpoint(self) -> None:
        value = self.rdzv_endpoint
        if self.nnodes == 1:
            if value is not None:
                raise SpecError("rdzv_endpoint", value, "None with nnodes=1 (a one-machine job needs no rendezvous)")
            return
        allowed = f'"host:port" of node 0 (port 1..65535), needed with nnodes={self.nnodes}'
        if not isinstance(value, str) or value.count(":") != 1 and not value.startswith("["):
            raise SpecError("rdzv_endpoint", value, allowed)
        host, _, port = value.rpartition(":")
        if not host.strip("[]") or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise SpecError("rdzv_endpoint", value, allowed)

    def _check_noise(self) -> None:
        self._number("noise_micro_batches", 0, whole=True)
        k = self.noise_micro_batches
        if k == 0:
            return
        if k == 1 or k > self.batch_size or self.batch_size % k:
            divisors = [d for d in range(2, self.batch_size + 1) if self.batch_size % d == 0]
            raise SpecError("noise_micro_batches", k, f"0 (off) or a divisor >= 2 of batch_size={self.batch_size}: "
                            f"{', '.join(map(str, divisors)) or 'none (batch_size 1 cannot be split)'}")
        # any precision: under bf16/fp16 autocast the gradients are still those of the fp32 parameters
        for name, value, allowed in (("backend", self.backend, "'eager'"), ("script", self.script, "None")):
            if value != {"backend": "eager", "script": None}[name]:
                raise SpecError(name, value, allowed, f"{name}={value!r} cannot measure the gradient noise scale "
                                f"(noise_micro_batches={k}); it needs {name}={allowed}: the noise scale is a property "
                                "of the model and data, measured on the native job")

    def _check_script(self) -> None:
        if self.script is None:
            if self.script_args:
                raise SpecError("script_args", self.script_args, "() unless script is set")
            self._set("script_args", ())   # JSON's [] back to the tuple
            return
        if not isinstance(self.script, str) or not self.script.endswith(".py"):
            raise SpecError("script", self.script, "None or the path of a Python script (.py)")
        args = self.script_args
        if isinstance(args, str) or not isinstance(args, (list, tuple)) or not all(isinstance(a, str) for a in args):
            raise SpecError("script_args", args, "a list of strings (the script's own command-line arguments)")
        self._set("script_args", tuple(args))
        if self.model == JobSpec.model:   # the name the runs are shown under
            self._set("model", os.path.basename(self.script))

    def _check_choice(self, name: str, value: Any, allowed: tuple) -> None:
        if value not in allowed:
            raise SpecError(name, value, allowed_text(allowed))

    def _number(self, name: str, low: float | None = None, high: float | None = None, **kwargs: Any) -> None:
        self._set(name, check_number(name, getattr(self, name), low, high, **kwargs))

    def _set(self, name: str, value: Any) -> None:
        """Store the checked value (a numpy scalar becomes a Python number; a profile its catalog spelling)."""
        if getattr(self, name) is not value:
            object.__setattr__(self, name, value)

    # -- derived -----------------------------------------------------------------------------
    @property
    def compiled(self) -> bool:
        """True for the compiler backends (inductor, xla)."""
        return self.backend != NATIVE

    @property
    def model_kind(self) -> str:
        """``catalog``, ``folder``, ``factory`` or ``script`` (what ``model`` names)."""
        if self.script is not None:
            return "script"
        if is_factory(self.model):
            return "factory"
        return "catalog" if self.model in MODELS else "folder"

    @property
    def tokens_per_step(self) -> int:
        """Tokens in one step's batch when padded to ``seq_len`` (the figure tokens/s uses)."""
        return self.batch_size * self.seq_len

    def replace(self, **changes: Any) -> "JobSpec":
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "JobSpec":
        """Build a spec from a dict (unknown keys are refused with their names)."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"unknown JobSpec field(s) {unknown}; allowed: {sorted(names)}")
        return cls(**data)

    @classmethod
    def from_json(cls, text: str) -> "JobSpec":
        return cls.from_dict(json.loads(text))

    @classmethod
    def from_stored(cls, text: str) -> "JobSpec":
        """A spec as an older tcbench stored it: validated when today's rules accept it, else kept verbatim.

        A stored run is a fact: a field this version no longer knows is dropped, a missing one takes
        its default, and a value today's checks refuse (an unknown profile) is kept as it was run.
        """
        data = json.loads(text)
        names = {f.name for f in dataclasses.fields(cls)}
        data = {k: v for k, v in data.items() if k in names}
        try:
            return cls(**data)
        except (SpecError, ValueError, TypeError):
            spec = object.__new__(cls)
            for f in dataclasses.fields(cls):
                object.__setattr__(spec, f.name, data.get(f.name, f.default))
            return spec
