"""The compiled configurations ``tune_compile`` searches: ``CompileConfig`` (the JobSpec fields it sets, and the job
label that names them), the choices the device supports (``search_space``, with bf16 only where it runs at speed:
``bf16_supported``), the user's own choices in their place (``narrow``) and the configurations a space holds
(``size_of``, ``every_config``)."""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from tcbench.core.catalog import MODELS
from tcbench.core.spec import COMPILE_SCOPES, INDUCTOR_MODES, JobSpec, PRECISIONS

FIELDS = ("compile_mode", "compile_scope", "compile_optimizer", "precision", "cpp_wrapper")


@dataclass(frozen=True)
class CompileConfig:
    """One compiled configuration: the JobSpec fields the search sets."""

    compile_mode: str = "default"
    compile_scope: str = "model"
    compile_optimizer: bool = False
    precision: str = "fp32"
    cpp_wrapper: bool = False

    @classmethod
    def default(cls, spec: JobSpec) -> "CompileConfig":
        """torch.compile as ``compare`` runs it: mode default, the whole model (the optimizer eager, fused), the
        job's precision, Python wrapper."""
        return cls(precision=spec.precision)

    @classmethod
    def of(cls, spec: JobSpec) -> "CompileConfig":
        return cls(**{name: getattr(spec, name) for name in FIELDS})

    def apply(self, spec: JobSpec) -> JobSpec:
        return dataclasses.replace(spec, backend="inductor", **dataclasses.asdict(self))

    def label(self) -> str:
        """``"inductor · default"``, or what differs from the default: ``"inductor · max-autotune-no-cudagraphs ·
        blocks · compiled optimizer · bf16 · cpp_wrapper"``."""
        parts = [self.compile_mode if self.compile_mode != "default" else "",
                 self.compile_scope if self.compile_scope != "model" else "",
                 "compiled optimizer" if self.compile_optimizer else "",
                 self.precision if self.precision != "fp32" else "", "cpp_wrapper" if self.cpp_wrapper else ""]
        return " · ".join(["inductor", *[p for p in parts if p]] if any(parts) else ["inductor", "default"])


def bf16_supported(env: Mapping[str, Any]) -> tuple[bool, str]:
    """(bf16 autocast runs at speed on the job's device, why): a GPU of compute capability 8.0 or more, or a CPU
    with AVX-512 BF16 or AMX (without them bf16 matmuls are emulated: ~100× slower). ``env``: a job's environment
    (its ``gpu`` and ``gpu_capability``); the CPU's flags are this machine's."""
    from tcbench.host.env import cpu_flags

    if env.get("gpu"):
        cap = str(env.get("gpu_capability") or "")
        ok = bool(cap) and float(cap) >= 8.0
        return ok, f"{env['gpu']} (compute capability {cap or 'unknown'})"
    flags = cpu_flags() & {"avx512_bf16", "amx_bf16"}
    return bool(flags), (f"the CPU has {', '.join(sorted(flags))}" if flags
                         else "the CPU has neither AVX-512 BF16 nor AMX")


def search_space(spec: JobSpec, env: Mapping[str, Any]) -> dict[str, tuple]:
    """The choices of each field the device supports (``env``: the native job's environment). Blocks only for
    catalog models with a repeated block (ALBERT shares one layer); a user's model may name it in ``space``."""
    cuda = bool(env.get("gpu"))
    modes = ("default", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune") if cuda else (
        "default", "max-autotune-no-cudagraphs")
    info = MODELS.get(spec.model) if spec.script is None else None
    scopes = ("model", "blocks", "step") if info is not None and info.family != "albert" else ("model", "step")
    precisions = tuple(dict.fromkeys((spec.precision, *(("bf16",) if bf16_supported(env)[0] else ()))))
    return {"compile_mode": modes, "compile_scope": scopes, "compile_optimizer": (True, False),
            "precision": precisions, "cpp_wrapper": (False, True)}


def narrow(space: dict[str, tuple], wanted: Mapping[str, Sequence] | None) -> dict[str, tuple]:
    """``space`` with the user's own choices for some fields (``space=`` of tune_compile); a field or a choice it
    does not know is a ValueError naming it. A choice outside what the device supports is allowed when it is a
    valid value (the user asked for it: ``{"compile_scope": ["model", "blocks"]}`` for their own model)."""

    valid = {"compile_mode": INDUCTOR_MODES, "compile_scope": COMPILE_SCOPES, "compile_optimizer": (True, False),
             "precision": PRECISIONS, "cpp_wrapper": (False, True)}
    if wanted is not None and not isinstance(wanted, Mapping):
        raise ValueError(f"space={wanted!r} is not allowed; it must be a mapping of fields to their choices, e.g. "
                         "{'precision': ['bf16'], 'compile_mode': ['default', 'max-autotune-no-cudagraphs']}")
    out = dict(space)
    for name, choices in (wanted or {}).items():
        if name not in valid:
            raise ValueError(f"space has the field {name!r}; allowed: {', '.join(map(repr, FIELDS))}")
        if isinstance(choices, (str, bool)) or not isinstance(choices, Sequence) or not choices:
            raise ValueError(f"space[{name!r}]={choices!r} is not allowed; it must be a non-empty list of "
                             f"{', '.join(map(repr, valid[name]))}")
        for c in choices:
            if c not in valid[name] or type(c) is not type(valid[name][0]):
                raise ValueError(f"space[{name!r}] contains {c!r}; allowed: {', '.join(map(repr, valid[name]))}")
        out[name] = tuple(dict.fromkeys(choices))
    return out


def first_in(space: Mapping[str, tuple], default: CompileConfig) -> CompileConfig:
    """The configuration a search tries first: ``default`` where ``space`` holds it; in a narrowed space (``precision:
    ["bf16"]`` leaves fp32 out) each field's default where the space holds it, else the field's first choice."""
    return CompileConfig(**{name: value if value in space[name] else space[name][0]
                            for name, value in dataclasses.asdict(default).items()})


def size_of(space: Mapping[str, tuple]) -> int:
    return math.prod(len(v) for v in space.values())


def every_config(space: Mapping[str, tuple]) -> list[CompileConfig]:
    """Every configuration of ``space``, in the order of its fields' choices."""
    return [CompileConfig(**dict(zip(FIELDS, values))) for values in itertools.product(*(space[k] for k in FIELDS))]
