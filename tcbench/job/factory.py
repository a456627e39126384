"""Your own model and data: importable factories ``"package.module:function"``.

A model factory returns a ``torch.nn.Module`` whose ``forward(**batch)`` returns the loss (a tensor, or an
object or dict with ``loss``); it is called with the keyword arguments it accepts among ``size``,
``seq_len``, ``num_labels``, ``dropout`` and ``seed``. A batch factory is called as
``fn(batch_size=, seq_len=, seed=, split="train"|"eval")`` (again only with the arguments it accepts)
and yields dicts of tensors, endlessly or at least for the job's steps. Batches whose shapes change
are fine: each new shape a compiler sees is a recompilation, counted like any other.

The job process imports the factory (it inherits the caller's cwd and ``sys.path`` through PYTHONPATH).
The parent only checks, before any process starts, that the module can be found and defines the name
(``check``: the module's parent packages are imported, the module itself is read, not run).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import os
import sys
from typing import Any, Callable, Iterator

from tcbench.core.spec import DATASET_ALLOWED, MODEL_ALLOWED, SpecError

_ALLOWED = {"model": MODEL_ALLOWED, "dataset": DATASET_ALLOWED}


def _bad(field: str, name: str, what: str) -> SpecError:
    return SpecError(field, name, _ALLOWED[field], f"{field}={name!r}: {what}")


def _top_level_names(tree: ast.Module) -> tuple[set[str], bool]:
    """Names a module defines at its top level, and whether it star-imports (then anything may exist)."""
    names: set[str] = set()
    star = False
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                star |= alias.name == "*"
                names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, (ast.If, ast.Try)):   # `try: from x import f except ImportError: def f(...)`
            sub = ast.Module(body=[n for n in ast.walk(node) if isinstance(n, ast.stmt) and n is not node],
                             type_ignores=[])
            more, more_star = _top_level_names(sub)
            names |= more
            star |= more_star
    return names, star


def check(name: str, field: str) -> None:
    """Check a factory before any process starts: its module can be found from the caller's ``sys.path``
    and defines the function. A SpecError naming the field, the value and the cause otherwise."""
    module, _, attr = name.partition(":")
    added = os.getcwd() not in sys.path and "" not in sys.path
    if added:   # the job's PYTHONPATH starts with the caller's working directory: search as it will
        sys.path.append(os.getcwd())
    missing = module
    try:
        found = importlib.util.find_spec(module)
    except ModuleNotFoundError as exc:          # a parent package is missing
        found, missing = None, exc.name or module
    except (ImportError, ValueError) as exc:   # a parent package fails to import
        raise _bad(field, name, f"its module {module!r} cannot be found ({type(exc).__name__}: {exc}); the job "
                                f"imports from the caller's working directory ({os.getcwd()}) and sys.path") from None
    finally:
        if added:
            sys.path.remove(os.getcwd())
    if found is None:
        raise _bad(field, name, f"no module named {missing!r} on the caller's sys.path or in its working directory "
                                f"({os.getcwd()})")
    origin = found.origin or ""
    if not origin.endswith(".py"):
        return   # an extension or namespace module: the job's import will tell
    try:
        with open(origin, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=origin)
    except (OSError, SyntaxError, UnicodeDecodeError) as exc:
        raise _bad(field, name, f"{origin} cannot be read as Python ({type(exc).__name__}: {exc})") from None
    names, star = _top_level_names(tree)
    if attr not in names and not star:
        raise _bad(field, name, f"{origin} defines no {attr!r} at its top level")


def load(name: str, field: str) -> Callable[..., Any]:
    """Import the factory (in the job process)."""
    module, _, attr = name.partition(":")
    fn = getattr(importlib.import_module(module), attr, None)
    if not callable(fn):
        raise _bad(field, name, f"{module}.{attr} is {type(fn).__name__}, not a function")
    return fn


def call(fn: Callable[..., Any], offered: dict[str, Any]) -> Any:
    """Call ``fn`` with the offered keyword arguments it accepts (all of them when it takes ``**kwargs``)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return fn(**offered)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return fn(**offered)
    accepted = {p.name for p in params if p.kind in (inspect.Parameter.KEYWORD_ONLY,
                                                     inspect.Parameter.POSITIONAL_OR_KEYWORD)}
    return fn(**{k: v for k, v in offered.items() if k in accepted})


def build_model(name: str, size: str, seq_len: int, num_labels: int | None, dropout: float | None,
                seed: int) -> Any:
    """The factory's module (called with the arguments it accepts); a named error when it is not one."""
    import torch

    offered = {"size": size, "seq_len": seq_len, "num_labels": num_labels, "dropout": dropout, "seed": seed}
    model = call(load(name, "model"), {k: v for k, v in offered.items() if v is not None})
    if not isinstance(model, torch.nn.Module):
        raise _bad("model", name, f"returned a {type(model).__name__}, not a torch.nn.Module")
    return model


def batches(name: str, batch_size: int, seq_len: int, seed: int, split: str) -> Iterator[dict]:
    """The batch factory's stream, each item checked: a dict of tensors (the model's keyword arguments)."""
    import torch

    items = call(load(name, "dataset"), {"batch_size": batch_size, "seq_len": seq_len, "seed": seed, "split": split})
    try:
        stream = iter(items)
    except TypeError:
        raise _bad("dataset", name, f"returned a {type(items).__name__}, not an iterable of batches") from None
    n = 0
    for batch in stream:
        if not isinstance(batch, dict) or not any(isinstance(v, torch.Tensor) for v in batch.values()):
            raise _bad("dataset", name, f"item {n} of split {split!r} is a {type(batch).__name__}; allowed: a dict "
                                        "of tensors (the model's keyword arguments)")
        n += 1
        yield batch
    raise _bad("dataset", name, f"split {split!r} ran out after {n} batches; a batch factory must yield at least "
                                "as many batches as the job's steps and eval batches (or endlessly)")


def loss_of(output: Any) -> Any:
    """The loss tensor of a forward's output: the tensor itself, ``output.loss`` or ``output["loss"]``."""
    if hasattr(output, "loss") and output.loss is not None:
        return output.loss
    if isinstance(output, dict) and output.get("loss") is not None:
        return output["loss"]
    if hasattr(output, "backward") and getattr(output, "ndim", 1) == 0:
        return output
    raise TypeError(f"the model's forward(**batch) returned a {type(output).__name__} with no loss; allowed: a "
                    "scalar loss tensor, or an object or dict with 'loss'")


def batch_size_of(batch: dict) -> int:
    """Samples in a batch: the leading dimension of its first tensor."""
    for v in batch.values():
        if hasattr(v, "shape") and len(v.shape):
            return int(v.shape[0])
    return 1


def seq_len_of(batch: dict) -> int:
    """Tokens per sample: ``input_ids``' second dimension; 1 for batches without ``input_ids`` (images, features)."""
    ids = batch.get("input_ids")
    return int(ids.shape[1]) if ids is not None and len(ids.shape) > 1 else 1


def count_flops(name: str, size: str, seq_len: int, num_labels: int | None, dropout: float | None, seed: int,
                batch: dict) -> float | None:
    """Training FLOPs of one step (forward + backward) counted by torch's FlopCounterMode on a copy of the model
    built on the meta device: no memory, no data touched. None when the model cannot run on the meta device."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    try:
        with torch.device("meta"):
            model = build_model(name, size, seq_len, num_labels, dropout, seed)
        meta = {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
        counter = FlopCounterMode(display=False)
        with counter:
            loss_of(model(**meta)).backward()
        return float(counter.get_total_flops()) or None
    except Exception:  # noqa: BLE001 - an op without a meta kernel: MFU is then unknown, the job still runs
        return None
