"""The compiled loss loaded, not traced again (torch ≥ 2.14): issue 46's load path.

A warm Inductor job on torch 2.9 finds every graph in the compile caches, and Dynamo still traces the model's Python
in every process (2 s of the demo spec's 3 s warm compile here). torch 2.14's ``torch.compile(fn,
fullgraph=True).aot_compile(example)`` makes a program of the whole function, forward and backward, that
``save_compiled_function`` writes and ``torch.compiler.load_compiled_function`` loads in another process without
tracing. In tcbench's warm jobs on torch 2.14 the compile latency fell to 0.82 s against 24.0 s cold (tiny GPT-2)
and 0.77 s against 35.3 s (small BERT), the losses the cold job's to the last digit (``benchmarks/warm_compile.py``,
``benchmarks/precompile.md``). torch 2.9's ``aot_compile`` serves inference only: it takes its program
from AOTAutograd's bundled cache entry, which a training graph writes at its first backward, and ``aot_compile``
runs none.

What is precompiled: the loss of the model on a batch (``loss``), a plain module-level function (HF's ``forward`` is
wrapped in ``(self, *args, **kwargs)``, which ``aot_compile`` cannot bind). The optimizer step stays as the job has
it (eager fused AdamW by default; a compiled one is traced: 2.14's ``Optimizer.step`` breaks its graph).

**The key stands for the guards it drops.** Guards on object identity (the model's modules, globals, closures)
cannot be serialized, so they are dropped (``serializable``), and the program is kept under a key of everything it
depends on: the compile artifacts' fields (torch, Python, device, vector ISAs, threads, the compiler's settings, the
model, the shapes; ``tcbench.job.artifacts.key_fields``), transformers' version, and this module's source (the loss
and the filter). The guards that remain (shapes, dtypes, the grad mode, the autocast state) are checked at every
call: a program whose guards fail is refused, set aside, and the loss compiled as torch.compile does (``jit``),
never run on inputs it was not made for. A file whose header names other fields is refused before it is loaded.

Where it is used (``unavailable``): Inductor's default mode on the whole model (``compile_scope="model"``), fp32, a
catalog model (the code of a local folder's or a factory's model is not in the key), one process, fixed shapes
(``padding="max_length"``); elsewhere the job compiles as before, and the job's compile line says which way it went
(``CompilePhases.precompiled``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from typing import Any, Callable

from tcbench.core.catalog import MODELS
from tcbench.core.spec import JobSpec
from tcbench.job.factory import loss_of

MIN_TORCH = (2, 14)
FOLDER = "tcbench-precompiled"   # beside Inductor's caches (its cache_dir()): a cold cache has none
# guards that name an object of this process (or its identity): not serializable; the key stands for them
UNSAFE = {"ID_MATCH", "CLOSURE_MATCH", "FUNCTION_MATCH", "WEAKREF_ALIVE", "DICT_VERSION", "NN_MODULE"}


def loss(model: Any, **batch: Any) -> Any:
    """The loss of ``model`` on ``batch``: what is compiled, saved and loaded."""
    return loss_of(model(**batch))


def serializable(entries: list) -> list[bool]:
    """``guard_filter_fn``: keep the guards another process can check (shapes, dtypes, global state), drop those on
    this process's objects."""
    return [not (g.is_global or g.guard_type in UNSAFE or UNSAFE & set(g.derived_guard_types)) for g in entries]


def torch_can() -> bool:
    """Whether this torch can save and load a compiled training step (2.14 or newer)."""
    import torch

    version = tuple(int(x) for x in re.findall(r"\d+", torch.__version__)[:2])
    return version >= MIN_TORCH and hasattr(torch.compiler, "load_compiled_function")


def unavailable(spec: JobSpec) -> str:
    """Why this job's loss is compiled as torch.compile does (traced in every process) rather than loaded
    precompiled; "" when it can be loaded."""
    import torch

    if not torch_can():
        return (f"torch {torch.__version__} cannot load a compiled training step (its aot_compile serves inference "
                "only; torch ≥ 2.14 can)")
    why = {"compile_scope": spec.compile_scope != "model", "compile_mode": spec.compile_mode != "default",
           "precision": spec.precision != "fp32", "model": spec.model not in MODELS, "nproc": spec.nproc != 1,
           "padding": spec.padding != "max_length", "noise_micro_batches": bool(spec.noise_micro_batches),
           "cpp_wrapper": spec.cpp_wrapper, "debug": spec.debug}   # debug: the trace is what the user asked for
    off = [f"{name}={getattr(spec, name)!r}" for name, no in why.items() if no]
    return f"not with {', '.join(off)}" if off else ""


def key_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """The program's key: the compile artifacts' ``fields``, transformers' version and this module's source."""
    import transformers

    with open(__file__, "rb") as f:
        source = hashlib.sha256(f.read()).hexdigest()[:16]
    return {**fields, "transformers": transformers.__version__, "precompiled": source}


class PrecompiledLoss:
    """``forward(**batch)`` → the loss, from the program stored under ``fields``' key in ``folder``: loaded at the
    first call, or compiled from that call's batch and saved; ``jit`` (a function that compiles the loss as
    torch.compile does) where the program is refused. ``state``: what happened, in words."""

    def __init__(self, model: Any, fields: dict[str, Any], folder: str, jit: Callable[[], Callable[..., Any]]):
        self.model, self.fields, self.folder, self.jit = model, key_fields(fields), folder, jit
        self.key = hashlib.sha256(json.dumps(self.fields, sort_keys=True, default=str).encode()).hexdigest()[:16]
        self.path = os.path.join(folder, f"{self.key}.bin")
        self.fn: Callable[..., Any] | None = None
        self.fallback: Callable[..., Any] | None = None
        self.state = ""

    def __call__(self, **batch: Any) -> Any:
        if self.fallback is not None:
            return self.fallback(**batch)
        if self.fn is None:
            try:
                self.fn = self._loaded() or self._compiled(batch)
            except Exception as exc:  # noqa: BLE001 - aot_compile could not make it: compiled as torch.compile does
                self.state = f"not precompiled: aot_compile failed ({type(exc).__name__}: {_first_line(exc)})"
                self.fallback = self.jit()
                return self.fallback(**batch)
        try:
            return self.fn(self.model, **batch)
        except Exception as exc:  # noqa: BLE001 - a guard failed: refused, compiled anew; its own error raises there
            if not _guard_failure(exc):
                raise
            self.state = self._refused(f"its guards failed on this job's inputs ({_failed_guard(exc)})")
            self.fallback = self.jit()
            return self.fallback(**batch)

    def _loaded(self) -> Callable[..., Any] | None:
        import torch

        head_path = self.path[:-4] + ".json"
        if not os.path.exists(self.path):
            return None
        try:
            with open(head_path, encoding="utf-8") as f:
                head = json.load(f)
        except (OSError, ValueError) as exc:
            self._refused(f"its header cannot be read ({type(exc).__name__})")
            return None
        want = json.loads(json.dumps(self.fields, default=str))
        if not isinstance(head, dict) or head.get("fields") != want:
            stored = head.get("fields") if isinstance(head, dict) and isinstance(head.get("fields"), dict) else {}
            differ = sorted(k for k in want if stored.get(k) != want[k]) or ["its key"]
            self._refused(f"it was made for other fields ({', '.join(differ)})")
            return None
        try:
            with open(self.path, "rb") as f:
                fn = torch.compiler.load_compiled_function(f)
        except Exception as exc:  # noqa: BLE001 - torch could not load it: compiled as if none were stored
            self._refused(f"torch could not load it ({type(exc).__name__}: {_first_line(exc)})")
            return None
        self.state = f"loaded {self.key} (the loss, forward and backward, not traced)"
        return fn

    def _compiled(self, batch: dict) -> Callable[..., Any]:
        import torch

        torch._dynamo.config.enable_aot_compile = True
        torch._functorch.config.bundled_autograd_cache = True   # the program carries its backward
        made = torch.compile(loss, fullgraph=True, options={"guard_filter_fn": serializable}).aot_compile(
            ((self.model,), batch))
        _write(self.folder, {"key": self.key, "fields": self.fields}, made.save_compiled_function)
        self.state = (self.state + "; " if self.state else "") + f"saved {self.key} (compiled with aot_compile)"
        return made

    def program(self) -> tuple[dict[str, Any], bytes] | None:
        """(header, bytes) of the program this job loaded or saved, for its compile artifacts
        (``tcbench.job.artifacts.save``); None when it has none (refused, or not yet made)."""
        if self.fn is None or self.fallback is not None:
            return None
        try:
            with open(self.path, "rb") as f:
                return {"key": self.key, "fields": self.fields}, f.read()
        except OSError:
            return None

    def _refused(self, why: str) -> str:
        """Set the stored program aside (``<key>.rejected-<time>.*``) and say so; the job's compile replaces it."""
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for path in (self.path, self.path[:-4] + ".json"):
            if os.path.exists(path):
                root, ext = os.path.splitext(path)
                try:
                    os.replace(path, f"{root}.rejected-{stamp}{ext}")
                except OSError:
                    pass
        self.state = f"refused {self.key}: {why}; set aside as {self.key}.rejected-{stamp}.*"
        return self.state


def install(folder: str, head: dict[str, Any], data: bytes) -> None:
    """A program that came with compile artifacts (``tcbench.job.artifacts.load``), written where a job looks for it;
    its header is checked when a job loads it, as any other's."""
    def write(path: str) -> None:
        with open(path, "wb") as f:
            f.write(data)

    if not re.fullmatch(r"[0-9a-f]{16}", str(head.get("key"))):   # a file name of ours, never a path
        return
    _write(folder, {"key": str(head.get("key")), "fields": head.get("fields")}, write)


def _write(folder: str, head: dict[str, Any], write_program: Callable[[str], Any]) -> None:
    """The program (``write_program(path)``) and its header under ``head["key"]`` in ``folder``, each replaced
    atomically, the header first: a program is never found without its header."""
    os.makedirs(folder, exist_ok=True)
    path, pid = os.path.join(folder, f"{head['key']}"), os.getpid()
    with open(f"{path}.json.{pid}", "w", encoding="utf-8") as f:
        json.dump(head, f, default=str)
    os.replace(f"{path}.json.{pid}", f"{path}.json")
    write_program(f"{path}.bin.{pid}")
    os.replace(f"{path}.bin.{pid}", f"{path}.bin")


def _guard_failure(exc: BaseException) -> bool:
    return "guard" in f"{type(exc).__name__} {exc}".lower()


def _failed_guard(exc: BaseException) -> str:
    """The guard that failed, as torch words it ("tensor 'L['batch']['input_ids']' size mismatch at index 0. expected
    2, actual 8"), else the error's first line."""
    found = re.search(r"verbose_code_parts=\[([\"'])(.*?)\1[,\]]", str(exc), re.S)
    return " ".join(found.group(2).split())[:200] if found else _first_line(exc)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
