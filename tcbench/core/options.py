"""An entry point with many settings takes them as one frozen options dataclass (``RetuneOptions``,
``CompileSearchOptions``): ``options=`` gives them whole, and a keyword argument named like a field overrides that
field (``retune_lr(spec, 64, n_trials=8)``), so a call reads as it did when each setting was a parameter."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T")


def merged(cls: type[T], options: T | None, overrides: dict[str, Any], call: str) -> T:
    """``options`` (default ``cls()``) with ``overrides`` set. A keyword that is no field of ``cls`` is a TypeError
    naming the call and the fields it takes, as Python's own for an unknown keyword."""
    if options is not None and not isinstance(options, cls):
        raise TypeError(f"{call}(options={options!r}) is not allowed; pass a {cls.__name__} or None")
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = [k for k in overrides if k not in names]
    if unknown:
        raise TypeError(f"{call}() got an unexpected keyword argument {unknown[0]!r}; it takes the fields of "
                        f"{cls.__name__}: {', '.join(names)}")
    return dataclasses.replace(options if options is not None else cls(), **overrides)
