"""Backends: eager (native), inductor (torch.compile), xla (PyTorch/XLA). One module each."""

from __future__ import annotations

from tcbench.job.backends.base import Backend, BackendUnavailable
from tcbench.job.backends.eager import EagerBackend
from tcbench.job.backends.inductor import InductorBackend
from tcbench.job.backends.xla import XlaBackend

REGISTRY = {"eager": EagerBackend, "inductor": InductorBackend, "xla": XlaBackend}


def get_backend(name: str) -> Backend:
    """A fresh backend object by name."""
    if name not in REGISTRY:
        raise ValueError(f"backend={name!r} is not allowed; allowed: {', '.join(REGISTRY)}")
    return REGISTRY[name]()


__all__ = ["Backend", "BackendUnavailable", "EagerBackend", "InductorBackend", "XlaBackend", "REGISTRY", "get_backend"]
