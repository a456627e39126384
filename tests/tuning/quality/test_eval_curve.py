"""The held-out evaluations every ``eval_every`` steps that time to quality reads: the spec's rule, the runner's
record of them, the store's round trip, and a real job's curve."""

from __future__ import annotations

import pytest

import tcbench as tc
from tcbench.core.extras import EvalPoint, JobExtras
from tcbench.core.results import JobResult
from tcbench.job.protocol import Eval
from tcbench.runner.inbox import handle


def test_eval_every_needs_held_out_batches():
    with pytest.raises(tc.SpecError, match="eval_every=4 .*0 when eval_batches=0"):
        tc.JobSpec(eval_every=4)
    with pytest.raises(tc.SpecError, match="eval_every"):
        tc.JobSpec(eval_batches=2, eval_every=-1)
    assert tc.JobSpec(eval_batches=2, eval_every=4).eval_every == 4


def test_the_runner_keeps_each_point_of_the_curve_apart_from_the_final_loss():
    res = JobResult(spec=tc.JobSpec(eval_batches=2, eval_every=2), status="running", run_id=1)
    for msg in (Eval(eval_loss=3.0, losses=[2.9, 3.1], when="during", steps=2, samples=16, wall_s=1.5),
                Eval(eval_loss=2.5, losses=[2.4, 2.6], when="during", steps=4, samples=32, wall_s=2.5),
                Eval(eval_loss=2.4, losses=[2.3, 2.5], when="final")):
        assert handle(msg, res, [], lambda e: None, "eager#0") is None
    assert res.extra.eval_curve == [EvalPoint(2, 16, 1.5, 3.0), EvalPoint(4, 32, 2.5, 2.5)]
    assert res.extra.eval_loss == 2.4
    back = JobExtras.from_json(res.extra.to_json())   # what the store keeps, and reads back typed
    assert back.eval_curve == res.extra.eval_curve and isinstance(back.eval_curve[0], EvalPoint)


@pytest.mark.integration
def test_a_real_job_sends_its_curve_with_steps_samples_and_a_clock_without_the_evaluations(store):
    spec = tc.JobSpec(model="gpt2", size="tiny", batch_size=4, seq_len=32, steps=8, warmup_steps=2, threads=1,
                      eval_batches=2, eval_every=3)
    res = tc.run(spec, store=store)
    assert res.ok, res.error
    curve = res.extra.eval_curve
    assert [(p.steps, p.samples) for p in curve] == [(3, 12), (6, 24)]
    assert 0 < curve[0].wall_s < curve[1].wall_s and all(p.loss > 0 for p in curve)
    assert tc.get_run(res.run_id, store=store).extra.eval_curve == curve   # stored with the run
