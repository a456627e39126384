"""A team's compile artifacts through the store (tcbench.runner.artifacts): a compiled job's artifacts go into the
store, and a cache="artifacts" job on a machine without them gets them back from it. Files and store only (the
job's side, loading them into torch, is tests/job/test_inductor_phases.py)."""

from __future__ import annotations

import hashlib
from types import SimpleNamespace

import tcbench as tc
from tcbench.job import artifacts as files
from tcbench.runner import artifacts as team

SPEC = tc.JobSpec(backend="inductor", cache="artifacts")


def _artifact(key: str = "abc123") -> tuple[dict, bytes]:
    data = b"compiled code" * 100
    fields = {"torch": "2.9.0+cpu", "target": ["AVX512"], **files.spec_fields(SPEC)}
    return {"key": key, "fields": fields, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}, data


def test_a_job_artifacts_reach_the_store_and_a_new_machine_gets_them_back(tmp_path, monkeypatch, store):
    monkeypatch.setenv("TCBENCH_HOME", str(tmp_path / "mine"))
    head, data = _artifact()
    files.write(team.folder(), head, data)
    assert not store.shared and team.keep(store, SimpleNamespace(artifact_key="abc123")) == ""   # its own SQLite file
    assert team.fetch(store, SPEC) == ""
    monkeypatch.setattr(tc.Store, "shared", property(lambda self: True))   # as a PostgreSQL store is
    assert team.keep(store, SimpleNamespace(artifact_key="abc123")) == "kept abc123 in the store"
    assert team.keep(store, SimpleNamespace(artifact_key="abc123")) == "the store has abc123 already"
    assert team.keep(store, SimpleNamespace(artifact_key=None)) == ""
    assert "no readable artifact for key zzz" in team.keep(store, SimpleNamespace(artifact_key="zzz"))

    monkeypatch.setenv("TCBENCH_HOME", str(tmp_path / "teammate"))   # another machine: nothing local
    assert files.read(team.folder(), "abc123") is None
    assert team.fetch(store, SPEC) == "1 compile artifact(s) in the store for these fields, 1 new to this machine"
    assert files.read(team.folder(), "abc123") == (head, data)
    assert team.fetch(store, SPEC) == "1 compile artifact(s) in the store for these fields, 0 new to this machine"
    other = tc.JobSpec(backend="inductor", cache="artifacts", batch_size=4)
    assert team.fetch(store, other).startswith("0 compile artifact(s)")


def test_a_store_that_cannot_be_read_leaves_the_job_to_its_own_artifacts(tmp_path, monkeypatch):
    monkeypatch.setenv("TCBENCH_HOME", str(tmp_path))

    class Broken:
        readonly, shared = False, True

        def artifacts_for(self, wanted):
            raise RuntimeError("server gone")

        def put_artifact(self, head, data):
            raise RuntimeError("server gone")

    assert team.fetch(Broken(), SPEC) == "the store's compile artifacts could not be read (RuntimeError: server gone)"
    files.write(team.folder(), *_artifact())
    assert team.keep(Broken(), SimpleNamespace(artifact_key="abc123")).endswith("(RuntimeError: server gone)")
