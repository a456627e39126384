"""compare()'s rounds: fixed, or added until the verdict at the asked resolution is decided, the budget is spent, the
maximum is reached or a job cannot run — and the result says which. The job runner is a stand-in here (synthetic
step times with a known ratio); real jobs are in test_comparison.py."""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import time
import types
from pathlib import Path

import numpy as np
import pytest

import tcbench.comparison as cmp_mod
from tcbench import JobSpec
from tcbench.core.results import JobResult, StepRecord
from tcbench.measure import interval, metrics
from tcbench.measure.metrics import job_figures

SPEC = JobSpec(model="gpt2", size="tiny", batch_size=8, seq_len=32, steps=30, warmup_steps=2, threads=1)


def _fake(ratio: float | dict[str, float] = 1.0, process_sd: float = 0.01, fail_at: int | None = None,
          seconds_per_job: float = 1.0, seed: int = 0, loaded: bool = False, cold_compile_s: float = 0.0,
          first_launch_s: float = 0.0, cold_offset: float | None = None, others_share: float | None = None):
    """A stand-in for the job runner: steps of 25 ms natively, 25/ratio ms compiled (``ratio``: one for every backend,
    or one per backend), each process ``process_sd`` (log)
    off its truth; the ``fail_at``-th job fails; ``loaded``: every job had the CPU a third of its wall time (noisy).
    Each job advances the fake clock by ``seconds_per_job``, and the first compiled one by ``cold_compile_s`` more
    (its compile filled an empty cache); the first job waits ``first_launch_s`` for its process (a launcher's
    imports). ``cold_offset``: the compiled job that filled the empty cache steps that much (log) slower than its
    truth, and the later ones say they loaded it warm. ``others_share``: other processes used every job's CPU that
    share of the time (above 10 %: noisy, with its reason)."""
    rng = np.random.default_rng(seed)
    clock = [0.0]
    calls: list = []

    def run(spec, observer=None, stop=None, store=None, comparison_id=None, round=0, job=None, label="", draw=None,
            turns=None):
        calls.append((spec.backend, round))
        clock[0] += seconds_per_job
        cold = spec.backend != "eager" and not any(b == spec.backend for b, _ in calls[:-1])
        clock[0] += cold_compile_s if cold else 0.0
        waited = first_launch_s if len(calls) == 1 else 0.0
        clock[0] += waited
        truth = ratio.get(spec.backend, 1.0) if isinstance(ratio, dict) else ratio
        level = 0.025 / (truth if spec.backend != "eager" else 1.0) * math.exp(rng.normal(0, process_sd))
        level *= math.exp(cold_offset) if cold and cold_offset is not None else 1.0
        recs = [StepRecord(step=i, step_s=float(level * math.exp(rng.normal(0, 0.02))), samples_s=1.0, tokens_s=1.0,
                           mem_bytes=2**20, loss=None, warmup=i < 2, seq_len=32, cpu_s=level / (3 if loaded else 1))
                for i in range(30)]
        status = "failed" if len(calls) == fail_at else "ok"
        res = JobResult(spec=spec, status=status, run_id=len(calls), records=recs, round=round, label=label,
                        figures=job_figures(recs, 8, 2, threads=1, others_share=others_share), error="boom" if status == "failed" else "",
                        cache_state="cold" if cold else "warm" if cold_offset is not None and spec.compiled else "")
        res.extra.start_s, res.wall_s = waited, seconds_per_job + (cold_compile_s if cold else 0.0) + waited
        if cold:
            res.figures = dataclasses.replace(res.figures, compile_latency_s=cold_compile_s)
        if store is not None:
            res.run_id = store.insert_run(spec, comparison_id, round, label=label)
            store.add_steps(res.run_id, recs)
            store.finish_run(res)
        return res

    return run, calls, clock


def _in_order(cmp, order, rnd, observer, session, store, draw):
    def one(label):
        spec = cmp.spec_for(label)
        return cmp_mod.running.run(spec, observer, session.stop, store, cmp.comparison_id, rnd, f"{label}#{rnd}",
                                   label=label if label != spec.backend else "", draw=draw)
    return [one(label) for label in order]


@pytest.fixture
def fake(monkeypatch):
    def install(**kw):
        run, calls, clock = _fake(**kw)
        monkeypatch.setattr(cmp_mod.running, "run", run)
        monkeypatch.setattr(cmp_mod.running, "time", types.SimpleNamespace(monotonic=lambda: clock[0], time=time.time))
        # a stand-in job takes no turns (tests/runner/test_turns.py runs real ones): a lock-step round runs them in
        # its order, so the draws are the same whichever pairing ran
        monkeypatch.setattr(cmp_mod.running, "_lockstep_round", _in_order)
        return calls
    return install


def test_rounds_are_added_until_the_interval_is_within_the_resolution(store, fake):
    calls = fake(ratio=1.1, process_sd=0.02)
    cmp = cmp_mod.compare(SPEC, rounds=None, resolve=0.05, budget_s=None, store=store)
    row = cmp.row("inductor")
    assert cmp.stop_reason.startswith("resolution reached") and "±5%" in cmp.stop_reason
    assert cmp.rounds >= interval.PILOT_ROUNDS and len(calls) == 2 * cmp.rounds
    assert row.resolution <= 0.05 and row.verdict_kind == "faster"
    stored = store.comparison_row(cmp.comparison_id)
    assert int(stored["rounds"]) == cmp.rounds and json.loads(stored["info_json"])["stop_reason"] == cmp.stop_reason
    again = cmp_mod.load_comparison(cmp.comparison_id, store)
    assert again.rule == cmp.rule and again.stop_reason == cmp.stop_reason and again.rounds == cmp.rounds
    assert again.row("inductor").speedup == pytest.approx(row.speedup)


def test_the_budget_ends_the_rounds_and_says_so(store, fake):
    calls = fake(process_sd=0.2, seconds_per_job=5.0)        # too noisy for ±5 %: the budget decides
    cmp = cmp_mod.compare(SPEC, resolve=0.05, budget_s=42, store=store)
    assert cmp.stop_reason.startswith("budget spent") and "budget_s=42" in cmp.stop_reason
    assert cmp.rounds == 4 and len(calls) == 8        # 4 rounds took 40 s; a fifth would end at 50 s
    assert cmp.row("inductor").resolution > 0.05


def test_a_decided_label_sits_out_while_another_is_open_and_both_say_how_many_rounds_they_ran(store, fake):
    """xla at 0.35× is decided after three rounds (its 99.9 % interval excludes 1): the budget's later rounds run
    the eager/inductor pair, the open question, and are cheaper for it (2 jobs of 1 s, not 3)."""
    calls = fake(ratio={"inductor": 1.0, "xla": 0.35}, process_sd=0.04, seconds_per_job=1.0)
    cmp = cmp_mod.compare(SPEC, backends=["inductor", "xla"], resolve=0.05, budget_s=25, store=store)
    ran = {b: [r for backend, r in calls if backend == b] for b in ("eager", "inductor", "xla")}
    assert ran["xla"][:3] == [0, 1, 2] and 3 not in ran["xla"] and len(ran["eager"]) == cmp.rounds
    assert len(ran["xla"]) < cmp.rounds and ran["inductor"] == ran["eager"]   # the open question: every round
    xla = cmp.row("xla")
    assert xla.verdict_kind == "slower" and xla.rounds == len(ran["xla"])
    assert f"from the {len(ran['xla'])} of {cmp.rounds} rounds it ran" in xla.verdict
    assert f"xla sat out {cmp.rounds - len(ran['xla'])} of them (decided or resolved early)" in cmp.stop_reason
    assert "sat out" not in cmp.row("inductor").verdict
    again = cmp_mod.load_comparison(cmp.comparison_id, store)
    assert again.row("xla").verdict == xla.verdict


@pytest.mark.parametrize("loaded", [False, True])
def test_a_label_with_a_disturbed_round_never_sits_out_as_decided(store, fake, loaded):
    """A disturbed job makes the verdict inconclusive whatever the interval: such a label is not decided, and keeps
    running (``loaded``: every job had the CPU a third of its wall time). Too noisy to be resolved at ±5 %, xla at
    0.35× is decided and sits out when its jobs were not disturbed."""
    calls = fake(ratio={"inductor": 1.0, "xla": 0.35}, process_sd=0.08, seconds_per_job=1.0, loaded=loaded)
    cmp = cmp_mod.compare(SPEC, backends=["inductor", "xla"], resolve=0.05, budget_s=25, store=store)
    ran = [r for b, r in calls if b == "xla"]
    if loaded:   # never decided: it runs every round until it is resolved at least
        first = next((i for i, r in enumerate(ran) if r != i), len(ran))   # the rounds it ran before sitting out
        assert first > 3 and (first == cmp.rounds or cmp.rule.resolved(cmp._logs("xla")[:first]))
        assert cmp.row("xla").verdict_kind == "inconclusive"
    else:
        assert ran == [0, 1, 2] < list(range(cmp.rounds)) and cmp.row("xla").verdict_kind == "slower"


def test_a_round_the_user_stopped_midway_is_not_counted_as_sat_out(store, fake, monkeypatch):
    import threading

    fake(ratio={"inductor": 1.0, "xla": 0.35})
    stop, inner = threading.Event(), cmp_mod.running.run

    def run(spec, *args, **kw):
        if kw.get("round", args[4] if len(args) > 4 else 0) == 1:
            stop.set()   # the user stops as round 1's first job (xla: round 1 runs in reverse) ends
        return inner(spec, *args, **kw)

    monkeypatch.setattr(cmp_mod.running, "run", run)
    cmp = cmp_mod.compare(SPEC, backends=["inductor", "xla"], store=store, stop=stop, pairing="sequential")
    assert cmp.stop_kind == "stopped" and cmp.rounds == 2 and [r.name for r in cmp.results][-1] == "xla"
    assert cmp.sat_out("inductor") == cmp.sat_out("xla") == 0 and "sat out" not in cmp.row("inductor").verdict


def test_max_rounds_ends_the_rounds(store, fake):
    fake(process_sd=0.2)
    cmp = cmp_mod.compare(SPEC, resolve=0.01, budget_s=None, max_rounds=6, store=store)
    assert cmp.stop_reason == "max_rounds=6 reached" and cmp.rounds == 6


def test_a_job_that_cannot_run_ends_the_rounds(store, fake):
    calls = fake(fail_at=3)
    cmp = cmp_mod.compare(SPEC, store=store)
    assert cmp.stop_reason == "inductor round 1 ended failed" and len(calls) == 4   # round 1 runs B A
    assert cmp.row("inductor").verdict_kind == "inconclusive"


def test_the_default_is_adaptive_and_fixed_rounds_stay_fixed(store, fake):
    calls = fake(ratio=1.0, process_sd=0.005)
    cmp = cmp_mod.compare(SPEC, store=store)
    assert cmp.rule == interval.RoundsRule(resolve=cmp_mod.DEFAULT_RESOLVE, budget_s=cmp_mod.DEFAULT_BUDGET_S)
    fixed = cmp_mod.compare(SPEC, rounds=3, store=store)
    assert fixed.rule is None and fixed.rounds == 3 and fixed.stop_reason == "all rounds ran"
    assert len(calls) == 2 * cmp.rounds + 6


@pytest.mark.parametrize("kw, field", [(dict(resolve=0), "resolve=0"), (dict(resolve="5%"), "resolve='5%'"),
                                       (dict(resolve=1.5), "resolve=1.5"), (dict(budget_s=-1), "budget_s=-1"),
                                       (dict(resolve=0.05, rounds=1), "rounds=1"),
                                       (dict(resolve=0.05, max_rounds=1), "max_rounds=1")])
def test_bad_rounds_arguments_are_named_before_any_job(store, fake, kw, field):
    calls = fake()
    with pytest.raises(ValueError, match=field.replace("(", r"\(")):
        cmp_mod.compare(SPEC, store=store, **kw)
    assert calls == []


def test_an_a_a_pair_is_judged_like_any_pair(store, fake):
    """No special case: an A/A pair whose interval excludes 1 says so (how often is measured, not hidden)."""
    fake(ratio=1.0, process_sd=0.001)
    cmp = cmp_mod.compare(SPEC, backends=["eager"], rounds=3, store=store)
    kind = cmp.row("eager (A/A)").verdict_kind
    assert kind in ("faster", "slower", "no measurable difference")
    for code in (inspect.getsource(cmp_mod.Comparison._pair_fields), inspect.getsource(metrics.verdict),
                 inspect.getsource(interval)):
        assert "A/A" not in code and "AA" not in code


def _alone(cmp) -> tuple:
    return interval.ratio_interval([([s.step_s for s in metrics.steady(a.records)],
                                     [s.step_s for s in metrics.steady(b.records)])
                                    for a, b in cmp.complete_pairs("inductor")],
                                   pilot=cmp.rule.pilot if cmp.rule else None)


def test_earlier_comparisons_that_disagree_are_a_warning_never_a_wider_interval(store, fake):
    """Three earlier comparisons of the same spec on this host measured 0.92×, 1.0× and 1.12× (each tight: the
    machine drifts). The next one's interval is its own rounds' (a later comparison is never wider for being later),
    its warnings say how far the speedup moved, and asked for ±5 % it still adds rounds until it gets there."""
    for seed, ratio in enumerate((0.92, 1.0, 1.12)):
        fake(ratio=ratio, process_sd=0.01, seed=seed)
        cmp_mod.compare(SPEC, rounds=3, store=store)
    fake(ratio=1.05, process_sd=0.01, seed=7)
    fixed = cmp_mod.compare(SPEC, rounds=3, store=store)
    tau, k = fixed.between["inductor"]
    assert k == 3 and 0.04 < tau < 0.15, fixed.between
    row = fixed.row("inductor")
    assert (row.speedup, row.speedup_ci_low, row.speedup_ci_high) == pytest.approx(_alone(fixed))
    assert row.verdict_kind == "faster" and "earlier" not in row.verdict
    assert any(w.startswith("drift between comparisons: the speedup moved") and "3 earlier" in w
               for w in row.warnings), row.warnings
    again = cmp_mod.load_comparison(fixed.comparison_id, store)
    assert again.between == fixed.between and again.row("inductor").speedup_ci_low == pytest.approx(row.speedup_ci_low)
    fake(ratio=1.05, process_sd=0.01, seed=8)
    adaptive = cmp_mod.compare(SPEC, resolve=0.05, budget_s=None, store=store)
    assert adaptive.stop_kind == "resolved" and adaptive.stop_reason.startswith("resolution reached")


def test_a_steady_machine_warns_of_nothing_and_loaded_comparisons_do_not_count(store, fake):
    for seed in range(3):
        fake(ratio=1.1, process_sd=0.01, seed=seed)
        cmp_mod.compare(SPEC, rounds=3, store=store)
    fake(ratio=1.1, process_sd=0.01, seed=5)
    other = cmp_mod.compare(SPEC.replace(batch_size=4), rounds=3, store=store)
    assert other.between == {}                      # no earlier comparison of that spec
    fake(ratio=1.1, process_sd=0.01, seed=6)
    same = cmp_mod.compare(SPEC, rounds=3, store=store)
    assert same.between == {} and same.row("inductor").verdict_kind == "faster"   # they agree: nothing to say
    assert (same.row("inductor").speedup_ci_low, same.row("inductor").speedup_ci_high) == pytest.approx(
        _alone(same)[1:])
    # loaded comparisons far from the rest: disturbed rounds never count, so they neither warn nor widen
    for seed, ratio in enumerate((0.7, 1.5, 0.8), start=10):
        fake(ratio=ratio, process_sd=0.01, seed=seed, loaded=True)
        assert cmp_mod.compare(SPEC, rounds=3, store=store).row("inductor").verdict_kind == "inconclusive"
    fake(ratio=1.1, process_sd=0.01, seed=20)
    quiet = cmp_mod.compare(SPEC, rounds=3, store=store)
    assert quiet.between == {} and quiet.row("inductor").verdict_kind == "faster"


def test_a_disturbance_both_jobs_of_a_lock_step_round_share_is_a_warning_not_a_void(store, fake, monkeypatch):
    """Other processes used every job's CPU 12 % of the time (on a quiet 2-core VM lock-step jobs were flagged at
    10-17 %, 19 of 20 A/A comparisons voided). In lock-step rounds both jobs take turns on the same CPU, so a
    moderate disturbance reaches both and the interval counts it: the verdict stands, with a warning that says so,
    also once reloaded and in adaptive rounds (a decided label sits out). Sequential rounds' jobs saw different
    moments: the same flags void the verdict. A heavy disturbance (40 %) voids it in both."""
    monkeypatch.setattr(cmp_mod.running, "nvidia_gpus", lambda: [])
    fake(ratio=1.3, process_sd=0.005, others_share=0.12)
    lock = cmp_mod.compare(SPEC, rounds=3, store=store)
    row = lock.row("inductor")
    assert lock.pairing == "lockstep" and all(r.noisy for r in lock.results), [r.noise_reason for r in lock.results]
    assert row.verdict_kind == "faster" and "stop other work" not in row.verdict, row.verdict
    assert any("6 of 6 jobs ran beside other work" in w and "lock-step" in w for w in row.warnings), row.warnings
    assert cmp_mod.load_comparison(lock.comparison_id, store).row("inductor").verdict_kind == "faster"
    fake(ratio={"inductor": 1.3, "xla": 1.01}, process_sd=0.005, others_share=0.12)
    both = cmp_mod.compare(SPEC, backends=["inductor", "xla"], resolve=0.05, budget_s=None, max_rounds=8, store=store)
    assert both.sat_out("inductor") > 0, both.stop_reason   # decided beside the shared disturbance: it sat out
    fake(ratio=1.3, process_sd=0.005, others_share=0.12)
    seq = cmp_mod.compare(SPEC, rounds=3, store=store, pairing="sequential")
    assert seq.row("inductor").verdict_kind == "inconclusive" and "stop other work" in seq.row("inductor").verdict
    fake(ratio=1.3, process_sd=0.005, others_share=0.4)
    heavy = cmp_mod.compare(SPEC, rounds=3, store=store)
    assert heavy.pairing == "lockstep" and heavy.row("inductor").verdict_kind == "inconclusive"


@pytest.mark.parametrize("pairing, counted", [("lockstep", True), ("sequential", False)])
def test_earlier_lock_step_comparisons_with_a_shared_disturbance_are_tested_for_drift(store, fake, monkeypatch,
                                                                                     pairing, counted):
    """Three earlier comparisons measured 0.92×, 1.0× and 1.12×, every job beside other work at 12 % (a quiet 2-core
    VM flags most lock-step jobs so). In lock-step rounds that disturbance counted in each one's own interval, so it
    counts in the drift test of the next comparison too, which warns; in sequential rounds it voided them, and they
    are left out of it (nothing to warn of). The next comparison's interval is its own rounds' either way."""
    monkeypatch.setattr(cmp_mod.running, "nvidia_gpus", lambda: [])
    for seed, ratio in enumerate((0.92, 1.0, 1.12)):
        fake(ratio=ratio, process_sd=0.01, seed=seed, others_share=0.12)
        earlier = cmp_mod.compare(SPEC, rounds=3, store=store, pairing=pairing)
        assert all(r.noisy for r in earlier.results) and earlier.pairing == pairing
    fake(ratio=1.05, process_sd=0.01, seed=7)
    cmp = cmp_mod.compare(SPEC, rounds=3, store=store, pairing=pairing)
    assert ("inductor" in cmp.between) == counted, cmp.between
    if counted:
        tau, k = cmp.between["inductor"]
        assert k == 3 and 0.04 < tau < 0.15
    row = cmp.row("inductor")
    assert (row.speedup, row.speedup_ci_low, row.speedup_ci_high) == pytest.approx(_alone(cmp))


def test_the_budget_never_leaves_a_single_round(store, fake):
    """A first round slower than the whole budget (a cold compile) still gets a second: one round has no spread
    between processes to give an interval across runs."""
    calls = fake(ratio=1.1, process_sd=0.01, seconds_per_job=40.0)
    cmp = cmp_mod.compare(SPEC, resolve=0.05, budget_s=60, store=store)
    assert cmp.rounds == 2 and len(calls) == 4 and cmp.stop_reason.startswith("budget spent")
    assert "single round" not in cmp.row("inductor").verdict


def test_a_round_that_compiled_into_the_empty_cache_is_left_out_of_the_ratio_once_two_warm_rounds_are_complete(
        store, fake):
    """On a fresh store, round 0's compiled job fills the empty cache and every later one loads it warm: that round's
    steps are not the warm jobs' (0.059 log off, on average, in 9 demos). Once two warm rounds are complete it is
    left out of the ratio (and of a reloaded comparison's), and the verdict says so; with fewer it is kept."""
    fake(ratio=1.0, process_sd=0.005, cold_offset=0.2)
    cmp = cmp_mod.compare(SPEC, rounds=4, store=store)
    row = cmp.row("inductor")
    assert cmp.cold_round("inductor") == 0 and [b.round for _, b in cmp.ratio_pairs("inductor")] == [1, 2, 3]
    # round 0 alone: 0.82×; pooled with it, 0.95×
    assert row.rounds == 4 and 0.98 < row.speedup < 1.02 and row.speedup_ci_low <= 1.0 <= row.speedup_ci_high
    assert "round 0 left out of the ratio" in row.verdict
    again = cmp_mod.load_comparison(cmp.comparison_id, store).row("inductor")
    assert (again.speedup, again.speedup_ci_low) == (row.speedup, row.speedup_ci_low)

    fake(ratio=1.0, process_sd=0.005, cold_offset=0.2)
    two = cmp_mod.compare(SPEC, rounds=2, store=store)
    assert len(two.ratio_pairs("inductor")) == 2 and "left out" not in two.row("inductor").verdict
    # jobs that each compile (cache="cold", or xla) have no cold round to leave out
    assert cmp_mod.result.cold_round({0: "cold", 1: "cold", 2: "cold"}, shared=True) is None
    assert cmp_mod.result.cold_round({0: "cold", 1: "warm"}, shared=False) is None


def test_rounds_take_turns_by_default_on_a_cpu_and_run_one_after_the_other_where_jobs_cannot(store, fake,
                                                                                              monkeypatch):
    """``pairing="auto"`` (the default): lock-step rounds where every job is one process (tcbench's worker, or a
    script's tracker) and no GPU is present (they spread 2-10 times less than sequential ones on this CPU);
    sequential where a job cannot take turns (a data-parallel job) or on a GPU, whose jobs would
    hold its memory together. The comparison says which ran, stored too; asking for lock-step where it cannot run is
    refused by name before anything starts."""
    fake(ratio=1.1, process_sd=0.005)
    monkeypatch.setattr(cmp_mod.running, "nvidia_gpus", lambda: [])
    cmp = cmp_mod.compare(SPEC, rounds=2, store=store)
    assert cmp.pairing == "lockstep" and cmp_mod.load_comparison(cmp.comparison_id, store).pairing == "lockstep"
    assert 1.08 < cmp.row("inductor").speedup < 1.12
    assert cmp_mod.compare(SPEC, rounds=2, store=store, pairing="sequential").pairing == "sequential"
    script = str(Path(__file__).resolve().parents[2] / "examples" / "train_loop.py")
    assert cmp_mod.compare_script(script, rounds=2, store=store).pairing == "lockstep"
    ddp = dataclasses.replace(SPEC, nproc=2)
    assert cmp_mod.compare(ddp, rounds=2, store=store).pairing == "sequential"
    with pytest.raises(ValueError, match=r"pairing='lockstep' is not allowed for a data-parallel job \(nproc=2\)"):
        cmp_mod.compare(ddp, rounds=2, store=store, pairing="lockstep")
    monkeypatch.setattr(cmp_mod.running, "nvidia_gpus", lambda: [("NVIDIA H200", 139.8)])
    assert cmp_mod.compare(SPEC, rounds=2, store=store).pairing == "sequential"


def test_the_budget_counts_the_rounds_not_the_one_off_cold_compile(store, fake):
    """A GPU's cold compile (an H200's 63 s for gpt2 base) is paid once: the budget is the rounds' seconds, so a
    comparison whose first compile outlasts the budget still runs the rounds the budget pays for, and says what it
    left out."""
    calls = fake(process_sd=0.2, seconds_per_job=5.0, cold_compile_s=63.0)
    cmp = cmp_mod.compare(SPEC, resolve=0.05, budget_s=42, store=store, pairing="sequential")   # as on a GPU
    assert cmp.rounds == 4 and len(calls) == 8        # as without the compile: 4 rounds took 40 s, a fifth ends at 50
    assert "budget_s=42" in cmp.stop_reason and "63 s of cold compiles, not counted" in cmp.stop_reason
    # the advice gives the budget the rule's pilot needs at what a round took, the cold compile left out
    assert cmp_mod.result.round_s(cmp.results) == 10.0
    assert ("a round took about 10 s here, and the rule's first 6 rounds (its pilot) need about budget_s=60"
            in cmp.row("inductor").verdict), cmp.row("inductor").verdict
    # the compile of a second round's process is not one-off: it counts
    later = cmp_mod.running.one_off_compile_s
    first, second = cmp.by_backend("inductor")[:2]
    second.cache_state, second.figures = "cold", dataclasses.replace(second.figures, compile_latency_s=30.0)
    assert later([first, second]) == 63.0 and later([second, first]) == 30.0


def test_the_budget_does_not_count_the_first_rounds_wait_for_its_launchers(store, fake):
    """The first round's jobs wait for their launchers' imports (5-10 s each); later rounds' launchers import while
    the round before runs. The budget counts the rounds, and says what it left out."""
    calls = fake(process_sd=0.2, seconds_per_job=5.0, first_launch_s=9.0, cold_compile_s=20.0)
    cmp = cmp_mod.compare(SPEC, resolve=0.05, budget_s=42, store=store)
    assert cmp.rounds == 4 and len(calls) == 8        # as without the wait: 4 rounds took 40 s, a fifth ends at 50
    assert "(and 20 s of cold compiles and 9 s of first launches, not counted)" in cmp.stop_reason
    stored = cmp_mod.load_comparison(cmp.comparison_id, store)
    assert cmp_mod.running.first_launch_s(stored.results) == 9.0
    assert cmp_mod.result.round_s(stored.results) == cmp_mod.result.round_s(cmp.results) == 10.0   # as stored
    assert cmp_mod.result.round_s(cmp.results, together=True) == 5.0   # lock-step: a round lasts its longest job


def test_earlier_comparisons_are_found_by_their_spec_fields_not_its_stored_text(store, fake):
    """Earlier comparisons whose stored spec is the same job written otherwise (its keys in another order, a field
    an older tcbench did not have yet left out, one this tcbench no longer knows added) still count."""
    import sqlite3

    for seed, ratio in enumerate((0.92, 1.0, 1.12)):
        fake(ratio=ratio, process_sd=0.01, seed=seed)
        cmp_mod.compare(SPEC, rounds=3, store=store)
    con = sqlite3.connect(store.path)
    for cid, text in con.execute("SELECT comparison_id, spec_json FROM comparisons").fetchall():
        fields = json.loads(text)
        assert fields.pop("noise_micro_batches") == JobSpec().noise_micro_batches   # a default an older one lacked
        other = json.dumps({"retired_field": 1, **dict(reversed(list(fields.items())))})
        assert other != text and JobSpec.from_stored(other).to_dict() == JobSpec.from_stored(text).to_dict()
        con.execute("UPDATE comparisons SET spec_json = ? WHERE comparison_id = ?", (other, cid))
    con.commit()
    con.close()
    fake(ratio=1.05, process_sd=0.01, seed=7)
    fixed = cmp_mod.compare(SPEC, rounds=3, store=store)
    assert fixed.between["inductor"][1] == 3, fixed.between


def test_a_variant_label_may_contain_commas_and_is_loaded_back_as_it_was(store, fake):
    fake(ratio=1.1, process_sd=0.01)
    label = "inductor: max-autotune, bf16"
    cmp = cmp_mod.compare_configs(SPEC, {label: SPEC.replace(backend="inductor")}, rounds=2, store=store)
    assert cmp.backends == ["eager", label]
    assert store.comparison_labels(cmp.comparison_id) == ["eager", label]
    again = cmp_mod.load_comparison(cmp.comparison_id, store)
    assert again.backends == ["eager", label] and set(again.variants) == {label}
    assert again.row(label).speedup == pytest.approx(cmp.row(label).speedup)
