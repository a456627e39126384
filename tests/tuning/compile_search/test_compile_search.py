"""tune_compile: the search space, the parity constraint, pruning, duplicates, the budget, resuming and the answer,
against a fake job whose step time and loss follow its configuration (fast); a real search on tiny GPT-2 lives in
tests/tuning/compile_search/test_compile_search_jobs.py."""

from __future__ import annotations

import dataclasses
import time

import pytest

import tcbench as tc
from tcbench.core.results import JobResult, StepRecord
from tcbench.measure.metrics import job_figures
from tcbench.tuning.compile_search.search import (CompileConfig, best_config, narrow, search_space, size_of, tune_compile)

SPEC = tc.JobSpec(dropout=0.0, steps=30, warmup_steps=3)

# the fake's step time (ms) per choice, multiplied: bf16 and cpp_wrapper help, a compiled optimizer and blocks cost
FACTORS = {("precision", "bf16"): 0.7, ("cpp_wrapper", True): 0.9, ("compile_optimizer", True): 1.15,
           ("compile_scope", "blocks"): 1.1, ("compile_scope", "step"): 1.02,
           ("compile_mode", "max-autotune-no-cudagraphs"): 0.95}


def _step_ms(spec) -> float:
    if spec.backend == "eager":
        return 20.0
    ms = 10.0
    for (name, value), f in FACTORS.items():
        if getattr(spec, name) == value:
            ms *= f
    return ms


def fake_run(calls: list, drift_bf16: float = 0.0):
    """A stand-in for tcbench.runner.process.run: steady steps of ``_step_ms`` (±1 %), a falling loss; bf16 jobs'
    losses move ``drift_bf16`` away from native's (a precision that breaks parity)."""
    def run(spec, observer=None, stop=None, store=None, comparison_id=None, round=0, job=None, label="", draw=None,
            turns=None):
        calls.append((spec, label))
        notify = observer or (lambda e: None)
        res = JobResult(spec=spec, status="ok", run_id=len(calls), label=label)
        for step in range(spec.steps):
            if stop is not None and stop.is_set():
                res.status = "interrupted"
                break
            loss = 8.0 * 0.95 ** step + (drift_bf16 * (1 + step) if spec.precision == "bf16" else 0.0)
            rec = StepRecord(step=step, step_s=_step_ms(spec) * (1 + 0.01 * (step % 3 - 1)) / 1e3, samples_s=1.0,
                             tokens_s=1.0, mem_bytes=0, loss=loss, warmup=step < spec.warmup_steps)
            res.records.append(rec)
            notify(tc.events.StepMeasured(job="job", backend=spec.backend, label=spec.backend, run_id=res.run_id, record=rec))
        res.figures = job_figures(res.records, spec.batch_size, spec.warmup_steps)
        return res
    return run


@pytest.fixture
def calls(monkeypatch):
    import tcbench.comparison.running
    import tcbench.host.env
    import tcbench.runner.process

    out: list = []
    monkeypatch.setattr(tcbench.runner.process, "run", fake_run(out))
    monkeypatch.setattr(tcbench.comparison.running, "run", fake_run(out))
    monkeypatch.setattr(tcbench.host.env, "cpu_flags", lambda: frozenset({"avx512f", "avx512_bf16"}))
    return out


def test_labels_and_the_default_configuration():
    assert CompileConfig.default(SPEC).label() == "inductor · default"
    cfg = CompileConfig("max-autotune-no-cudagraphs", "blocks", True, "bf16", True)
    assert cfg.label() == "inductor · max-autotune-no-cudagraphs · blocks · compiled optimizer · bf16 · cpp_wrapper"
    job = cfg.apply(SPEC)
    assert (job.backend, job.compile_scope, job.compile_optimizer, job.cpp_wrapper) == ("inductor", "blocks", True, True)
    assert CompileConfig.of(job) == cfg and "," not in cfg.label()


def test_the_space_is_what_the_device_supports(monkeypatch):
    import tcbench.host.env

    monkeypatch.setattr(tcbench.host.env, "cpu_flags", lambda: frozenset({"avx2"}))
    cpu = search_space(SPEC, {})
    assert cpu["compile_mode"] == ("default", "max-autotune-no-cudagraphs") and cpu["precision"] == ("fp32",)
    assert cpu["compile_scope"] == ("model", "blocks", "step") and size_of(cpu) == 2 * 3 * 2 * 1 * 2
    monkeypatch.setattr(tcbench.host.env, "cpu_flags", lambda: frozenset({"amx_bf16"}))
    assert search_space(SPEC, {})["precision"] == ("fp32", "bf16")
    gpu = search_space(SPEC, {"gpu": "NVIDIA H100", "gpu_capability": "9.0"})
    assert "reduce-overhead" in gpu["compile_mode"] and gpu["precision"] == ("fp32", "bf16")
    assert search_space(SPEC, {"gpu": "Tesla V100", "gpu_capability": "7.0"})["precision"] == ("fp32",)
    albert = search_space(dataclasses.replace(SPEC, model="albert-base-v2"), {})
    assert albert["compile_scope"] == ("model", "step")   # ALBERT shares one layer: no repeated block to compile


@pytest.mark.parametrize("space, match", [
    ({"mode": ["default"]}, "space has the field 'mode'; allowed: 'compile_mode'"),
    ({"precision": "fp32"}, r"space\['precision'\]='fp32' is not allowed; it must be a non-empty list"),
    ({"precision": []}, "non-empty list"),
    ({"compile_scope": ["layers"]}, r"space\['compile_scope'\] contains 'layers'; allowed: 'model', 'blocks', 'step'"),
    ({"cpp_wrapper": ["yes"]}, r"space\['cpp_wrapper'\] contains 'yes'; allowed: False, True"),
])
def test_a_bad_space_is_refused_naming_it(space, match):
    with pytest.raises(ValueError, match=match):
        narrow({}, space)


@pytest.mark.parametrize("kwargs, field", [
    (dict(budget_s=0), "budget_s"), (dict(n_trials=0), "n_trials"), (dict(confirm_budget_s=700), "confirm_budget_s"),
    (dict(parity_rtol=-1), "parity_rtol"), (dict(resolve=2), "resolve"),
])
def test_bad_arguments_are_refused_before_any_job(calls, kwargs, field):
    with pytest.raises(tc.SpecError) as e:
        tune_compile(SPEC, **kwargs)
    assert e.value.field == field and not calls


def test_a_bad_sampler_or_a_script_is_refused(calls, tmp_path):
    with pytest.raises(ValueError, match="sampler='gp' is not allowed; use 'tpe', 'random', 'grid'"):
        tune_compile(SPEC, sampler="gp")
    script = tmp_path / "train.py"
    script.write_text("")
    with pytest.raises(tc.SpecError, match="script"):
        tune_compile(tc.JobSpec(script=str(script)))
    assert not calls


def test_every_configuration_once_the_fastest_within_parity_wins(calls, store):
    res = tune_compile(SPEC, budget_s=3600, sampler="grid", pruner="none", confirm=False, store=store)
    assert res.stop_reason == f"every configuration of the space ({size_of(res.space)}) was tried"
    ran = [(s, label) for s, label in calls if s.backend == "inductor"]
    assert len(ran) == size_of(res.space) == 48 and len({label for _, label in ran}) == 48   # none twice
    assert calls[0][0].backend == "eager"                              # the native reference first
    assert ran[0][1] == "inductor · default"                           # then the default configuration
    assert res.best == CompileConfig("max-autotune-no-cudagraphs", "model", False, "bf16", True)
    assert res.table().iloc[0]["label"] == res.best.label()
    assert "not confirmed" in res.answer()
    assert store.comparison_row(res.comparison_id)["kind"] == "tune-compile"


def test_a_configuration_that_breaks_parity_is_rejected_with_its_reason(monkeypatch, store):
    import tcbench.comparison.running
    import tcbench.host.env
    import tcbench.runner.process

    calls: list = []
    monkeypatch.setattr(tcbench.runner.process, "run", fake_run(calls, drift_bf16=0.05))
    monkeypatch.setattr(tcbench.comparison.running, "run", fake_run(calls, drift_bf16=0.05))
    monkeypatch.setattr(tcbench.host.env, "cpu_flags", lambda: frozenset({"avx512_bf16"}))
    res = tune_compile(SPEC, budget_s=3600, sampler="grid", pruner="none", confirm=False, store=store,
                       space={"compile_mode": ["default"], "compile_scope": ["model"], "compile_optimizer": [False]})
    t = res.trials.set_index("label")
    assert t.loc["inductor · bf16", "parity"] is False or t.loc["inductor · bf16", "parity"] == False  # noqa: E712
    assert t.loc["inductor · bf16", "reason"].startswith("rejected: loss parity failed")
    assert t.loc["inductor · bf16", "median_step_ms"] < t.loc["inductor · default", "median_step_ms"]   # faster, yet
    assert res.best == CompileConfig(cpp_wrapper=True)                  # the fastest that kept parity


def test_the_median_pruner_stops_slow_trials_early(calls, store):
    res = tune_compile(SPEC, budget_s=3600, sampler="grid", confirm=False, store=store,
                       space={"precision": ["fp32"], "compile_mode": ["default"]})
    pruned = res.trials[res.trials["state"] == "PRUNED"]
    assert not pruned.empty and pruned["reason"].str.startswith("pruned at step").all()
    ran = {label: s for s, label in calls if s.backend == "inductor"}
    stopped = [label for label in pruned["label"]]
    steps_of = {label: sum(1 for s, lab in calls if lab == label) for label in stopped}
    assert all(v == 1 for v in steps_of.values()) and set(stopped) <= set(ran)
    assert res.best is not None and res.best.label() not in stopped


def test_n_trials_and_the_budget_end_the_search(calls, store):
    res = tune_compile(SPEC, n_trials=3, confirm=False, store=store)
    assert res.stop_reason == "n_trials=3 configurations were tried"
    assert sum(1 for s, _ in calls if s.backend == "inductor") == 3


def test_a_budget_that_ends_before_any_trial_finishes_says_so_with_a_budget_that_fits(calls, store, monkeypatch):
    import tcbench.runner.process

    real = tcbench.runner.process.run

    def slow_compile(spec, *args, **kwargs):   # every compiled trial is stopped by its timeout before a steady step
        if spec.backend == "eager":
            return real(spec, *args, **kwargs)
        calls.append((spec, kwargs.get("label", "")))
        time.sleep(0.4)   # longer than all the search's budget (at most 0.5 s less the confirmation's third)
        return JobResult(spec=spec, status="failed", run_id=len(calls), label=kwargs.get("label", ""),
                         error=f"timed out after timeout_s={spec.timeout_s:g} s; the steps measured so far are kept")

    monkeypatch.setattr(tcbench.runner.process, "run", slow_compile)
    res = tune_compile(SPEC, budget_s=0.5, store=store)
    assert sum(1 for s, _ in calls if s.backend == "inductor") == 1 and res.best is None and res.confirmation is None
    assert res.stop_reason.startswith("budget: no trial finished within the 0 s that the budget of 0.5 s left")
    assert res.answer().startswith("no configuration was measured: no trial finished")
    assert res.answer().endswith("A budget of more than 10 s fits one trial and the confirmation's share")
    assert "was stopped after" in res.answer()
    ok = tune_compile(SPEC, budget_s=0.5, confirm=False, store=store, space={"compile_scope": ["model"]})
    assert ok.stop_reason.endswith("A budget of more than 10 s fits one trial")   # no confirmation, no share


def test_a_resumed_study_runs_only_what_is_missing_and_refuses_other_settings(calls, store, tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    first = tune_compile(SPEC, n_trials=3, storage=url, study_name="s", confirm=False, store=store)
    before = sum(1 for s, _ in calls if s.backend == "inductor")
    again = tune_compile(SPEC, n_trials=5, storage=url, study_name="s", confirm=False, store=store)
    after = sum(1 for s, _ in calls if s.backend == "inductor")
    assert before == 3 and after - before == 2                          # only the two missing configurations ran
    assert set(first.trials["number"]) < set(again.trials["number"])
    with pytest.raises(ValueError, match="study 's' was started with other settings \\(spec differ\\)"):
        tune_compile(dataclasses.replace(SPEC, batch_size=4), n_trials=5, storage=url, study_name="s", store=store)


def test_the_confirmation_gives_both_speedups_with_intervals(calls, store):
    res = tune_compile(SPEC, budget_s=3600, n_trials=6, confirm_budget_s=600, store=store,
                       space={"compile_scope": ["model"], "compile_optimizer": [False]})
    cmp = res.confirmation
    assert cmp is not None and cmp.kind == "tune-compile-confirm"
    assert cmp.rule.budget_s == 600   # its share of the budget, not all that the quick search left
    assert cmp.backends == ["eager", "inductor · default", res.best.label()]
    sp, lo, hi = res.vs_native
    assert lo <= sp <= hi and lo > 1                                     # 20 ms native vs < 10 ms compiled
    vs, vlo, vhi = res.vs_default
    assert vlo <= vs <= vhi and vs > 1 and res.vs_default_verdict.startswith("faster")
    assert res.best.label() in res.answer() and "against the default compiled configuration: faster" in res.answer()
    assert cmp.spec_for(res.best.label()) == res.best.apply(res.spec)   # each label ran its own configuration
    assert {s.precision for s, label in calls if label == res.best.label()} == {res.best.precision}


def test_best_config_skips_rejected_duplicate_and_unfinished_trials():
    import pandas as pd

    from tcbench.tuning.compile_search.search import TRIAL_COLUMNS

    rows = [dict(number=0, label="a", compile_mode="default", compile_scope="model", compile_optimizer=False,
                 precision="fp32", cpp_wrapper=False, state="COMPLETE", median_step_ms=10.0, parity=True),
            dict(number=1, label="b", compile_mode="default", compile_scope="model", compile_optimizer=False,
                 precision="bf16", cpp_wrapper=False, state="COMPLETE", median_step_ms=5.0, parity=False),
            dict(number=2, label="c", compile_mode="default", compile_scope="blocks", compile_optimizer=False,
                 precision="fp32", cpp_wrapper=False, state="PRUNED", median_step_ms=4.0, parity=None),
            dict(number=3, label="a", compile_mode="default", compile_scope="model", compile_optimizer=False,
                 precision="fp32", cpp_wrapper=False, state="COMPLETE", median_step_ms=10.0, parity=True,
                 duplicate_of=0)]
    t = pd.DataFrame(rows, columns=TRIAL_COLUMNS)
    assert best_config(t) == CompileConfig()
    assert best_config(t.iloc[1:3]) is None
