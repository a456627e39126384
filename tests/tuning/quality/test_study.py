"""time_to_quality against a fake runner whose loss falls with the samples seen and whose clock runs at a known
speed per candidate: the default target, the refusals before any job, the scores and the paired ratios."""

from __future__ import annotations

import dataclasses
import math

import pytest

import tcbench as tc
from tcbench.core.extras import EvalPoint, NoiseScale
from tcbench.core.results import JobResult
from tcbench.tuning.quality.study import Candidate, time_to_quality

SPEC = tc.JobSpec(model="gpt2", size="tiny", batch_size=4, seq_len=32, steps=20, warmup_steps=2, threads=1)
SPEED = {"eager": 100.0, "inductor": 150.0}   # samples per second
HALF = {4: 40.0, 8: 60.0, 16: 90.0}                    # samples to halve the loss's distance to its floor, per batch


def _fake(calls: list, never_below: float | None = None):
    def run(job, observer=None, stop=None, store=None, comparison_id=None, round=0, name=None, label=""):
        calls.append((label, job.seed, job))
        curve, samples = [], 0
        jitter = 1 + 0.02 * ((job.seed * 7) % 5 - 2)   # seeds differ a little, the same in every candidate
        for step in range(1, job.steps + 1):
            samples += job.global_batch
            if job.eval_every and step % job.eval_every == 0:
                loss = 1.0 + 4.0 * 0.5 ** (samples / (HALF[job.batch_size] * jitter))
                if never_below is not None:
                    loss = max(loss, never_below)
                curve.append(EvalPoint(steps=step, samples=samples, wall_s=5.0 + samples / SPEED[job.backend] * jitter,
                                       loss=loss))
                if job.stop_at_loss is not None and loss <= job.stop_at_loss:
                    break
        res = JobResult(spec=job, status="ok", label=label,
                        cache_state="cold" if job.compiled and job.seed == 0 else "warm" if job.compiled else "")
        if job.compiled:
            res.figures = dataclasses.replace(res.figures, compile_latency_s=20.0 if job.seed == 0 else 4.0)
        res.extra.eval_curve = curve
        res.extra.eval_loss = 1.0 + 4.0 * 0.5 ** (samples / (HALF[job.batch_size] * jitter))   # the premise reads it
        if job.noise_micro_batches:   # a noise-scale job: its estimate, measured in the job's own precision
            res.extra.noise_scale = NoiseScale(b_simple=8.0, low=4.0, high=16.0, tr_sigma=1.0, g2=0.125,
                                               batch_size=job.batch_size, micro_batch=job.batch_size // 2, steps=9,
                                               precision=job.precision)
        if store is not None:   # stored as the runner stores a job: a resumed study reads it back
            res.run_id = store.insert_run(job, comparison_id, round, label)
            store.finish_run(res)
        return res
    return run


@pytest.fixture
def calls(monkeypatch):
    import tcbench.runner.process as runner

    out: list = []
    monkeypatch.setattr(runner, "run", _fake(out))
    return out


INDUCTOR = [Candidate("inductor", SPEC.replace(backend="inductor"))]


def test_the_default_target_is_the_references_loss_at_its_steps_and_compiling_gets_there_sooner(calls, store):
    res = time_to_quality(SPEC, INDUCTOR, seeds=3, eval_batches=2, store=store)
    assert [c[0] for c in calls[:3]] == ["native"] * 3                         # the reference runs first
    assert {c[2].eval_every for c in calls} == {2} and {c[2].steps for c in calls} == {60}   # 8 samples, 3x budget
    assert {c[2].stop_at_loss for c in calls[:3]} == {None}                   # the reference trains its budget
    assert {c[2].stop_at_loss for c in calls[3:]} == {res.target}             # the others end at the target
    assert all(r.curve[-1].loss <= res.target for r in res.runs if r.label == "inductor")
    by = res.table().set_index("candidate")
    assert (by.loc["inductor", "compile_s"], by.loc["inductor", "cold_compiles"]) == (4.0, 1)   # median; seed 0 cold
    assert by.loc["native", "compile_s"] is None or by.loc["native", "compile_s"] != by.loc["native", "compile_s"]
    expected = 1.0 + 4.0 * 0.5 ** (80 / 40.0)                                  # the seed-1 jitter is 0: the median
    assert res.target == pytest.approx(expected) and "median" in res.target_source
    row = res.table().set_index("candidate").loc["inductor"]
    assert row.speedup_low > 1.0 and row.samples_ratio == pytest.approx(1.0)  # sooner, with the same samples
    assert row.not_converged == 0 and len(res.runs) == 6
    row = store.comparison_row(res.comparison_id)
    assert row["kind"] == "time-to-quality" and row["status"] == "done"


def test_a_bigger_batch_needs_more_samples_and_the_ratio_says_how_many(calls, store):
    big = Candidate("inductor b8", SPEC.replace(backend="inductor", batch_size=8, lr=SPEC.lr * 2))
    res = time_to_quality(SPEC, [big], seeds=3, eval_batches=2, store=store)
    r = res.ratio("inductor b8", "samples")
    assert r.point == pytest.approx(80 / 120, rel=0.1) and r.high < 1.0       # fewer reference samples than its own


def test_a_target_the_reference_never_reaches_is_refused_before_the_other_candidates_run(monkeypatch, store):
    import tcbench.runner.process as runner

    seen: list = []
    monkeypatch.setattr(runner, "run", _fake(seen))
    with pytest.raises(tc.SpecError, match="target_loss=0.5 .*a loss the reference reaches"):
        time_to_quality(SPEC, INDUCTOR, seeds=3, eval_batches=2, target_loss=0.5, store=store)
    assert {label for label, _, _ in seen} == {"native"}


def test_two_runs_that_never_reach_the_target_invalidate_a_candidate(monkeypatch, store):
    import tcbench.runner.process as runner

    fake, stuck = _fake([]), _fake([], never_below=3.0)
    monkeypatch.setattr(runner, "run", lambda job, *a, **k: (stuck if job.backend == "inductor" else fake)(job, *a, **k))
    res = time_to_quality(SPEC, INDUCTOR, seeds=3, eval_batches=2, store=store)
    row = res.table().set_index("candidate").loc["inductor"]
    assert row.not_converged == 3 and math.isnan(row.time_to_target_s) and "did not reach the target" in row.note
    assert all(not r.reached and r.status == "ok" for r in res.runs if r.label == "inductor")   # kept


def _stop_after(monkeypatch, n: int):
    """The fake runner installed, with the user's Stop pressed once ``n`` jobs ran: (the jobs seen, the stop event,
    the fake itself, to run a resumed study without a stop)."""
    import threading

    import tcbench.runner.process as runner

    seen: list = []
    stop = threading.Event()
    fake = _fake(seen)

    def run(job, *a, **k):
        res = fake(job, *a, **k)
        if len(seen) == n:
            stop.set()
        return res
    monkeypatch.setattr(runner, "run", run)
    return seen, stop, fake


def test_a_stop_during_the_reference_keeps_its_runs_and_runs_no_other_candidate(monkeypatch, store):
    seen, stop, _ = _stop_after(monkeypatch, 1)   # the user presses Stop during the first reference run
    res = time_to_quality(SPEC, INDUCTOR, seeds=3, eval_batches=2, stop=stop, store=store)
    assert len(seen) == 1 and [r.label for r in res.runs] == ["native"] and "stopped" in res.target_source
    assert store.comparison_row(res.comparison_id)["status"] == "interrupted"


def _predicted(monkeypatch, seen: list, lr: float = 2e-3):
    """predict_lr replaced: the lr it would predict, its premise checked and held."""
    from types import SimpleNamespace

    import tcbench.tuning.lr.prediction as prediction

    def predict(spec, new_batch_size=None, **kw):
        seen.append((spec, new_batch_size, kw.get("check_premise")))
        return SimpleNamespace(lr=lr, premise=SimpleNamespace(verdict="lr0 held", held=True))
    monkeypatch.setattr(prediction, "predict_lr", predict)


def test_a_bf16_study_goes_through_the_default_candidates_with_its_noise_scale_measured_in_bf16(calls, store):
    spec = SPEC.replace(precision="bf16")
    res = time_to_quality(spec, seeds=3, eval_batches=2, store=store)   # the premise checked, lr predicted: real
    noise = [job for _, _, job in calls if job.noise_micro_batches]
    assert len(noise) == 1 and noise[0].precision == "bf16" and noise[0].backend == "eager"
    assert [c.label for c in res.candidates] == ["native", "inductor", "inductor@16", "native@16"]
    assert {c.spec.precision for c in res.candidates} == {"bf16"} and {job.precision for _, _, job in calls} == {"bf16"}
    assert res.premise is not None and len(res.runs) == 12


def test_a_target_the_reference_cannot_reach_is_refused_before_the_premise_and_the_noise_scale(calls, store):
    with pytest.raises(tc.SpecError, match="^target_loss=0.5") as e:   # the fake's loss never falls below 1.0
        time_to_quality(SPEC, seeds=3, target_loss=0.5, eval_batches=2, store=store)
    assert e.value.field == "target_loss" and "its runs ended at" in str(e.value)
    assert [(label, job.backend, job.lr) for label, _, job in calls] == [("native", "eager", SPEC.lr)] * 3
    assert not any(job.noise_micro_batches for _, _, job in calls)   # no noise-scale job, no premise check


def test_a_study_stopped_before_b1s_learning_rate_resumes_by_finding_it_never_with_lr0(monkeypatch, store):
    import tcbench.runner.process as runner

    seen, stop, fake = _stop_after(monkeypatch, 3)   # the reference's three seeds ran: before B1's learning rate
    asked: list = []
    _predicted(monkeypatch, asked, lr=7e-3)
    first = time_to_quality(SPEC, seeds=3, eval_batches=2, stop=stop, store=store)
    assert not asked and store.comparison_row(first.comparison_id)["status"] == "interrupted"
    monkeypatch.setattr(runner, "run", fake)
    seen.clear()
    again = time_to_quality(SPEC, seeds=3, eval_batches=2, store=store)
    assert again.resumed_from == first.comparison_id and len(asked) == 1   # found now, not taken from the plan
    assert {c.spec.lr for c in again.candidates if c.spec.batch_size == 16} == {7e-3}
    assert not any(label == "native" for label, _, _ in seen)   # the reference's runs were kept


def test_the_default_candidates_tell_the_compiler_and_the_batch_apart(calls, monkeypatch, store):
    asked: list = []
    _predicted(monkeypatch, asked)
    res = time_to_quality(SPEC, seeds=3, eval_batches=2, store=store)
    labels = [c.label for c in res.candidates]
    assert labels == ["native", "inductor", "inductor@16", "native@16"]        # this machine: B1 = 4x, no search
    by = {c.label: c.spec for c in res.candidates}
    assert (by["inductor@16"].backend, by["inductor@16"].lr) == ("inductor", 2e-3)
    assert (by["native@16"].backend, by["native@16"].lr, by["inductor"].lr) == ("eager", 2e-3, SPEC.lr)
    assert asked[0][1:] == (16, True) and res.premise.verdict == "lr0 held"
    assert any("no memory budget" in n for n in res.notes)
    assert {(r.label, r.seed) for r in res.runs} == {(c, s) for c in labels for s in (0, 1, 2)}


@pytest.mark.parametrize("native_max, with_native", [(20, True), (12, False)])
def test_under_a_profiles_memory_b1_is_the_largest_batch_the_compiled_job_fits(calls, monkeypatch, store, native_max,
                                                                               with_native):
    from types import SimpleNamespace

    import tcbench.tuning.batch.search as search

    asked: list = []

    def fake_search(spec, profile, backends, **kw):
        asked.append((profile, tuple(backends), kw["max_batch"], kw["multiple_of"]))
        return SimpleNamespace(max_batch={"inductor": 40, "eager": native_max}, comparison_id=7)
    monkeypatch.setattr(search, "find_max_batch", fake_search)
    _predicted(monkeypatch, [])
    res = time_to_quality(SPEC, seeds=3, eval_batches=2, profile="ml.g4dn.xlarge", max_batch=64, store=store)
    assert asked == [("ml.g4dn.xlarge", ("inductor", "eager"), 64, 4)]
    # 40 fits; B1 = 4 x 2^k within it that divides the reference's 80 samples: 16 (32 does not divide 80)
    assert [c.label for c in res.candidates] == ["native", "inductor", "inductor@16"] + (["native@16"] * with_native)
    assert any("40 the compiled job fits" in n for n in res.notes)
    assert with_native or any("no native@16: the native job fits 12" in n for n in res.notes)


def test_a_big_batch_above_the_profiles_memory_is_refused_before_any_job(no_process, monkeypatch, store):
    _predicted(monkeypatch, [])
    with pytest.raises(tc.SpecError, match="^big_batch="):
        time_to_quality(SPEC, seeds=3, profile="ml.g4dn.xlarge", big_batch=2**20, store=store)


def test_an_interrupted_study_resumes_without_running_its_finished_seeds_again(monkeypatch, store):
    import tcbench.runner.process as runner

    seen, stop, fake = _stop_after(monkeypatch, 4)   # the reference's three seeds and the first of the candidate's
    first = time_to_quality(SPEC, INDUCTOR, seeds=3, eval_batches=2, stop=stop, store=store)
    assert store.comparison_row(first.comparison_id)["status"] == "interrupted" and len(first.runs) == 4
    seen.clear()
    monkeypatch.setattr(runner, "run", fake)
    again = time_to_quality(SPEC, INDUCTOR, seeds=3, eval_batches=2, store=store)
    assert [(label, seed) for label, seed, _ in seen] == [("inductor", 1), ("inductor", 2)]
    assert again.resumed_from == first.comparison_id and sum(r.reused for r in again.runs) == 4
    assert len(again.runs) == 6 and again.target == pytest.approx(first.target)
    # show and report say how a study ended before its table (they said nothing of an interrupted one)
    assert tc.load_quality(first.comparison_id, store=store).notes[0].startswith("this study ended interrupted")
    assert not any(n.startswith("this study") for n in tc.load_quality(again.comparison_id, store=store).notes)
    seen.clear()
    other = time_to_quality(SPEC, INDUCTOR, seeds=4, eval_batches=2, store=store)   # other settings: a new study
    assert other.resumed_from is None and len(seen) == 8


@pytest.mark.parametrize("raised, status", [(KeyboardInterrupt, "interrupted"), (RuntimeError, "failed")])
def test_a_study_ended_among_its_candidates_keeps_its_target_and_says_why(raised, status, monkeypatch, store):
    import tcbench.runner.process as runner

    seen: list = []
    fake = _fake(seen)

    def run(job, *a, **k):
        if len(seen) == 4:   # the reference's three seeds and the first of the candidate's ran
            raise raised("the disk is full") if raised is RuntimeError else raised()
        return fake(job, *a, **k)
    monkeypatch.setattr(runner, "run", run)
    with pytest.raises(raised):
        time_to_quality(SPEC, INDUCTOR, seeds=3, eval_batches=2, store=store)
    cid = int(store.comparisons()["comparison_id"].max())
    shown = tc.load_quality(cid, store=store)
    assert store.comparison_row(cid)["status"] == status and math.isfinite(shown.target)
    assert shown.target_source.startswith("the reference's")   # not "the study ended before its target was known"
    assert any(r.reached for r in shown.runs if r.label == "inductor")   # its one run is scored against the target
    why = " (RuntimeError: the disk is full)" if raised is RuntimeError else ""
    assert shown.notes[0].startswith(f"this study ended {status}{why}, not done")


def test_cost_to_target_is_the_time_at_the_profiles_rate_and_says_whose_speed(calls, store):
    res = time_to_quality(SPEC, INDUCTOR, seeds=3, eval_batches=2, profile="ml.g4dn.xlarge", store=store)
    row = res.table().set_index("candidate").loc["inductor"]
    rate = tc.get_profile("ml.g4dn.xlarge").price_per_hour if hasattr(tc, "get_profile") else res.price_per_hour
    assert row.usd_to_target == pytest.approx(row.time_to_target_s * rate / 3600)
    assert row.time_low < row.time_to_target_s < row.time_high and row.usd_low < row.usd_to_target
    assert "this machine's measured speed" in res.price_basis


@pytest.mark.parametrize("kw, field", [
    (dict(seeds=2), "seeds"),
    (dict(eval_batches=0), "eval_batches"),
    (dict(budget=0.5), "budget"),
    (dict(eval_every_samples=6), "eval_every_samples"),     # not a multiple of the batch (4)
    (dict(eval_every_samples=48), "eval_every_samples"),    # not a divisor of the reference's 80 samples
])
def test_bad_settings_are_named_before_any_job_starts(kw, field, no_process, store):
    with pytest.raises(tc.SpecError, match=f"^{field}="):
        time_to_quality(SPEC, INDUCTOR, store=store, **kw)


@pytest.mark.integration
def test_real_jobs_give_curves_a_target_and_stored_runs(store):
    spec = SPEC.replace(steps=6, warmup_steps=1)
    bigger = Candidate("eager b8", spec.replace(batch_size=8))
    res = time_to_quality(spec, [bigger], seeds=3, eval_batches=2, eval_every_samples=8, budget=2.0, store=store)
    assert math.isfinite(res.target) and len(res.runs) == 6 and all(r.status == "ok" for r in res.runs)
    assert any(r.reached for r in res.runs if r.label == "native")          # the median of its own: some reach it
    stored = tc.load_comparison(res.comparison_id, store=store)
    assert stored.kind == "time-to-quality" and len(stored.results) == 6
    for r in stored.results:   # the reference trains its budget; the others end at their first point at the target
        full = r.spec.steps * r.spec.batch_size // 8
        curve = r.extra.eval_curve
        if r.label == "native" or not any(p.loss <= res.target for p in curve):
            assert len(curve) == full
        else:
            assert curve[-1].loss <= res.target and all(p.loss > res.target for p in curve[:-1])


def test_a_second_study_of_the_same_settings_while_one_runs_is_refused_never_resumed(calls, store, monkeypatch):
    import tcbench.runner.process as runner

    inner, refused = runner.run, []

    def run(spec, *args, **kwargs):
        if not refused:   # the first study is running: a second one of the same settings starts now
            with pytest.raises(tc.SpecError, match=r"study \d+ with these settings is running now") as err:
                time_to_quality(SPEC, INDUCTOR, seeds=3, eval_batches=2, store=store)
            refused.append(str(err.value))
        return inner(spec, *args, **kwargs)

    monkeypatch.setattr(runner, "run", run)
    res = time_to_quality(SPEC, INDUCTOR, seeds=3, eval_batches=2, store=store)
    assert refused and "resume=False" in refused[0] and len(res.runs) == 6 and res.resumed_from is None
    assert len(store.comparisons()) == 1   # the refused study stored nothing


def test_a_resumed_study_keeps_the_premise_and_the_notes_its_plan_came_from(calls, monkeypatch, store):
    import threading

    import tcbench.runner.process as runner

    asked: list = []
    _predicted(monkeypatch, asked)
    inner, stop = runner.run, threading.Event()

    def run(job, *a, **k):
        res = inner(job, *a, **k)
        stop.set()   # stopped during its first reference run
        return res
    monkeypatch.setattr(runner, "run", run)
    first = time_to_quality(SPEC, seeds=3, eval_batches=2, stop=stop, store=store)
    monkeypatch.setattr(runner, "run", inner)
    again = time_to_quality(SPEC, seeds=3, eval_batches=2, store=store)
    assert again.resumed_from == first.comparison_id and len(asked) == 1   # the premise is not checked again ...
    assert again.premise.verdict == "lr0 held" and again.premise.held      # ... and not forgotten
    assert any("no memory budget" in n for n in again.notes)
    assert sum(n.startswith("resumed study") for n in again.notes) == 1
