"""The compiled loss loaded without tracing (torch ≥ 2.14, ``tcbench.job.precompiled``): a warm job loads it and
learns what a cold one learned; a stale program is refused and compiled anew, never run; torch 2.9 compiles as
before and says why."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

import tcbench as tc
from tcbench.core.results import JobFigures, JobResult, compile_cache_text

SPEC = tc.JobSpec(backend="inductor", steps=6, warmup_steps=2, threads=1, dropout=0.0)   # test_inductor_phases'


def _torch_can() -> bool:
    from tcbench.job import precompiled

    return precompiled.torch_can()


def test_where_the_loss_can_be_loaded_precompiled():
    from tcbench.job import precompiled

    if not precompiled.torch_can():
        assert "cannot load a compiled training step" in precompiled.unavailable(SPEC)
        return
    assert precompiled.unavailable(SPEC) == ""
    for field, value in (("compile_scope", "blocks"), ("precision", "bf16"), ("padding", "longest"), ("nproc", 2)):
        assert f"{field}={value!r}" in precompiled.unavailable(dataclasses.replace(SPEC, **{field: value}))


def test_the_compile_line_says_whether_the_loss_was_loaded_or_traced():
    def job(state: str | None) -> JobResult:
        return JobResult(spec=SPEC, status="ok", figures=JobFigures(aot_cache_hits=0, aot_cache_misses=0,
                                                                    precompiled=state))

    loaded, saved = "loaded 0123 (the loss, forward and backward, not traced)", "saved 0123 (compiled with aot_compile)"
    assert "the loss loaded precompiled, not traced" in compile_cache_text([job(loaded), job(loaded)])
    mixed = compile_cache_text([job(saved), job(loaded)])
    assert "loaded precompiled in 1 of 2 jobs" in mixed and "precompiled loss saved 0123" in mixed
    assert "Dynamo traced" in compile_cache_text([job("not used: torch 2.9.0 cannot …"), job(None)])


def test_a_program_whose_header_names_other_fields_is_refused_before_it_is_loaded(tmp_path):
    from tcbench.job.precompiled import PrecompiledLoss

    program = PrecompiledLoss(None, {"batch_size": 8}, str(tmp_path), jit=lambda: None)
    (tmp_path / f"{program.key}.bin").write_bytes(b"not a program")
    (tmp_path / f"{program.key}.json").write_text(json.dumps({"key": program.key,
                                                                "fields": {**program.fields, "batch_size": 4}}))
    assert program._loaded() is None
    assert program.state.startswith(f"refused {program.key}: it was made for other fields (batch_size)")
    assert not (tmp_path / f"{program.key}.bin").exists()   # set aside: the job's own compile takes its place
    assert len(list(tmp_path.glob(f"{program.key}.rejected-*.bin"))) == 1


def _losses(r: JobResult) -> list[float]:
    return [s.loss for s in r.records]


def _programs(*specs: tc.JobSpec) -> list[Path]:
    """The shared cache's precompiled program of each of ``specs`` (their model, shapes and settings), in order."""
    import re

    from tcbench.job.artifacts import spec_fields
    from tcbench.job.precompiled import key_fields

    source = key_fields({})["precompiled"]   # this module's: programs of an older one are other keys
    heads = [json.loads(h.read_text()) | {"path": h.with_suffix(".bin")}
             for h in Path(os.environ["TCBENCH_HOME"]).glob("cache/**/tcbench-precompiled/*.json")
             if re.fullmatch(r"[0-9a-f]{16}", h.stem)]   # not one set aside (<key>.rejected-<time>.json)
    heads = [h for h in heads if h["fields"].get("precompiled") == source]
    found = []
    for spec in specs:
        want = json.loads(json.dumps(spec_fields(spec)))
        paths = [h["path"] for h in heads if {k: h["fields"].get(k) for k in want} == want and h["fields"]["threads"]
                 == spec.threads]
        assert len(paths) == 1, (spec, paths)
        found.append(paths[0])
    return found


@pytest.mark.integration
@pytest.mark.skipif(not _torch_can(), reason="torch < 2.14 cannot load a compiled training step")
def test_a_warm_job_loads_the_loss_without_tracing_and_learns_what_a_cold_one_learned(store):
    cold = tc.run(dataclasses.replace(SPEC, cache="cold"), store=store)   # an empty cache of its own: compiles
    warm = [tc.run(SPEC, store=store) for _ in range(2)]                  # the second loads, whatever the first did
    for r in (cold, *warm):
        assert r.status == "ok", r.error
    assert cold.precompiled.startswith("saved") and cold.compile_dynamo_s > 0, (cold.precompiled, cold.figures)
    assert warm[1].precompiled.startswith("loaded"), warm[1].precompiled
    assert warm[1].extra.counters["compiles"] == 0 and warm[1].extra.counters["frames_captured"] == 0
    assert warm[1].compile_dynamo_s is None and warm[1].cache_state == "warm"
    assert _losses(warm[1]) == pytest.approx(_losses(cold), rel=1e-6, abs=1e-6)   # loss parity, step by step


@pytest.mark.integration
@pytest.mark.skipif(not _torch_can(), reason="torch < 2.14 cannot load a compiled training step")
def test_a_stale_program_is_refused_and_compiled_anew_never_run(store):
    """A program made for batch 2, put under the key (and header) of SPEC's batch 8: its shape guards fail at the
    first call, so the job refuses it, sets it aside and compiles the loss as torch.compile does; it learns what the
    loaded program learns."""
    other = tc.run(dataclasses.replace(SPEC, batch_size=2), store=store)
    loaded = tc.run(SPEC, store=store)
    assert other.status == loaded.status == "ok", (other.error, loaded.error)
    mine, other_batch = _programs(SPEC, dataclasses.replace(SPEC, batch_size=2))
    mine.write_bytes(other_batch.read_bytes())
    stale = tc.run(SPEC, store=store)
    assert stale.status == "ok", stale.error
    assert stale.precompiled.startswith("refused") and "guards failed" in stale.precompiled, stale.precompiled
    assert "size mismatch at index 0. expected 2, actual 8" in stale.precompiled, stale.precompiled
    assert stale.extra.counters["compiles"] >= 1   # compiled anew in the job
    assert list(mine.parent.glob(f"{mine.stem}.rejected-*.bin"))
    assert _losses(stale) == pytest.approx(_losses(loaded), rel=1e-5, abs=1e-5)


def test_compile_artifacts_carry_the_precompiled_loss_to_a_machine_without_it(tmp_path):
    """A team's store keeps an artifact's key, fields and bytes: the program travels in the bytes, and a
    cache="artifacts" job's load installs it where its compile looks (torch's own cache artifacts: none here)."""
    from tcbench.job import artifacts
    from tcbench.job.precompiled import PrecompiledLoss

    fields = {"model": "gpt2", "batch_size": 8, "loss": "precompiled"}
    program = PrecompiledLoss(None, fields, str(tmp_path / "mine"), jit=lambda: None)
    said = artifacts.save(str(tmp_path / "artifacts"), fields, ({"key": program.key, "fields": program.fields},
                                                                b"the program's bytes"))
    assert said.endswith("and the precompiled loss)"), said
    head, data = artifacts.read(str(tmp_path / "artifacts"), artifacts.key_of(fields))
    assert set(head) == {"key", "fields", "bytes", "sha256"}   # what a team's store keeps
    said = artifacts.load(str(tmp_path / "artifacts"), fields, str(tmp_path / "theirs"))
    assert said == f"loaded {artifacts.key_of(fields)} (no cache artifacts, and the precompiled loss)", said
    assert (tmp_path / "theirs" / f"{program.key}.bin").read_bytes() == b"the program's bytes"
    assert json.loads((tmp_path / "theirs" / f"{program.key}.json").read_text())["fields"] == json.loads(
        json.dumps(program.fields))
