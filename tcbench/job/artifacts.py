"""Compile cache artifacts (``torch.compiler.save_cache_artifacts`` / ``load_cache_artifacts``): what a compiled job
compiled, kept beside the store under a key of everything the compiled code depends on, so that the next job with
the same key, on a machine whose own compile cache is empty (a teammate's, a fresh CI runner, ``cache="artifacts"``),
loads it before compiling instead of compiling again.

A file pair per key in ``$TCBENCH_ARTIFACTS`` (the runner sets it: ``$TCBENCH_HOME/compile-artifacts``):
``<key>.bin`` (torch's bytes) and ``<key>.json`` (the key and the fields it was made of). An artifact is loaded
only when its stored key and fields equal this job's: a renamed, stale or foreign file is refused, by its key,
never loaded blindly. Runs in the job's process (imports torch).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import struct
import sys
import time
from typing import Any

from tcbench.core.spec import JobSpec

ENV = "TCBENCH_ARTIFACTS"


def key_fields(spec: JobSpec, device: Any) -> dict[str, Any]:
    """What compiled code depends on: torch, Python, the device and what its compiler targets (the CPU's vector
    instruction sets and the thread count Inductor bakes into its CPU kernels, or the GPU's name and compute
    capability), the compiler's configuration, the model and the shapes."""
    import torch

    if device.type == "cuda":
        target: Any = [torch.cuda.get_device_name(device), list(torch.cuda.get_device_capability(device))]
    else:
        try:
            from torch._inductor import cpu_vec_isa

            target = sorted(str(i) for i in cpu_vec_isa.valid_vec_isa_list())
        except (ImportError, AttributeError):   # a torch without the helper: the machine's name instead
            target = platform.processor() or platform.machine()
    return {"torch": torch.__version__, "python": sys.version.split()[0], "device": device.type, "target": target,
            "threads": torch.get_num_threads() if device.type == "cpu" else None, **spec_fields(spec)}


def spec_fields(spec: JobSpec) -> dict[str, Any]:
    """The key's fields a JobSpec decides (the compiler's configuration, the model, the shapes); the rest are the
    machine's. The runner finds a team's artifacts in the store by these (``tcbench.runner.artifacts``)."""
    return {"backend": spec.backend, "compile_mode": spec.compile_mode, "compile_scope": spec.compile_scope,
            "compile_optimizer": spec.compile_optimizer, "cpp_wrapper": spec.cpp_wrapper,
            "precision": spec.precision, "model": spec.model, "size": spec.size, "dataset": spec.dataset,
            "padding": spec.padding, "batch_size": spec.batch_size, "seq_len": spec.seq_len, "dropout": spec.dropout,
            "nproc": spec.nproc}


def key_of(fields: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _paths(folder: str, key: str) -> tuple[str, str]:
    return os.path.join(folder, f"{key}.bin"), os.path.join(folder, f"{key}.json")


def load(folder: str, fields: dict[str, Any], programs: str | None = None) -> str:
    """Load the artifacts stored for these fields' key into torch's caches (a precompiled loss they carry into
    ``programs``, the folder the job's ``tcbench.job.precompiled`` reads); what happened, in words ("loaded …",
    "none stored …", "refused: …")."""
    import torch

    key = key_of(fields)
    data_path, head_path = _paths(folder, key)
    if not os.path.exists(data_path):
        return f"none stored for key {key}"
    try:
        with open(head_path, encoding="utf-8") as f:
            head = json.load(f)
        with open(data_path, "rb") as f:
            data = f.read()
    except (OSError, ValueError) as exc:
        return _refused(key, f"it cannot be read ({type(exc).__name__}: {exc})", data_path, head_path)
    want = json.loads(json.dumps(fields, default=str))   # as the header stores them
    stored = head.get("fields") if isinstance(head, dict) and isinstance(head.get("fields"), dict) else {}
    if not isinstance(head, dict) or head.get("key") != key or stored != want:
        differ = sorted(k for k in want if stored.get(k) != want[k]) or ["its key"]
        made = head.get("key") if isinstance(head, dict) else None
        why = (f"its header was edited: the fields it names differ from its key's in {', '.join(differ)}"
               if made == key else f"it was made for key {made or '?'} (it differs in {', '.join(differ)})")
        return _refused(key, why, data_path, head_path)
    if head.get("bytes") != len(data) or head.get("sha256") != hashlib.sha256(data).hexdigest():
        return _refused(key, "it is not the one its header describes (truncated or replaced)", data_path, head_path)
    try:
        program, data = _program_of(data)
    except (ValueError, struct.error) as exc:
        return _refused(key, f"its precompiled loss cannot be read ({type(exc).__name__})", data_path, head_path)
    if program is not None and programs is not None:   # where the job's compile looks for it
        from tcbench.job import precompiled

        precompiled.install(programs, *program)
    try:
        info = torch.compiler.load_cache_artifacts(data) if data else None
    except Exception as exc:  # noqa: BLE001 - torch could not read them: the job compiles as if none were stored
        return _refused(key, f"torch could not load it ({type(exc).__name__}: {str(exc)[:200]})", data_path,
                        head_path)
    return f"loaded {key} ({_count(info) if info is not None else 'no cache artifacts'}" + (
        ", and the precompiled loss)" if program is not None else ")")


def _refused(key: str, why: str, *paths: str) -> str:
    """A refused artifact, set aside (renamed ``<key>.rejected-<time>.*``: tcbench made it) so that no later job
    refuses it again and this one's compile is kept in its place; what happened, in words."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    moved = []
    for path in paths:
        if os.path.exists(path):
            root, ext = os.path.splitext(path)
            try:
                os.replace(path, f"{root}.rejected-{stamp}{ext}")
                moved.append(f"{root}.rejected-{stamp}{ext}")
            except OSError:
                pass
    where = (f"; set aside as {os.path.basename(moved[0]).rsplit('.', 1)[0]}.* in {os.path.dirname(moved[0])} "
             "(delete it when done looking)" if moved else "; it could not be set aside: delete "
             + " and ".join(paths))
    return f"refused: the artifact stored for key {key}: {why}{where}"[:600]


def save(folder: str, fields: dict[str, Any], program: tuple[dict[str, Any], bytes] | None = None) -> str:
    """Save what this process compiled (or loaded from its caches) under these fields' key; what happened. With
    ``program`` (torch ≥ 2.14: the precompiled loss's header and bytes, ``tcbench.job.precompiled``), the artifact
    carries it first: a job on an empty cache then loads the loss instead of compiling it (an ``aot_compile`` never
    reads the AOTAutograd entries torch's cache artifacts hold)."""
    import torch

    key = key_of(fields)
    got = torch.compiler.save_cache_artifacts()
    cache, info = (got[0], got[1]) if got is not None and got[0] else (b"", None)
    if not cache and program is None:
        return "nothing compiled to save"
    data = cache if program is None else _with_program(program, cache)
    write(folder, {"key": key, "fields": fields, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()},
          data)
    return f"saved {key} ({_count(info) if info is not None else 'no cache artifacts'}" + (
        ", and the precompiled loss)" if program is not None else ")")


PROGRAM = b"tcbench-program-1\n"   # an artifact's bytes that start with a precompiled loss (``save``)


def _with_program(program: tuple[dict[str, Any], bytes], cache: bytes) -> bytes:
    """The artifact's bytes: ``PROGRAM``, the program's header (JSON) and bytes, each after its length, then torch's
    cache artifacts. In the bytes, not the header: a team's store keeps an artifact's key, fields and bytes only."""
    head = json.dumps(program[0], default=str).encode()
    return PROGRAM + struct.pack(">QQ", len(head), len(program[1])) + head + program[1] + cache


def _program_of(data: bytes) -> tuple[tuple[dict[str, Any], bytes] | None, bytes]:
    """(the program's header and bytes, or None; torch's cache artifacts) of an artifact's bytes."""
    if not data.startswith(PROGRAM):
        return None, data
    at = len(PROGRAM) + 16
    n_head, n_program = struct.unpack(">QQ", data[len(PROGRAM):at])
    head = json.loads(data[at:at + n_head])
    return (head, data[at + n_head:at + n_head + n_program]), data[at + n_head + n_program:]


def write(folder: str, head: dict[str, Any], data: bytes) -> None:
    """The file pair of one artifact (its header and its bytes), each replaced atomically."""
    os.makedirs(folder, mode=0o700, exist_ok=True)
    data_path, head_path = _paths(folder, head["key"])
    for path, payload, mode in ((data_path, data, "wb"), (head_path, json.dumps(head, default=str), "w")):
        tmp = f"{path}.{os.getpid()}"
        with open(tmp, mode) as f:
            f.write(payload)
        os.replace(tmp, path)   # atomic: a reader sees the old file or the new one, never half of one


def read(folder: str, key: str) -> tuple[dict[str, Any], bytes] | None:
    """(header, bytes) of the artifact kept for ``key`` in ``folder``, when both files are there and agree with each
    other (size and sha256); None otherwise."""
    data_path, head_path = _paths(folder, key)
    try:
        with open(head_path, encoding="utf-8") as f:
            head = json.load(f)
        with open(data_path, "rb") as f:
            data = f.read()
    except (OSError, ValueError):
        return None
    if not isinstance(head, dict) or head.get("key") != key or head.get("bytes") != len(data) \
            or head.get("sha256") != hashlib.sha256(data).hexdigest():
        return None
    return head, data


def _count(info: Any) -> str:
    """``CacheInfo``'s artifacts per kind, in words."""
    kinds = getattr(info, "artifacts", None)
    if not isinstance(kinds, dict):
        return "artifacts"
    return ", ".join(f"{len(v)} {k}" for k, v in kinds.items() if v) or "no artifacts"
