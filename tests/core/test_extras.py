"""JobResult.extra is typed (JobExtras); JSON is only how the store keeps it."""

from __future__ import annotations

import json

from tcbench import JobExtras, JobResult, JobSpec, Store
from tcbench.core.extras import AllReduceSummary, CompilePhases, CompilerSettings, NoiseScale, RankEnd, SchedTimes
from tcbench.store.history import get_run

FULL = JobExtras(
    launcher="fork", phase="measuring", n_params=1234, flops_per_step=5.5e6, tokenizer="gpt2 (shipped)",
    compiler=CompilerSettings(backend="inductor", mode="default", precision="fp32", debug=False),
    probe={"flops": 1e11, "source": "matmul probe"}, world_size=2, dist_backend="gloo",
    allreduce_steps=[[2, 400, 0.01, 2]],
    allreduce=AllReduceSummary(bytes_per_step=400, ms_median=10.0, ms_q1=9.0, ms_q3=11.0, buckets=2, steps=1,
                               share_of_step=0.1),
    rank_ends={"1": RankEnd(status="failed", error="ValueError: x")},
    counters_after_warmup={"compiles": 1}, counters={"compiles": 2, "graph_breaks": 0},
    compile_phases=CompilePhases(compile_dynamo_s=0.5, aot_cache_hits=0),
    diagnostics={"entries": [], "summary": "no graph break"},
    sched=SchedTimes(wall_s=2.0, cpu_s=3.5, wait_s=0.1, steal_share=None, cpus=[1]),
    eval_loss_initial=1.5, eval_losses_initial=[1.0, 2.0], eval_loss_initial_se=0.5, eval_loss=1.25,
    eval_losses=[1.25], noise_samples=[{"small_sq": 1.0, "big_sq": 0.5}],
    noise_scale=NoiseScale(b_simple=10.0, low=5.0, high=None, tr_sigma=1.0, g2=0.1, batch_size=8, micro_batch=4,
                           steps=4, run_id=3),
    traceback="Traceback ...", spooled="/tmp/x.jsonl", store_artifacts="kept abc in the store")


def test_every_field_round_trips_through_json_with_its_type():
    again = JobExtras.from_json(FULL.to_json())
    assert again == FULL
    assert isinstance(again.rank_ends["1"], RankEnd) and isinstance(again.noise_scale, NoiseScale)
    assert isinstance(again.compile_phases, CompilePhases) and again.sched.cpus == [1]


def test_only_what_the_job_set_is_stored():
    assert JobExtras().to_dict() == {}
    assert JobExtras(eval_loss=0.5, launcher="spawn").to_dict() == {"eval_loss": 0.5, "launcher": "spawn"}


def test_a_stored_key_this_version_does_not_know_is_left_out():
    stored = {"eval_loss": 0.5, "a_key_from_another_version": 1, "rank_ends": {"2": {"status": "ok", "extra": 1}}}
    extras = JobExtras.from_dict(stored)
    assert extras.eval_loss == 0.5 and extras.rank_ends == {"2": RankEnd(status="ok")}
    assert JobExtras.from_json(None) == JobExtras() == JobExtras.from_json("")


def test_a_stored_run_reads_back_its_typed_extras(tmp_path):
    store = Store(tmp_path / "s.db")
    spec = JobSpec(model="gpt2", size="tiny", steps=3, warmup_steps=1)
    rid = store.insert_run(spec)
    store.finish_run(JobResult(spec=spec, status="ok", run_id=rid, extra=FULL))
    assert get_run(rid, store).extra == FULL
    raw = store.query("SELECT extra_json FROM runs WHERE run_id = :r", {"r": rid})["extra_json"][0]
    assert json.loads(raw)["noise_scale"]["b_simple"] == 10.0   # plain JSON in the store


def test_every_figure_reads_as_a_declared_attribute_of_the_result():
    """No ``__getattr__``: each figure is a property a reader (and a type checker) finds on JobResult."""
    import dataclasses

    from tcbench.core.results import FIGURE_NAMES, JobFigures, JobResult
    from tcbench.core.spec import JobSpec

    assert "__getattr__" not in vars(JobResult)
    assert all(isinstance(vars(JobResult).get(n), property) for n in FIGURE_NAMES)
    res = JobResult(spec=JobSpec(), status="ok", figures=JobFigures(median_step_s=0.25, noisy=True))
    assert (res.median_step_s, res.noisy, res.mfu) == (0.25, True, None)
    assert {f.name for f in dataclasses.fields(JobResult)}.isdisjoint(FIGURE_NAMES)   # still one list of fields
