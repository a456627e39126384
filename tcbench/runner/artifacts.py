"""A team's compile artifacts through the store: a compiled job's artifacts (``tcbench.job.artifacts``, a file pair
per key in ``$TCBENCH_HOME/compile-artifacts``) are also kept in the store it ran for when that is a shared one
(PostgreSQL, where every teammate's tcbench reads them; an SQLite store's folder keeps them already), and a
``cache="artifacts"`` job first gets the store's artifacts for its own fields into that folder. The job's key still
decides: an artifact made on another machine (another torch, CPU or GPU) has another key and is never loaded. No
torch here: bytes and headers only."""

from __future__ import annotations

from typing import Any

from tcbench.host.paths import home, private_dir
from tcbench.job import artifacts as files


def folder() -> str:
    """Where this machine keeps compile artifacts (the job reads ``$TCBENCH_ARTIFACTS``, set to this)."""
    return str(private_dir(home() / "compile-artifacts", tighten=True))


def fetch(store: Any, spec: Any) -> str:
    """Before a ``cache="artifacts"`` job: the store's artifacts made for this spec's fields, written into the local
    folder where it has none for their key; what happened, in words ("" for an SQLite store: nothing is kept there)."""
    if not store.shared:
        return ""
    try:
        rows = store.artifacts_for(files.spec_fields(spec))
    except Exception as exc:  # noqa: BLE001 - the job then uses what this machine has
        return f"the store's compile artifacts could not be read ({type(exc).__name__}: {exc})"[:300]
    new = 0
    for head, data in rows:
        if files.read(folder(), head["key"]) is None:
            files.write(folder(), head, data)
            new += 1
    return f"{len(rows)} compile artifact(s) in the store for these fields, {new} new to this machine"


def keep(store: Any, result: Any) -> str:
    """After a compiled job: its artifacts (as this machine keeps them for its key) kept in a shared store
    (PostgreSQL) too, unless it has that key already; what happened, in words ("" when the job has no artifact key
    or the store is this machine's own SQLite file, beside which the folder already keeps them)."""
    key = result.artifact_key
    if not key or not store.shared:
        return ""
    got = files.read(folder(), key)
    if got is None:
        return f"no readable artifact for key {key} on this machine to keep in the store"
    try:
        return (f"kept {key} in the store" if store.put_artifact(*got)
                else f"the store has {key} already" if not store.readonly else "the store is read-only")
    except Exception as exc:  # noqa: BLE001 - the run itself is measured and stored; only the sharing failed
        return f"{key} could not be kept in the store ({type(exc).__name__}: {exc})"[:300]
