"""Learning-rate retuning: the study logic against a fake job (fast), then real jobs on the shipped task.

Seeds and counts are stated in each test. The integration tests use the tiny BERT at seq_len 32,
eager backend, dropout off, 1 thread (the other core stays free for the parent that reads the
streamed steps and decides pruning; with 2 threads a loaded machine starved it).
"""

from __future__ import annotations

import dataclasses
import math

import pytest

import tcbench as tc
from tcbench import JobSpec
from tcbench.core.results import JobResult, StepRecord
from tcbench.tuning.lr.retune import retune_lr, rule_lrs

LEGACY = dict(noise=False, budget="equal_steps", pruner="median", sampler="tpe")   # the study mechanics

OPT = 3e-3   # the fake job's best learning rate


def _noise_job(spec):
    """The noise-scale job of the fake: B_noise far above the batches, so the prediction is the square-root rule."""
    from tcbench.tuning.lr.noise import NoiseScale

    res = JobResult(spec=spec, status="ok", run_id=999)
    res.extra.noise_scale = NoiseScale(b_simple=1e5, low=5e4, high=2e5, tr_sigma=1.0, g2=1e-5,
                                          batch_size=spec.batch_size, micro_batch=spec.batch_size // 2, steps=10)
    return res


def _fake_run(calls: list, honour_stop: bool = True):
    """A stand-in for tcbench.runner.process.run: loss curves whose quality depends on lr; NaN for lr > 0.015.

    honour_stop=False: the job finishes all its steps whatever the stop event says (a real job whose last
    records were still in the pipe when the pruner decided)."""
    def run(spec, observer=None, stop=None, store=None, comparison_id=None, round=0, job=None, label="", draw=None):
        if spec.noise_micro_batches:   # a prediction's noise-scale job (not counted in calls)
            return _noise_job(spec)
        calls.append(spec)
        notify = observer or (lambda e: None)
        res = JobResult(spec=spec, status="ok", run_id=len(calls))
        rate = 0.25 * math.exp(-math.log10(spec.lr / OPT) ** 2)
        loss = 0.7
        for step in range(spec.steps):
            if honour_stop and stop is not None and stop.is_set():
                res.status, res.error = "interrupted", "stopped"
                return res
            loss = float("nan") if spec.lr > 0.015 and step >= 2 else 0.05 + (loss - 0.05) * (1 - rate)
            rec = StepRecord(step=step, step_s=0.01, samples_s=100.0, tokens_s=1e3, mem_bytes=0, loss=loss)
            res.records.append(rec)
            notify(tc.events.StepMeasured(job="job", backend=spec.backend, label=spec.backend, run_id=res.run_id, record=rec))
            if not math.isfinite(loss):
                res.status, res.error = "diverged", f"loss became nan at step {step}"
                return res
        res.extra = dataclasses.replace(res.extra, eval_loss=loss + 0.02, eval_losses=[loss + 0.02 + d for d in SPREAD],
                                        eval_losses_initial=[0.72 + d for d in SPREAD], eval_loss_se=0.004)
        return res
    return run


SPREAD = (-0.01, 0.0, 0.01, 0.005)   # the fake's per-batch held-out losses around their mean


@pytest.fixture
def fake(monkeypatch):
    import tcbench.runner.process as runner

    calls: list = []
    monkeypatch.setattr(runner, "run", _fake_run(calls))
    return calls


SPEC = JobSpec(model="bert-base-cased", size="tiny", batch_size=8, seq_len=32, steps=20, warmup_steps=1, lr=1e-3,
               dropout=0.0, threads=2)


def test_rules():
    lin, sq = rule_lrs(1e-3, 8, 32)
    assert lin == pytest.approx(4e-3) and sq == pytest.approx(2e-3)


def test_prediction_rules_and_original_run_first_at_equal_samples(fake, store):
    res = retune_lr(SPEC, 32, n_trials=8, seed=0, store=store)
    t = res.trials.sort_values("number")
    assert list(t.rule[:4]) == ["prediction", "linear", "sqrt", "original"]
    # the fake's noise scale is far above the batches: the surge form gives (nearly) the square-root rule
    assert t.lr.iloc[0] == pytest.approx(2e-3, rel=0.02) and res.prediction.noise.b_simple == 1e5
    assert list(t.lr.iloc[1:4]) == pytest.approx([4e-3, 2e-3, 1e-3])
    assert all(res.low <= lr <= res.high for lr in t.lr)
    assert res.low == pytest.approx(1e-3 / 4) and res.high == pytest.approx(4e-3 * 4)   # the original lr is in range
    # equal samples: 20 steps at batch 8 = 5 steps at batch 32
    assert res.budget == "equal_samples" and res.steps == 5 and {s.steps for s in fake} == {5}
    assert [s.batch_size for s in fake] == [32] * len(fake) and all(s.eval_batches == 8 for s in fake)
    values = [res.value_of(name) for name in res.guesses]
    assert all(res.best_value <= v for v in values if v is not None) and values[0] is not None
    assert res.best_se == 0.004 and not res.nothing_learned and res.sampler == "gp"
    assert res.total_steps <= res.grid_steps == 8 * 5
    s = res.summary()
    assert list(s.guess) == ["noise-scale prediction", "linear rule (lr·k)", "square-root rule (lr·√k)",
                             "original lr", "Optuna best"]
    assert "equal samples (5 steps at batch 32 = 20 at 8)" in res.describe()
    assert set(res.plots()) == {"history", "lr", "intermediate"}
    assert (store.comparisons().kind == "retune").any()


def test_equal_steps_is_the_option_and_the_result_says_so(fake, store):
    res = retune_lr(SPEC, 32, n_trials=3, seed=0, budget="equal_steps", noise=False, store=store)
    assert res.budget == "equal_steps" and {s.steps for s in fake} == {20} and res.prediction is None
    assert list(res.trials.sort_values("number").rule) == ["linear", "sqrt", "original"]
    assert "equal steps (20)" in res.describe()


def test_the_best_is_told_apart_from_each_guess_only_beyond_noise(fake, store):
    res = retune_lr(SPEC, 32, n_trials=6, seed=0, noise=False, pruner="none", store=store)
    best = res.trials[res.trials.lr == res.best_lr].iloc[0]
    for name, lr in res.guesses.items():
        theirs = res.value_of(name)
        if theirs is None or lr == res.best_lr:
            assert res.beats[name] is None
        else:   # the fake's batches are the same offsets around each trial's loss: the gap itself decides
            assert res.beats[name] == (theirs - best.value > 1e-9), (name, theirs, best.value)


def test_a_study_in_which_nothing_learned_names_no_best(monkeypatch, store):
    import tcbench.runner.process as runner

    calls: list = []
    inner = _fake_run(calls)

    def flat(spec, *a, **k):   # every trial's held-out loss stays where it started (within noise)
        res = inner(spec, *a, **k)
        if not spec.noise_micro_batches:
            res.extra = dataclasses.replace(res.extra, eval_losses=[0.72 + d for d in reversed(SPREAD)],
                                            eval_loss=0.72 + sum(SPREAD) / 4)
        return res

    monkeypatch.setattr(runner, "run", flat)
    res = retune_lr(SPEC, 32, n_trials=4, seed=0, noise=False, pruner="none", store=store)
    complete = res.trials[res.trials.state == "COMPLETE"]
    assert len(complete) >= 3 and (complete.learned == False).all()   # noqa: E712
    assert res.nothing_learned and res.best_lr is None and res.best_value is None
    assert res.describe().startswith("Nothing learned") and "no best is named" in res.describe()
    assert res.summary().guess.iloc[-1] == "Optuna best: none (nothing learned)"
    assert store.comparisons().info_json.iloc[-1].count('"nothing_learned": true') == 1


JITTER = (0.0, 0.003, -0.002)   # the fake's held-out loss moves this much with the seed (spec.seed % 3)


def test_finalists_are_trained_again_with_more_seeds_and_decide_the_best(monkeypatch, store, tmp_path):
    import tcbench.runner.process as runner

    calls: list = []
    inner = _fake_run(calls)

    def seeded(spec, *a, **k):
        res = inner(spec, *a, **k)
        if res.status == "ok" and not spec.noise_micro_batches:
            j = JITTER[spec.seed % 3]
            res.extra = dataclasses.replace(res.extra, eval_loss=res.extra.eval_loss + j,
                                            eval_losses=[v + j for v in res.extra.eval_losses])
        return res

    monkeypatch.setattr(runner, "run", seeded)
    events: list = []
    kw = dict(n_trials=5, seed=0, noise=False, pruner="none", store=store, seeds=3, finalists=2,
              storage=f"sqlite:///{tmp_path / 'study.db'}", study_name="finalists")
    res = retune_lr(SPEC, 32, observer=events.append, **kw)
    fin = res.finalists
    assert len(fin) == 2 and list(fin.seeds) == [3, 3]
    assert len(calls) == 5 + 2 * 2 and sorted(s.seed for s in calls[5:]) == [1, 1, 2, 2]
    assert {s.steps for s in calls} == {5} and {s.batch_size for s in calls} == {32}   # the trials' own budget
    best = fin.loc[fin["mean"].idxmin()]
    assert res.best_lr == best.lr and res.best_value == pytest.approx(best["mean"])
    assert res.best_value == pytest.approx(sum(best["values"].values()) / 3) and res.best_se > 0
    assert sum(isinstance(e, tc.events.FinalistEnded) for e in events) == 4
    s = res.summary()
    assert set(s[s.lr.isin(list(fin.lr))].seeds) == {3} and "mean over 3 seeds" in res.describe()
    assert all(res.beats[n] is None or isinstance(res.beats[n], bool) for n in res.guesses)
    again = retune_lr(SPEC, 32, **kw)   # resumed: the trials and the repeats are kept in the study
    assert len(calls) == 9 and again.best_lr == res.best_lr and again.best_value == pytest.approx(res.best_value)


def test_pruning_and_nan_do_not_stop_the_study(fake, store):
    # search_factor 50 puts lr > 0.015 in range: those trials diverge (FAIL), the study carries on
    res = retune_lr(SPEC, 32, n_trials=14, seed=1, search_factor=50.0, store=store, **{**LEGACY, "sampler": "random"})
    states = res.trials.state.value_counts().to_dict()
    assert len(res.trials) == 14
    assert states.get("PRUNED", 0) >= 1, res.trials
    assert res.n_pruned == states["PRUNED"]
    pruned = res.trials[res.trials.state == "PRUNED"]
    assert (pruned.steps_run < 20).all() and (pruned.status == "pruned").all()
    assert res.total_steps < res.grid_steps
    failed = res.trials[res.trials.state == "FAIL"]
    assert (failed.lr > 0.015).any() and failed.reason.str.contains("nan").all(), res.trials
    assert res.best_lr is not None and 1e-3 < res.best_lr < 1e-2


def test_retune_for_more_processes_trains_one_process_at_the_global_batch(fake, store):
    spec = SPEC.replace(nproc=2)   # 2 × 8: global batch 16
    res = retune_lr(spec, nproc=4, n_trials=4, seed=0, noise=False, pruner="none", store=store)
    assert res.new_batch_size == 32 and res.processes == (2, 4) and res.spec.batch_size == 16
    assert all(c.nproc == 1 and c.batch_size == 32 for c in fake)   # every trial: one process, the global batch
    assert all(c.steps == SPEC.steps // 2 for c in fake)              # equal samples against the global batch 16
    assert res.linear_lr == pytest.approx(2 * SPEC.lr)
    assert "for 4 processes (global batch 32, from 2)" in res.describe()


def test_halving_prunes_at_its_first_rung_and_never_past_half_the_steps(fake, store):
    from tcbench.tuning.lr.retune import min_resource, prune_until

    res = retune_lr(SPEC, 32, n_trials=8, seed=1, noise=False, budget="equal_steps", sampler="random",
                    pruner="halving", store=store)
    steps = SPEC.steps   # equal_steps: every trial trains SPEC.steps
    assert prune_until("halving", steps) == min_resource(steps) and prune_until("median", steps) == steps
    pruned = res.trials[res.trials.state == "PRUNED"]
    assert len(pruned) >= 1, res.trials
    # the fake honours the stop at once: a pruned trial ran exactly to the first rung (reported there, not at
    # the next multiple of report_every), never beyond half its steps
    assert (pruned.steps_run == min_resource(steps)).all(), res.trials
    assert (res.trials[res.trials.state == "COMPLETE"].steps_run == steps).all(), res.trials


def test_halving_lets_a_third_of_the_trials_train_past_its_rung(fake, store):
    """Each trial better than the last at the rung: Optuna's own successive halving, run one trial at a time, lets
    every one of them run to the end; tcbench's lets max(2, ⌈n_trials / 3⌉) go on and says why the rest stopped."""
    from tcbench.tuning.lr.retune import min_resource
    from tcbench.tuning.lr.study import full_trials

    # 5e-4 at batch 8 → 32: linear 2e-3, then sqrt 1e-3 and the original 5e-4 (worse at the rung), then two of your
    # own guesses closer and closer to the fake's best (3e-3): each the best so far when it reaches the rung
    res = retune_lr(SPEC.replace(lr=5e-4), 32, n_trials=5, seed=0, noise=False, budget="equal_steps",
                    extra_lrs=(2.5e-3, 3e-3), pruner="halving", store=store)
    t = res.trials.set_index("rule")
    assert full_trials(5) == 2 and full_trials(12) == 4 and full_trials(1) == 2
    assert list(t.index) == ["linear", "sqrt", "original", "extra0", "extra1"], res.trials
    assert list(t.state) == ["COMPLETE", "PRUNED", "PRUNED", "COMPLETE", "PRUNED"], res.trials
    rung = min_resource(SPEC.steps)
    assert (t.loc[["sqrt", "original", "extra1"], "steps_run"] == rung).all(), res.trials
    assert "not among the best third" in t.loc["sqrt", "reason"], t.loc["sqrt", "reason"]
    assert "the 2 of the 5 trials that may train past it had gone on already" in t.loc["extra1", "reason"], res.trials
    assert res.best_lr == pytest.approx(2.5e-3)


def test_pruned_after_the_job_finished_is_pruned_and_says_so(monkeypatch, store):
    import tcbench.runner.process as runner

    monkeypatch.setattr(runner, "run", _fake_run([], honour_stop=False))
    res = retune_lr(SPEC, 32, n_trials=14, seed=1, search_factor=50.0, store=store, **{**LEGACY, "sampler": "random"})
    pruned = res.trials[res.trials.state == "PRUNED"]
    assert len(pruned) >= 1, res.trials
    assert (pruned.steps_run == 20).all() and pruned.reason.str.contains("already finished its 20 steps").all()
    assert res.n_pruned == len(pruned) and res.best_lr is not None


@pytest.mark.parametrize("kw,field", [(dict(new_batch_size=0), "new_batch_size"), (dict(n_trials=0), "n_trials"),
                                       (dict(search_factor=0.5), "search_factor"), (dict(sampler="grid"), "sampler"),
                                       (dict(pruner="x"), "pruner"), (dict(storage="nope"), "storage"),
                                       (dict(eval_batches=0), "eval_batches"), (dict(steps=1), "steps"),
                                       (dict(budget="samples"), "budget"), (dict(noise="yes"), "noise"),
                                       (dict(optimizer="lion"), "optimizer"), (dict(seeds=0), "seeds"),
                                       (dict(finalists=0), "finalists")])
def test_bad_input(kw, field, store, fake):
    args = dict(new_batch_size=32, store=store) | kw
    with pytest.raises(ValueError, match=field):
        retune_lr(SPEC, **args)


def test_extra_guess_that_diverges_is_failed_not_fatal(fake, store):
    res = retune_lr(SPEC, 32, n_trials=5, seed=0, extra_lrs=[0.5], store=store, **LEGACY)
    t = res.trials.sort_values("number")
    assert list(t.rule[:4]) == ["linear", "sqrt", "original", "extra0"] and res.high == pytest.approx(0.5 * 4)
    assert t.state.iloc[3] == "FAIL" and t.status.iloc[3] == "diverged" and "nan" in t.reason.iloc[3]
    assert len(t) == 5 and res.best_lr is not None


def test_plots_mark_both_rules_and_pruned_trials(fake, store):
    res = retune_lr(SPEC, 32, n_trials=8, seed=0, store=store)
    figs = res.plots()
    lines = [sh for sh in figs["lr"].layout.shapes]
    assert len(lines) == 3                                       # linear, sqrt, best
    assert sorted(round(10 ** sh.x0, 6) for sh in lines[:2]) == [0.002, 0.004]
    inter = figs["intermediate"]
    assert {t.legendgroup for t in inter.data} >= {"COMPLETE"}
    if res.n_pruned:
        assert "PRUNED" in {t.legendgroup for t in inter.data}


# -- real jobs on the shipped learnable task (eager, tiny BERT, seq 32, dropout off, 1 thread) ---------
TASK = JobSpec(model="bert-base-cased", size="tiny", batch_size=8, seq_len=32, steps=30, warmup_steps=1, lr=1e-3,
               seed=0, dropout=0.0, threads=1)   # one core left for the parent reading the stream


@pytest.mark.integration
def test_real_retune_rules_first_pruning_and_no_worse_than_linear(store):
    """TPE seed 0, 6 trials of 30 steps at batch 32 (k = 4), held-out loss over 4 eval batches."""
    res = retune_lr(TASK, 32, n_trials=6, seed=0, eval_batches=4, search_factor=10.0, store=store, **LEGACY)
    t = res.trials.sort_values("number")
    assert list(t.rule[:2]) == ["linear", "sqrt"], t
    assert t.lr.iloc[0] == pytest.approx(4e-3) and t.lr.iloc[1] == pytest.approx(2e-3)
    assert (t.state.iloc[:2] == "COMPLETE").all(), t
    assert res.n_pruned >= 1, t
    assert res.total_steps <= res.grid_steps == 6 * 30
    assert res.best_value <= res.linear_value           # the retuned lr is no worse than the linear rule
    runs = store.comparison_runs(res.comparison_id)
    assert set(runs.run_id) == set(t.run_id) and (runs.batch_size == 32).all()
    pruned = t[t.state == "PRUNED"].merge(runs[["run_id", "status"]], on="run_id", suffixes=("", "_run"))
    # a pruned trial's job is stopped (interrupted, fewer steps) unless it had already finished when the
    # pruner decided: the parent reads the streamed records behind the worker, by more than the 15 steps between
    # the median pruner's first decision and the end when the machine is busy (all four pruned jobs had finished,
    # once, beside another job). That a stop at the decision saves the rest is the fake-job tests' (exact steps).
    stopped = pruned[pruned.status_run == "interrupted"]
    finished = pruned[pruned.status_run == "ok"]
    # a job stopped just as it ended keeps every step it had sent (the runner drains them), so it may hold all 30
    assert (stopped.steps_run <= 30).all(), pruned
    assert (finished.steps_run == 30).all() and finished.reason.str.contains("already finished").all(), pruned
    assert len(stopped) + len(finished) == len(pruned), pruned

# A study process SIGKILLed mid-trial and resumed, with a diverging extra guess: tests/tuning/lr/test_retune_faults.py


def test_a_prediction_equal_to_a_rule_shares_its_trial(fake, store):
    from tcbench import NoiseScale

    unresolved = NoiseScale(b_simple=None, low=None, high=None, tr_sigma=1.0, g2=-1e-3, batch_size=8, micro_batch=4,
                            steps=10)   # |G|² not resolved: the square-root limit exactly
    res = retune_lr(SPEC, 32, n_trials=4, seed=0, noise=unresolved, pruner="none", store=store)
    assert res.guesses["prediction"] == res.guesses["sqrt"] == pytest.approx(2e-3)
    t = res.trials.sort_values("number")
    assert list(t.rule[:3]) == ["prediction", "linear", "original"] and (t.lr == res.sqrt_lr).sum() == 1
    assert res.sqrt_value is not None and res.sqrt_value == res.value_of("prediction")
    assert list(res.summary().guess[:2]) == ["noise-scale prediction", "linear rule (lr·k)"]


def test_cli_retune_lr_repeats_the_finalists_and_prints_them(monkeypatch, tmp_path, capsys):
    import tcbench.runner.process as runner
    from tcbench.cli.app import main

    calls: list = []
    monkeypatch.setattr(runner, "run", _fake_run(calls))
    monkeypatch.setenv("TCBENCH_HOME", str(tmp_path))
    rc = main(["retune-lr", "--model", "bert-base-cased", "--size", "tiny", "--batch-size", "8", "--seq-len", "32",
               "--steps", "20", "--lr", "1e-3", "--new-batch-size", "32", "--trials", "3", "--no-prediction",
               "--pruner", "none", "--seeds", "2", "--finalists", "2"])
    out = capsys.readouterr().out
    assert rc == 0 and len(calls) == 3 + 2 and "Best lr" in out and "mean over 2 seeds of the 2 finalists" in out
    header = next(line for line in out.splitlines() if "seeds" in line and "mean" in line and "se" in line.split())
    assert header.split()[:3] == ["number", "lr", "rule"]
