"""A real Inductor job reports where its compile latency went (Dynamo, AOTAutograd, Inductor) and what each phase
found in its cache; an eager job reports none. Behaviour, not timings: the phases happen inside the warmup steps,
so they cannot add up to more than those steps took, and they are most of the compile latency."""

from __future__ import annotations

from pathlib import Path

import pytest

import tcbench as tc
from tcbench.core.results import COMPILE_PHASE_NAMES

pytestmark = pytest.mark.integration

# tiny GPT-2, the shared compile cache; dropout off, as notebook 07's, the compile search's and the step scope's jobs:
# one model graph, compiled cold once in a test run, not once per spec (issue 47)
SPEC = tc.JobSpec(backend="inductor", steps=6, warmup_steps=2, threads=1, dropout=0.0)


def test_an_inductor_job_reports_its_compile_phases_and_the_second_finds_them_cached(store):
    """On torch ≥ 2.14 the loss is compiled by aot_compile once and loaded by the next job, untraced, with no phases
    (tcbench.job.precompiled; tests/job/test_precompiled.py): the phases are those of the job that compiled it."""
    from tcbench.job import precompiled

    first, second = tc.run(SPEC, store=store), tc.run(SPEC, store=store)
    for r in (first, second):
        assert r.status == "ok", r.error
        if (r.precompiled or "").startswith("loaded"):
            assert all(getattr(r, n) is None for n in ("compile_dynamo_s", "compile_aot_s", "compile_backend_s"))
            continue
        phases = [r.compile_dynamo_s, r.compile_aot_s, r.compile_backend_s]
        assert all(p is not None and p >= 0 for p in phases) and r.compile_dynamo_s > 0, phases
        assert sum(phases) <= r.figures.warmup_s, (phases, r.figures.warmup_s)       # inside the warmup steps
        assert sum(phases) >= 0.5 * r.compile_latency_s, (phases, r.compile_latency_s)   # most of the latency
        assert r.aot_cache_hits + r.aot_cache_misses >= 1
        assert r.fx_cache_hits + r.fx_cache_misses >= 1 or r.precompiled.startswith("saved")
    if precompiled.torch_can():
        assert second.precompiled.startswith("loaded") and second.cache_state == "warm", second.precompiled
    else:
        assert second.precompiled.startswith("not used: torch"), second.precompiled
        assert second.aot_cache_hits >= 1 and second.aot_cache_misses == 0   # the first job filled the caches
        assert second.fx_cache_misses == 0 and second.cache_state == "warm", (second.fx_cache_misses,
                                                                              second.cache_state)
    # Inductor's vector-ISA check (a C++ build per ISA, seconds) was answered from the first job's record, also for
    # the compile artifacts' key, which lists the ISAs before the first step
    log = (Path(second.artifacts) / "worker.log").read_text()
    assert "vector ISA check replayed" in log, [line for line in log.splitlines() if "ISA" in line]


def test_an_eager_job_compiles_nothing(store):
    r = tc.run(tc.JobSpec(steps=4, warmup_steps=1), store=store)
    assert r.status == "ok" and all(getattr(r, n) is None for n in COMPILE_PHASE_NAMES)


def test_debug_writes_the_compile_trace_and_its_tlparse_report(store):
    """debug=True: torch's structured trace (TORCH_TRACE) in the run's folder, even in a job forked from a launcher
    that imported torch before, and tlparse's HTML report of it (tlparse is in the test extra)."""
    import dataclasses
    from pathlib import Path

    from tcbench.core.results import TRACE_DIR, TRACE_REPORT_DIR

    r = tc.run(dataclasses.replace(SPEC, steps=3, warmup_steps=1, debug=True), store=store)
    assert r.status == "ok", r.error
    logs = list((Path(r.artifacts) / TRACE_DIR).glob("*.log"))
    assert logs and any('"dynamo_start"' in p.read_text() for p in logs), logs
    page = Path(r.artifacts) / TRACE_REPORT_DIR / "index.html"
    assert page.is_file() and "compile" in page.read_text().lower()
    cmp = tc.Comparison(spec=SPEC, backends=["inductor"], results=[r], rounds=1)
    assert page.as_uri() in cmp.to_html(plotlyjs="cdn")   # the report links it


@pytest.fixture(scope="module")
def artifact_jobs(tmp_path_factory):
    """A compiled job that keeps its artifacts in a shared store, a cache="artifacts" job (a fresh, empty compile
    cache, as on a new machine) loading them from this machine's folder, then, with the folder's copy removed, one
    getting them from the store (a teammate's first job): three jobs that two tests read. The store is an SQLite
    file standing in for PostgreSQL (``shared``; tests/store covers both databases)."""
    import dataclasses

    from tcbench.runner import artifacts as team

    store = tc.Store(tmp_path_factory.mktemp("artifacts") / "t.db")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tc.Store, "shared", property(lambda self: True))
        first = tc.run(SPEC, store=store)
        assert first.status == "ok" and first.artifact_key, first.error
        head = (Path(team.folder()) / f"{first.artifact_key}.json").read_text()
        from_folder = tc.run(dataclasses.replace(SPEC, cache="artifacts"), store=store)
        in_store = store.artifacts_for({"model": SPEC.model, "batch_size": SPEC.batch_size})
        for ext in (".bin", ".json"):   # this machine forgets them: the teammate's first job
            (Path(team.folder()) / f"{first.artifact_key}{ext}").unlink()
        from_store = tc.run(dataclasses.replace(SPEC, cache="artifacts"), store=store)
    return dict(first=first, head=head, from_folder=from_folder, in_store=in_store, from_store=from_store)


def test_a_job_on_an_empty_cache_loads_the_artifacts_of_its_key_and_compiles_no_new_graph(artifact_jobs):
    """A shared-cache job keeps its compile artifacts under its key; a job with cache="artifacts" loads them first
    and then finds every graph in the caches: counters, not timings. The key is stored with both runs and shown in
    the summary's cache words."""
    import json

    first, loaded = artifact_jobs["first"], artifact_jobs["from_folder"]
    assert first.artifact_state.split()[0] in ("saved", "kept"), first.artifact_state
    head = json.loads(artifact_jobs["head"])
    assert head["key"] == first.artifact_key and head["fields"]["model"] == SPEC.model
    assert loaded.status == "ok" and loaded.cache_state == "artifacts", loaded.error
    assert loaded.artifact_key == first.artifact_key, (loaded.artifact_key, first.artifact_key)
    assert loaded.artifact_state.startswith("loaded"), loaded.artifact_state
    assert loaded.aot_cache_misses == 0 and loaded.fx_cache_misses == 0
    # torch ≥ 2.14: the artifacts carry the precompiled loss, loaded untraced (nothing looked up in the caches)
    assert loaded.aot_cache_hits >= 1 or loaded.precompiled.startswith("loaded"), loaded.precompiled
    cmp = tc.Comparison(spec=SPEC, backends=["inductor"], results=[loaded], rounds=1)
    assert f"compile artifacts loaded {first.artifact_key}" in cmp.summary().compile_cache[0]


def test_a_teammate_without_the_artifacts_gets_them_from_the_store(artifact_jobs):
    """A compiled job keeps its artifacts in a shared store; on a machine that has none in its folder (removed), a
    cache="artifacts" job gets them from the store, loads them and compiles no new graph: counters, not timings."""
    loaded = artifact_jobs["from_store"]
    assert artifact_jobs["in_store"]
    assert loaded.status == "ok" and "1 new to this machine" in loaded.extra.store_artifacts, loaded.extra
    assert loaded.artifact_state.startswith("loaded") and loaded.fx_cache_misses == 0 and loaded.aot_cache_misses == 0


def test_blocks_scope_compiles_the_repeated_block_once_however_many_there_are(store):
    """compile_scope="blocks" compiles GPT-2's block, not the model: tiny (2 blocks) and small (4 blocks) compile
    the same number of graphs (one for the block, shared by every block, and the optimizer's), and the result names
    the blocks. Counters, not timings."""
    import dataclasses

    jobs = {size: tc.run(dataclasses.replace(SPEC, size=size, compile_scope="blocks"), store=store)
            for size in ("tiny", "small")}
    for size, blocks in (("tiny", 2), ("small", 4)):
        r = jobs[size]
        assert r.status == "ok", r.error
        assert r.compiled_regions == f"transformer.h: {blocks} × GPT2Block" and r.final_loss < 9
    assert jobs["tiny"].extra.counters["compiles"] == jobs["small"].extra.counters["compiles"] >= 1
    assert jobs["tiny"].extra.compiler.scope == "blocks"


def test_step_scope_compiles_the_whole_step_and_learns_as_the_model_scope_does(store):
    """compile_scope="step": one compiled call per training step (the backward where Dynamo breaks the graph, the
    optimizer step compiled after it, compile_optimizer=True), named in the result; its losses are the model scope's
    (dropout off)."""
    import dataclasses

    spec = dataclasses.replace(SPEC, dropout=0.0, compile_optimizer=True)
    step = tc.run(dataclasses.replace(spec, compile_scope="step"), store=store)
    model = tc.run(spec, store=store)
    assert step.status == "ok" and model.status == "ok", step.error
    assert step.compiled_regions == "the training step (forward, loss, backward, optimizer step)"
    assert step.fx_cache_hits + step.fx_cache_misses >= 3   # forward, backward and the optimizer step, at least
    assert [round(a, 4) for _, a in step.losses()] == [round(b, 4) for _, b in model.losses()]


def test_a_job_at_another_thread_count_never_loads_the_kernels_compiled_for_one(store, tmp_path, monkeypatch):
    """Inductor bakes the OpenMP thread count into its CPU kernels and torch 2.9's FX graph cache key leaves it out:
    a 2-thread job served the kernels of a 1-thread job ran 25-50 % slower than itself. The shared cache has a folder
    per thread count (and CPU), and the compile-artifact key holds the thread count: after a 1-thread job of the same
    spec, a 2-thread job finds nothing in the caches, and another 1-thread job finds everything (so the cache
    works: only the thread count kept the 2-thread job from it). The cache's keying does not depend on the model: the
    examples' small CNN compiles cold in a third of tiny GPT-2's time (its two cold compiles were 2.5 of this test's
    2.7 minutes)."""
    monkeypatch.setenv("TCBENCH_HOME", str(tmp_path / "home"))   # an empty compile cache
    one = SPEC.replace(model="examples.cnn:small_cnn", dataset="examples.cnn:images", steps=3, warmup_steps=1)
    first, two, again = tc.run(one, store=store), tc.run(one.replace(threads=2), store=store), tc.run(one, store=store)
    assert [r.status for r in (first, two, again)] == ["ok"] * 3, (first.error, two.error, again.error)
    assert first.fx_cache_misses >= 1 and first.aot_cache_misses >= 1
    assert two.fx_cache_hits == 0 and two.aot_cache_hits == 0 and two.fx_cache_misses >= 1, two.extra
    assert again.fx_cache_misses == 0 and again.aot_cache_hits >= 1
    assert first.artifact_key == again.artifact_key != two.artifact_key
    folders = sorted(p.name for p in (tmp_path / "home" / "cache").iterdir())
    assert len(folders) == 2 and folders[0].startswith("threads-1-") and folders[1].startswith("threads-2-"), folders
