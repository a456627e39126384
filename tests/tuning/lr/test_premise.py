"""The learning rate's premise, checked (``tc.check_lr``): the verdict against a fake job whose held-out loss is a
known function of the rate and the seed (fast), then one real tiny GPT-2 check whose lr0 is 4× below its optimum.

The fake's loss: 3 + (ln(lr / opt))² + a per-seed offset (large: pairing removes it) + a small per-run wobble; the
runs of one seed share the offset, as the same initialisation and data order do."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

import tcbench as tc
from tcbench import JobSpec
from tcbench.core.results import JobResult, StepRecord
from tcbench.tuning.lr.premise import NOT_CHECKED, LrPremise, PremiseRun, check_lr

LR0 = 1e-3
SPEC = JobSpec(model="gpt2", size="tiny", batch_size=8, seq_len=32, steps=12, warmup_steps=1, lr=LR0, seed=0,
               threads=1, dropout=0.0)
OFFSET = {0: 0.0, 1: 0.6, 2: -0.45, 3: 0.3, 4: -0.2}   # per seed: far wider than the differences between rates


def _loss(lr: float, seed: int, opt: float) -> float:
    wobble = random.Random(f"{lr:.6g}/{seed}").gauss(0, 0.01)   # fixed per run, unrelated between runs
    return 3.0 + math.log(lr / opt) ** 2 + OFFSET[seed % 5] + wobble


def _fake(calls: list, opt: float, status=None):
    """A stand-in for tcbench.runner.process.run. ``status(spec) -> (status, eval_loss)`` overrides a run's end."""
    def run(spec, observer=None, stop=None, store=None, comparison_id=None, round=0, job=None, label="", draw=None):
        if spec.noise_micro_batches:   # a prediction's noise-scale job
            res = JobResult(spec=spec, status="ok", run_id=999)
            res.extra.noise_scale = tc.NoiseScale(b_simple=1e5, low=5e4, high=2e5, tr_sigma=1.0, g2=1e-5,
                                                  batch_size=spec.batch_size, micro_batch=spec.batch_size // 2,
                                                  steps=10)
            return res
        calls.append(spec)
        loss = _loss(spec.lr, spec.seed, opt)
        st, value = status(spec) if status is not None else ("ok", loss)
        res = JobResult(spec=spec, status=st, run_id=len(calls), label=label)
        res.records = [StepRecord(step=i, step_s=0.01, samples_s=100.0, tokens_s=1e3, mem_bytes=0, loss=loss + 1)
                       for i in range(spec.steps)]
        if st == "ok":
            res.extra = dataclasses.replace(res.extra, eval_loss=value, eval_loss_se=0.01,
                                            eval_losses=[value - 0.01, value, value + 0.01],
                                            eval_losses_initial=[value + 2] * 3)
        return res
    return run


@pytest.fixture
def fake(monkeypatch):
    """``fake(opt, status=None)``: run replaced on its module; the list of the specs it ran."""
    import tcbench.runner.process as runner

    def install(opt: float, status=None) -> list:
        calls: list = []
        monkeypatch.setattr(runner, "run", _fake(calls, opt, status))
        return calls
    return install


def test_a_tuned_lr0_holds_and_is_not_recentred(fake, store):
    calls = fake(LR0)
    p = check_lr(SPEC, store=store)
    assert p.held is True and p.direction is None and p.recentred_lr == LR0
    assert len(calls) == 9 and sorted({c.lr for c in calls}) == pytest.approx([LR0 / 2, LR0, 2 * LR0])
    assert {c.seed for c in calls} == {0, 1, 2} and all(c.eval_batches == 8 and c.steps == 12 for c in calls)
    for d in p.differences:   # both neighbours higher beyond noise: (ln 2)² ≈ 0.48
        assert d.call == "higher" and d.low > 0 and d.point == pytest.approx(math.log(2) ** 2, abs=0.03)
    assert p.best_factor == 1.0 and "held at batch 8" in p.verdict and "0.0005 (×0.5): +0.4" in p.verdict
    t = p.table()
    assert list(t.factor) == [0.5, 1.0, 2.0] and list(t.vs_lr0) == ["higher", "lr0", "higher"]
    row = store.comparison_row(p.comparison_id)
    assert row["kind"] == "lr-premise" and row["status"] == "done"


def test_pairing_by_seed_decides_what_unpaired_seeds_could_not(fake, store):
    """The seeds' offsets (±0.6) dwarf the difference between lr0 and 2·lr0 when lr0 is a bit low (opt = 1.5·lr0:
    ×2 is 0.08 lower); paired by seed, the interval excludes 0."""
    fake(1.5 * LR0)
    p = check_lr(SPEC, extend=0, store=store)
    d = p.difference(2.0)
    expected = math.log(2 / 1.5) ** 2 - math.log(1 / 1.5) ** 2
    assert d.call == "lower" and d.high < 0 and d.point == pytest.approx(expected, abs=0.02)
    unpaired = [p.mean_loss(2.0) - p.mean_loss(1.0)]
    spread = max(p.losses(1.0).values()) - min(p.losses(1.0).values())
    assert spread > 10 * abs(unpaired[0])   # the seeds' spread alone would have decided nothing
    assert p.held is False and p.direction == "too low"


def test_a_difference_within_noise_does_not_fail_the_premise(fake, store):
    """opt = √2·lr0: lr0 and 2·lr0 lie alike about the optimum (log scale), so only the wobble parts them."""
    fake(math.sqrt(2) * LR0)
    p = check_lr(SPEC, store=store)
    d = p.difference(2.0)
    assert d.call == "within noise" and d.low < 0 < d.high and abs(d.point) < 0.03
    assert p.held is True and p.recentred_lr == LR0 and p.factors == (0.5, 1.0, 2.0)


def test_lr0_four_times_too_low_is_flagged_extended_and_recentred_on_the_optimum(fake, store):
    calls = fake(4 * LR0)
    p = check_lr(SPEC, store=store)
    assert p.held is False and p.direction == "too low"
    # the best was at the edge (×2): ×4, then ×8 were run, bracketing the optimum at ×4
    assert p.factors == (0.5, 1.0, 2.0, 4.0, 8.0) and len(calls) == 15
    assert p.best_factor == 4.0 and p.recentred_lr == pytest.approx(4 * LR0, rel=0.02)   # the parabola's minimum
    assert "is too low at batch 8" in p.verdict and "reached" in p.verdict and "parabola" in p.verdict
    assert f"re-centred on {p.recentred_lr:.3g}" in p.verdict
    assert store.comparison_row(p.comparison_id)["status"] == "done"


def test_lr0_four_times_too_high_is_flagged_and_recentred_downwards(fake, store):
    fake(LR0 / 4)
    p = check_lr(SPEC, store=store)
    assert p.held is False and p.direction == "too high"
    assert p.factors == (0.125, 0.25, 0.5, 1.0, 2.0) and p.recentred_lr == pytest.approx(LR0 / 4, rel=0.02)
    assert "is too high" in p.verdict


def test_without_extension_an_edge_winner_is_the_recentred_rate_and_says_so(fake, store):
    calls = fake(4 * LR0)
    p = check_lr(SPEC, extend=0, store=store)
    assert len(calls) == 9 and p.held is False and p.recentred_lr == pytest.approx(2 * LR0)
    assert "edge of the factors run" in p.verdict


def test_the_parabola_recentres_between_grid_points():
    """Means 3 + (ln f − ln 1.5)² at ×1, ×2, ×4 (best ×2, inside): the vertex is ×1.5 exactly, not the grid's ×2."""
    seeds = (0, 1, 2)
    runs = tuple(PremiseRun(f, LR0 * f, s, "ok", 3 + (math.log(f) - math.log(1.5)) ** 2 + 0.1 * s)
                 for f in (0.5, 1.0, 2.0, 4.0) for s in seeds)
    p = LrPremise(LR0, 8, 12, (0.5, 1.0, 2.0, 4.0), seeds, runs)
    assert p.held is False and p.best_factor == 2.0 and p.recentred_lr == pytest.approx(1.5 * LR0, rel=1e-6)


def test_a_diverged_run_counts_as_worse_than_any_finite_loss(fake, store):
    """×2 diverges (status diverged, or a NaN held-out loss) although its loss would have been the lowest."""
    def end(spec):
        if spec.lr > 1.5 * LR0:
            return ("diverged", None) if spec.seed != 1 else ("ok", float("nan"))
        return "ok", _loss(spec.lr, spec.seed, 4 * LR0)
    fake(4 * LR0, end)
    p = check_lr(SPEC, store=store)
    d = p.difference(2.0)
    assert d.call == "higher" and d.point == math.inf and p.mean_loss(2.0) == math.inf
    assert p.held is True and p.factors == (0.5, 1.0, 2.0) and p.best_factor == 1.0
    assert p.table().set_index("factor").loc[2.0, "diverged"] == 3
    assert "diverged where lr0 learned" in p.verdict


def test_lr0_diverging_where_a_smaller_rate_learns_is_too_high(fake, store):
    def end(spec):
        return ("diverged", None) if spec.lr > 0.7 * LR0 else ("ok", _loss(spec.lr, spec.seed, LR0))
    fake(LR0, end)
    p = check_lr(SPEC, extend=1, store=store)
    assert p.difference(0.5).call == "lower" and p.difference(0.5).point == -math.inf
    assert p.held is False and p.direction == "too high" and p.factors == (0.25, 0.5, 1.0, 2.0)
    assert "lr0 diverged" in p.verdict


@pytest.mark.parametrize("case, why", [
    ("lr0 failed", "usable run"),
    ("x2 failed", "seed 0 failed"),
    ("seeds disagree", "seeds disagree"),
    ("all diverged", "every run diverged"),
])
def test_inconclusive_when_runs_fail_disagree_or_all_diverge(fake, store, case, why):
    def end(spec):
        loss = _loss(spec.lr, spec.seed, LR0)
        if case == "lr0 failed" and spec.lr == LR0 and spec.seed < 2:
            return "failed", None
        if case == "x2 failed" and spec.lr > 1.5 * LR0 and spec.seed < 2:
            return "failed", None
        if case == "seeds disagree" and spec.lr > 1.5 * LR0:   # diverged once, far better twice: signs differ
            return ("diverged", None) if spec.seed == 0 else ("ok", loss - 5)
        if case == "all diverged":
            return "diverged", None
        return "ok", loss
    calls = fake(LR0, end)
    p = check_lr(SPEC, store=store)
    assert p.held is None and p.recentred_lr == LR0 and p.direction is None
    assert "inconclusive" in p.verdict and why in p.verdict, p.verdict
    assert len(calls) == 9   # nothing extended


@pytest.mark.parametrize("kw, field, allowed", [
    (dict(factors=(0.5, 2.0)), "factors", "including 1"),
    (dict(factors=(0.0, 1.0, 2.0)), "factors", "positive finite"),
    (dict(factors=(1.0,)), "factors", "at least two"),
    (dict(factors=(1.0, 2.0, 2.0)), "factors", "none repeated"),
    (dict(factors="1,2"), "factors", "positive finite"),
    (dict(factors=(1.0, float("nan"))), "factors", "positive finite"),
    (dict(seeds=1), "seeds", "2..64"),
    (dict(seeds=2.5), "seeds", "whole"),
    (dict(eval_batches=0), "eval_batches", ">= 1"),
    (dict(steps=0), "steps", ">= 1"),
    (dict(extend=-1), "extend", "0..8"),
])
def test_bad_settings_are_refused_before_any_job(fake, store, kw, field, allowed):
    calls = fake(LR0)
    before = len(store.comparisons())
    with pytest.raises(tc.SpecError) as e:
        check_lr(SPEC, store=store, **kw)
    assert e.value.field == field and allowed in str(e.value), str(e.value)
    assert calls == [] and len(store.comparisons()) == before


def test_an_unknown_setting_is_a_type_error_naming_the_fields(fake, store):
    fake(LR0)
    with pytest.raises(TypeError, match="factors, seeds, steps, eval_batches, extend"):
        check_lr(SPEC, store=store, factor=(1, 2))


def test_options_and_keywords_and_a_stop_ends_the_check_after_the_running_job(fake, store):
    import threading

    calls = fake(LR0)
    stop = threading.Event()

    def observe(event):
        pass

    import tcbench.runner.process as runner
    inner = runner.run

    def stopping(spec, *args, **kw):   # the user stops the check during the fourth job
        res = inner(spec, *args, **kw)
        if len(calls) == 4:
            stop.set()
        return res
    runner.run = stopping
    try:
        p = check_lr(SPEC, options=tc.PremiseOptions(seeds=4), steps=6, observer=observe, stop=stop, store=store)
    finally:
        runner.run = inner
    assert len(calls) == 4 and all(c.steps == 6 for c in calls) and len(p.seeds) == 4 and p.held is None
    assert store.comparison_row(p.comparison_id)["status"] == "interrupted"


def test_predict_lr_shows_whether_its_premise_held_and_recentres_when_it_failed(fake, store):
    fake(4 * LR0)
    noise = tc.NoiseScale(b_simple=None, low=None, high=None, tr_sigma=1.0, g2=-1e-3, batch_size=8, micro_batch=4,
                          steps=10)   # not resolved: the square-root limit, lr·√k
    plain = tc.predict_lr(SPEC, 32, noise=noise, store=store)
    assert plain.premise is None and not plain.recentred and NOT_CHECKED in plain.advice()
    assert NOT_CHECKED in plain.describe() and plain.lr == pytest.approx(2 * LR0)
    checked = tc.predict_lr(SPEC, 32, noise=noise, store=store, check_premise=True)
    assert checked.premise.held is False and checked.recentred
    assert checked.old_lr == pytest.approx(4 * LR0, rel=0.02) and checked.lr == pytest.approx(8 * LR0, rel=0.02)
    text = checked.describe()
    assert "too low" in text and f"starts from {checked.old_lr:.3g}, not lr0 = 0.001" in text
    assert "too low" in checked.advice()
    with pytest.raises(tc.SpecError) as e:
        tc.predict_lr(SPEC, 32, noise=noise, store=store, check_premise="yes")
    assert e.value.field == "check_premise"


def test_predict_lr_with_a_premise_that_held_predicts_from_lr0(fake, store):
    fake(LR0)
    noise = tc.NoiseScale(b_simple=None, low=None, high=None, tr_sigma=1.0, g2=-1e-3, batch_size=8, micro_batch=4,
                          steps=10)
    p = tc.predict_lr(SPEC, 32, noise=noise, store=store, check_premise=True)
    assert p.premise.held is True and not p.recentred and p.old_lr == LR0 and "held" in p.describe()


def test_retune_lr_checks_first_and_centres_its_guesses_on_the_recentred_rate(fake, store):
    calls = fake(4 * LR0)
    res = tc.retune_lr(SPEC, 32, n_trials=3, noise=False, pruner="none", seed=0, check_premise=True, store=store)
    assert res.premise is not None and res.premise.held is False
    centre = res.premise.recentred_lr
    assert centre == pytest.approx(4 * LR0, rel=0.02)
    assert res.guesses["original"] == centre and res.guesses["sqrt"] == pytest.approx(2 * centre)
    assert len(calls) == 15 + 3 and "Premise: lr0 = 0.001 is too low" in res.describe()
    plain = tc.retune_lr(SPEC, 32, n_trials=3, noise=False, pruner="none", seed=0, store=store)
    assert plain.premise is None and plain.guesses["original"] == LR0 and NOT_CHECKED in plain.describe()
    assert len(calls) == 15 + 3 + 3   # no check by default


# -- a real tiny job: tiny GPT-2 (seq 32, batch 8, 30 steps, eager, 1 thread, dropout off) ------------------------
# Its held-out loss over 8 batches at 30 steps, seeds 0-2 (measured here): lr 1e-3 → 5.99, 2e-3 → 4.99, 4e-3 → 4.54,
# 8e-3 → 5.02: the tuned rate is about 4e-3. Paired by seed, 2e-3 is ~1.0 lower than 1e-3 (spread over seeds ~0.1).
REAL = JobSpec(model="gpt2", size="tiny", batch_size=8, seq_len=32, steps=30, warmup_steps=1, lr=1e-3, seed=0,
               threads=1, dropout=0.0)


@pytest.mark.integration
def test_the_check_flags_a_learning_rate_four_times_too_low_on_a_real_tiny_job(store):
    p = tc.check_lr(REAL, extend=0, store=store)   # lr0 = 1e-3, a quarter of the tuned 4e-3; 9 jobs
    assert p.held is False and p.direction == "too low", p.table()
    assert p.difference(2.0).call == "lower" and p.difference(0.5).call == "higher", p.table()
    assert p.recentred_lr == pytest.approx(2e-3) and "is too low" in p.verdict, p.verdict   # the edge: ×2
    runs = store.comparison_runs(p.comparison_id)
    assert len(runs) == 9 and set(runs.status) == {"ok"}


def _cli(argv: list[str]):
    """``tcbench check-lr`` parsed by a parser holding only it (``tcbench.cli.premise.add_subcommands``)."""
    import argparse

    from tcbench.cli.premise import add_subcommands

    parser = argparse.ArgumentParser(prog="tcbench")
    add_subcommands(parser.add_subparsers(dest="command"))
    a = parser.parse_args(["check-lr", *argv])
    return a.func(a)


JOB = ["--model", "gpt2", "--size", "tiny", "--batch-size", "8", "--seq-len", "32", "--steps", "12", "--lr", "1e-3"]


def test_cli_check_lr_prints_the_table_and_verdict_and_exits_by_it(fake, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("TCBENCH_HOME", str(tmp_path))
    calls = fake(4 * LR0)
    assert _cli([*JOB, "--extend", "0", "--runs"]) == 1
    out = capsys.readouterr().out
    assert len(calls) == 9 and "is too low at batch 8" in out and "vs_lr0" in out and "run_id" in out
    fake(LR0)
    assert _cli([*JOB, "--factors", "0.25,1,4", "--seeds", "2"]) == 0
    assert "held at batch 8 (2 seeds, 12 steps)" in capsys.readouterr().out


def test_cli_check_lr_refuses_bad_factors(fake, capsys):
    calls = fake(LR0)
    with pytest.raises(SystemExit):
        _cli([*JOB, "--factors", "0.5,x"])
    assert "'0.5,x' is not allowed" in capsys.readouterr().err
    with pytest.raises(tc.SpecError) as e:   # main prints it on one line, naming the field
        _cli([*JOB, "--factors", "0.5,2"])
    assert e.value.field == "factors" and calls == []
