"""Compile artifacts are loaded only for their own key: a missing one says so, a foreign, stale or truncated one is
refused before torch sees its bytes (tcbench.job.artifacts). The real save and load: tests/job/test_inductor_phases.py."""

from __future__ import annotations

import hashlib
import json

import pytest

from tcbench.job import artifacts

FIELDS = {"torch": "2.9.0", "python": "3.11.7", "device": "cpu", "target": ["AVX2"], "backend": "inductor",
          "compile_mode": "default", "precision": "fp32", "model": "gpt2", "size": "tiny", "dataset": "builtin",
          "padding": "max_length", "batch_size": 8, "seq_len": 64, "dropout": None, "nproc": 1}


def _store(folder, name: str, fields: dict, data: bytes = b"artifact bytes", key: str | None = None) -> None:
    """The file pair ``name``.bin / ``name``.json, its header saying ``key`` (default: ``name``)."""
    (folder / f"{name}.bin").write_bytes(data)
    (folder / f"{name}.json").write_text(json.dumps({"key": key or name, "fields": fields, "bytes": len(data),
                                                     "sha256": hashlib.sha256(data).hexdigest()}))


@pytest.fixture(autouse=True)
def _never_loads(monkeypatch):
    import torch

    def refused(data):
        raise AssertionError("torch was handed an artifact that should have been refused")

    monkeypatch.setattr(torch.compiler, "load_cache_artifacts", refused)


def test_the_key_changes_with_every_field_it_is_made_of():
    key = artifacts.key_of(FIELDS)
    assert len(key) == 16 and artifacts.key_of(dict(FIELDS)) == key
    for name, other in (("torch", "2.10.0"), ("target", ["AVX512"]), ("seq_len", 128), ("compile_mode", "max-autotune")):
        assert artifacts.key_of({**FIELDS, name: other}) != key, name


def test_none_stored_says_so(tmp_path):
    assert artifacts.load(str(tmp_path), FIELDS) == f"none stored for key {artifacts.key_of(FIELDS)}"


def test_a_foreign_artifact_under_this_key_is_refused_by_its_key(tmp_path):
    key = artifacts.key_of(FIELDS)
    foreign = {**FIELDS, "torch": "2.8.0"}
    _store(tmp_path, key, foreign, key=artifacts.key_of(foreign))   # another key's file renamed to this one
    told = artifacts.load(str(tmp_path), FIELDS)
    assert told.startswith("refused:") and artifacts.key_of(foreign) in told and "torch" in told


def test_a_header_whose_fields_differ_is_refused_even_with_the_right_key(tmp_path):
    key = artifacts.key_of(FIELDS)
    _store(tmp_path, key, {**FIELDS, "seq_len": 32})
    told = artifacts.load(str(tmp_path), FIELDS)
    assert told.startswith("refused:") and "its header was edited" in told and "seq_len" in told
    assert f"made for key {key}" not in told   # never "made for" the very key it is stored under
    # set aside, so the next job compiles and keeps its own instead of refusing the same file again
    assert "set aside as" in told and artifacts.load(str(tmp_path), FIELDS) == f"none stored for key {key}"
    assert sorted(p.suffix for p in tmp_path.glob(f"{key}.rejected-*")) == [".bin", ".json"]


def test_a_truncated_or_replaced_artifact_is_refused(tmp_path):
    key = artifacts.key_of(FIELDS)
    _store(tmp_path, key, FIELDS)
    (tmp_path / f"{key}.bin").write_bytes(b"artifact")   # cut short after its header was written
    assert "truncated or replaced" in artifacts.load(str(tmp_path), FIELDS)
    _store(tmp_path, key, FIELDS)
    (tmp_path / f"{key}.json").write_text("{not json")
    assert artifacts.load(str(tmp_path), FIELDS).startswith("refused:")


def test_bytes_torch_cannot_read_are_refused_and_the_job_goes_on(tmp_path, monkeypatch):
    import torch

    def broken(data):
        raise ValueError("not a cache artifact")

    monkeypatch.setattr(torch.compiler, "load_cache_artifacts", broken)
    _store(tmp_path, artifacts.key_of(FIELDS), FIELDS)
    told = artifacts.load(str(tmp_path), FIELDS)
    assert told.startswith("refused:") and "torch could not load it" in told and "not a cache artifact" in told
