"""Backends: eager (native), inductor (torch.compile), xla (PyTorch/XLA). One module each.

The only place a backend's name decides anything: everyone else looks the class up here (``backend_class``) and
asks it (``base.Backend``). Importing this package never imports torch (the runner's parent process imports it).
"""

from __future__ import annotations

from tcbench.job.backends.base import Backend, BackendUnavailable, TrainerMismatch
from tcbench.job.backends.eager import EagerBackend
from tcbench.job.backends.inductor import InductorBackend
from tcbench.job.backends.xla import XlaBackend

REGISTRY = {"eager": EagerBackend, "inductor": InductorBackend, "xla": XlaBackend}


def backend_class(name: str) -> type[Backend]:
    """The backend class by name (its class attributes and classmethods need no object, nor torch)."""
    if name not in REGISTRY:
        raise ValueError(f"backend={name!r} is not allowed; allowed: {', '.join(REGISTRY)}")
    return REGISTRY[name]


def get_backend(name: str) -> Backend:
    """A fresh backend object by name."""
    return backend_class(name)()


__all__ = ["Backend", "BackendUnavailable", "TrainerMismatch", "EagerBackend", "InductorBackend", "XlaBackend",
           "REGISTRY", "backend_class", "get_backend"]
