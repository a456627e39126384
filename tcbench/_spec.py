"""JobSpec: the one frozen description of a training job that crosses every layer.

A pair is data, not code: the compiled job of a comparison is
``dataclasses.replace(native, backend="inductor")``, so the two differ in nothing else.
Validation only checks values; it never touches the network, the disk or the environment
(a local model folder is checked by the worker that loads it).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Any

from ._catalog import MODELS, SIZES, max_positions

BACKENDS = ("eager", "inductor", "xla")
PRECISIONS = ("fp32", "bf16", "fp16")
PADDINGS = ("max_length", "longest")
INDUCTOR_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
CACHE_MODES = ("shared", "cold")


class SpecError(ValueError):
    """A JobSpec field with a value that is not allowed: ``.field``, ``.value`` and ``.allowed`` (in words)."""

    def __init__(self, field: str, value: Any, allowed: str, message: str | None = None) -> None:
        self.field, self.value, self.allowed = field, value, allowed
        super().__init__(message or f"{field}={value!r} is not allowed; allowed: {allowed}")


def _allowed(values: Any) -> str:
    return ", ".join(repr(v) for v in values)


def _is_local_folder(model: str) -> bool:
    return os.sep in model or model.startswith(".") or os.path.isdir(model)


@dataclass(frozen=True)
class JobSpec:
    """Everything that defines one measured training job.

    model: a catalog name (``tcbench.models()``) or a local folder ``from_pretrained`` can read.
    size: ``tiny`` / ``small`` (teaching/test presets) or ``base`` (the published dimensions).
    backend: ``eager`` (native PyTorch), ``inductor`` (torch.compile) or ``xla`` (PyTorch/XLA).
    steps counts every optimizer step, the first ``warmup_steps`` of which are reported apart.
    loss_every: the loss tensor is read on the host every k steps only (a read is a device sync).
    dropout: ``None`` keeps the architecture's default; ``0.0`` makes eager and compiled jobs
    draw no random masks, for a tight loss-parity check.
    eval_batches: after training, the mean loss over this many batches of the held-out ``eval`` split
    (0: no evaluation); reported as ``JobResult.extra["eval_loss"]``.
    memory_budget_gb: the per-device memory a job may use (set from the instance profile);
    a CPU job whose measured peak exceeds it is reported as ``oom``.
    """

    model: str = "bert-base-cased"
    size: str = "tiny"
    backend: str = "eager"
    batch_size: int = 8
    seq_len: int = 128
    steps: int = 30
    warmup_steps: int = 5
    lr: float = 5e-5
    seed: int = 0
    precision: str = "fp32"
    profile: str = "this-machine"
    padding: str = "max_length"
    dataset: str = "builtin"
    compile_mode: str = "default"
    loss_every: int = 1
    dropout: float | None = None
    threads: int | None = None
    cache: str = "shared"
    memory_budget_gb: float | None = None
    debug: bool = False
    timeout_s: float = 1800.0
    eval_batches: int = 0

    def __post_init__(self) -> None:
        self._check_choice("backend", self.backend, BACKENDS)
        self._check_choice("precision", self.precision, PRECISIONS)
        self._check_choice("padding", self.padding, PADDINGS)
        self._check_choice("compile_mode", self.compile_mode, INDUCTOR_MODES)
        self._check_choice("cache", self.cache, CACHE_MODES)
        if not isinstance(self.model, str) or not self.model:
            raise SpecError("model", self.model, f"{_allowed(MODELS)} or a local folder path")
        local = _is_local_folder(self.model)
        if not local and self.model not in MODELS:
            raise SpecError("model", self.model, f"{_allowed(MODELS)}, or a local folder path",
                            f"model={self.model!r} is unknown; allowed: {_allowed(MODELS)}, or a local folder path")
        if not local:
            self._check_choice("size", self.size, SIZES)
        for name in ("batch_size", "seq_len", "steps", "loss_every"):
            self._check_int(name, 1)
        self._check_int("warmup_steps", 0)
        self._check_int("seed", 0)
        self._check_int("eval_batches", 0)
        if self.steps <= self.warmup_steps:
            raise SpecError("warmup_steps", self.warmup_steps, f"0..{self.steps - 1} (fewer than steps={self.steps})",
                            f"steps={self.steps} must be greater than warmup_steps={self.warmup_steps} "
                             "(steady-state figures need at least one step after warmup)")
        if not local:
            limit = max_positions(self.model, self.size)
            if limit is not None and self.seq_len > limit:
                raise SpecError("seq_len", self.seq_len, f"1..{limit}", f"seq_len={self.seq_len} is beyond {self.model} ({self.size})'s "
                                 f"{limit} positions; allowed: 1..{limit}")
        if not isinstance(self.lr, (int, float)) or isinstance(self.lr, bool) or not (self.lr > 0) or self.lr == float("inf"):
            raise SpecError("lr", self.lr, "a finite number > 0",
                            f"lr={self.lr!r} is not allowed; the learning rate must be a finite number > 0")
        if self.dropout is not None and not (0.0 <= float(self.dropout) < 1.0):
            raise SpecError("dropout", self.dropout, "None (the model's default) or 0 <= dropout < 1")
        if self.threads is not None:
            self._check_int("threads", 1)
        if self.memory_budget_gb is not None and not (self.memory_budget_gb > 0):
            raise SpecError("memory_budget_gb", self.memory_budget_gb, "None or a number > 0")
        if not (self.timeout_s > 0):
            raise SpecError("timeout_s", self.timeout_s, "a number of seconds > 0")

    def _check_choice(self, name: str, value: Any, allowed: tuple) -> None:
        if value not in allowed:
            raise SpecError(name, value, _allowed(allowed))

    def _check_int(self, name: str, minimum: int) -> None:
        value = getattr(self, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise SpecError(name, value, f"a whole number >= {minimum}",
                            f"{name}={value!r} is not allowed; it must be a whole number >= {minimum}")

    # -- derived -----------------------------------------------------------------------------
    @property
    def compiled(self) -> bool:
        """True for the compiler backends (inductor, xla)."""
        return self.backend != "eager"

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
