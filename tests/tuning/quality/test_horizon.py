"""The projection of a study to the horizon a user trains for (``tcbench.tuning.quality.projection``), on runs whose
factors are known: the times, the break-even horizon on either side, the seed-paired interval, and what it says."""

from __future__ import annotations

import math

import pytest
from scipy import stats

import tcbench as tc
from tcbench.core.extras import EvalPoint
from tcbench.tuning.quality.projection import Factors, break_even, factors, project, still_falling, time_curves
from tcbench.tuning.quality.view import horizon_sentence
from tcbench.tuning.quality.study import Candidate, QualityResult, QualityRun

REF = tc.JobSpec(model="gpt2", size="tiny", batch_size=4, seq_len=32, steps=20, threads=1)
JITTER = {0: 1.0, 1: 1.03, 2: 0.98}   # the seeds' throughput differs a little


def _run(label: str, seed: int, compile_s: float, s_per_sample: float, samples: int, reached: bool = True):
    train = samples * s_per_sample * JITTER[seed]
    return QualityRun(label=label, seed=seed, run_id=None, status="ok", reached=reached,
                      time_s=compile_s + train if reached else None, samples=samples if reached else None,
                      steps=None, compile_s=compile_s or None, cache="warm" if compile_s else "")


def _study(*cands: tuple[str, tc.JobSpec, float, float, int], ref=(0.0, 0.01, 80)) -> QualityResult:
    candidates = [Candidate("native", REF)] + [Candidate(label, spec) for label, spec, *_ in cands]
    runs = [_run("native", s, *ref) for s in JITTER]
    for label, _, c, k, n in cands:
        runs += [_run(label, s, c, k, n) for s in JITTER]
    return QualityResult(target=3.0, target_source="given", candidates=candidates, runs=runs, horizon_steps=5000)


def test_a_compile_paid_once_breaks_even_where_the_steps_have_paid_it_back():
    # reference: 0.01 s a sample; compiled: 10 s of compile, then 0.005 s a sample, the same samples to target
    res = _study(("inductor", REF.replace(backend="inductor"), 10.0, 0.005, 80))
    [p] = project(res, 5000)
    assert p.break_even_kind == "sooner above" and p.break_even_steps == pytest.approx(10 / (4 * 0.005))   # 500
    # at 5,000 steps (20,000 samples): 200 s against 10 + 100 s (each seed's jitter scales both sides' steps)
    per_seed = [200 * j / (10 + 100 * j) for j in JITTER.values()]
    assert p.speedup == pytest.approx(math.prod(per_seed) ** (1 / 3)) and p.seeds == 3
    assert p.time_s == pytest.approx(10 + 20000 * 0.005)
    [short] = project(res, 100)
    assert short.speedup < 1 and short.high < 1   # at 100 steps the compile is most of it: decisively later
    text = horizon_sentence(p, "native")
    assert text.startswith("at 5,000 steps, inductor reaches the reference's quality sooner: 1.82×")
    assert text.endswith("on the medians, native is sooner below 500 steps")


def test_the_interval_is_the_seed_paired_t_interval_of_the_projected_times():
    res = _study(("b8", REF.replace(batch_size=8), 0.0, 0.006, 120))
    res.runs = [r if r.label == "native" else QualityRun(**{**r.__dict__, "samples": 120 + 8 * r.seed,
                                                            "time_s": (120 + 8 * r.seed) * 0.006 * (1 + 0.05 * r.seed)})
                for r in res.runs]
    [p] = project(res, 1000)
    ref = {r.seed: factors(r) for r in res.runs if r.label == "native"}
    logs = []
    for r in res.runs:
        if r.label == "b8":
            f, g = factors(r), ref[r.seed]
            ratio = f.samples / g.samples
            logs.append(math.log((4000 * g.s_per_sample) / (ratio * 4000 * f.s_per_sample)))
    mean, sd = sum(logs) / 3, stats.tstd(logs)
    half = stats.t.ppf(0.975, 2) * sd / math.sqrt(3)
    assert (p.speedup, p.low, p.high) == pytest.approx((math.exp(mean), math.exp(mean - half), math.exp(mean + half)))
    assert "conservative" in p.note   # a bigger batch's samples ratio measured early
    assert p.break_even_kind in ("always sooner", "never sooner")   # neither compiles: one side at every horizon


def test_each_side_of_the_break_even_and_a_candidate_without_pairs():
    ref = (5.0, 0.004, 80)   # a reference that compiles too
    res = _study(("cheap compile, slow step", REF, 1.0, 0.006, 80), ("slow at everything", REF, 9.0, 0.008, 80),
                 ("never reached", REF, 0.0, 0.001, 80), ref=ref)
    res.runs = [QualityRun(**{**r.__dict__, "reached": False, "time_s": None}) if r.label == "never reached" else r
                for r in res.runs]
    below, never, unknown = project(res, 2000)
    assert below.break_even_kind == "sooner below" and below.break_even_steps == pytest.approx(4 / (4 * 0.002))
    assert horizon_sentence(below, "native").endswith("on the medians, native is sooner above 500 steps")
    assert never.break_even_kind == "never sooner" and never.break_even_steps is None and never.high < 1
    assert unknown.speedup is None and unknown.break_even_kind == "unknown"
    assert "not projected" in horizon_sentence(unknown, "x")
    assert break_even(factors(res.runs[0]), factors(res.runs[0]), 1.0, 4) == (None, "never sooner")   # a tie
    # a crossing below one step is no horizon anyone trains for: one side is sooner at every horizon
    ref_f = Factors(compile_s=0.010, s_per_sample=0.003, samples=96)
    assert break_even(ref_f, Factors(0.009, 0.0023, 176), 1.83, 4) == (None, "never sooner")
    assert break_even(ref_f, Factors(0.011, 0.0010, 96), 1.0, 4) == (None, "always sooner")
    assert "on the medians, later than native at every horizon" in horizon_sentence(never, "native")


def test_describe_leads_with_the_horizon_and_bad_horizons_are_named():
    res = _study(("inductor", REF.replace(backend="inductor"), 10.0, 0.005, 80))
    assert res.describe().splitlines()[0].startswith("at 5,000 steps, inductor reaches the reference's quality")
    table = res.projection(100)
    assert list(table["label"]) == ["inductor"] and table.loc[0, "speedup"] < 1
    for bad in (0, 2.5, True, "1000"):
        with pytest.raises(ValueError, match="^horizon_steps="):
            project(res, bad)
    with pytest.raises(tc.SpecError, match="^horizon_steps="):
        tc.QualityOptions(horizon_steps=0)
    res.horizon_steps = None
    assert not res.describe().startswith("at ")
    with pytest.raises(ValueError, match="^horizon_steps=None"):
        res.projection()


def test_the_horizon_chart_draws_each_candidate_in_its_band_the_break_even_and_the_horizon(tmp_path):
    res = _study(("inductor", REF.replace(backend="inductor"), 10.0, 0.005, 80),
                 ("never reached", REF, 0.0, 0.001, 80))
    res.runs = [QualityRun(**{**r.__dict__, "reached": False, "time_s": None}) if r.label == "never reached" else r
                for r in res.runs]
    curves = time_curves(res, [1, 500, 5000])
    ind = curves[curves["label"] == "inductor"].set_index("steps")
    per_seed = [10 + 5000 * 4 * 0.005 * j for j in JITTER.values()]   # the seeds' times at 5,000 steps
    assert ind.loc[5000, "time_s"] == pytest.approx(math.prod(per_seed) ** (1 / 3))
    assert ind.loc[5000, "low"] < min(per_seed) and ind.loc[5000, "high"] > max(per_seed)
    assert set(curves["label"]) == {"native", "inductor"}   # no seed of "never reached" projects

    fig = res.plot_horizon()
    [band] = [t for t in fig.data if (t.meta or {}).get("band") and t.meta["candidate"] == "inductor"]
    [line] = [t for t in fig.data if t.name == "inductor"]
    assert len(band.x) == 2 * len(line.x) and max(line.x) >= 10 * 5000 and fig.layout.xaxis.type == "log"
    [cross] = [t for t in fig.data if (t.meta or {}).get("break_even")]
    assert list(cross.x) == [500] and cross.text == ("inductor: 500",)   # where the steps have paid the compile
    [horizon] = [t for t in fig.data if (t.meta or {}).get("horizon")]
    assert list(horizon.x) == [5000, 5000] and horizon.name == "your horizon: 5,000 steps"
    [missing] = [t for t in fig.data if (t.name or "").startswith("never reached")]
    assert "not projected (no seed where both it and the reference reached the target)" in missing.name
    assert res.plot_horizon(100).data[-1].name == "your horizon: 100 steps"
    # the report draws it first when the study has a horizon, and not without one
    page = res.to_html(str(tmp_path / "q.html")).read_text()
    assert page.count("your horizon: 5,000 steps") >= 1 and "break-even (on the medians)" in page
    res.horizon_steps = None
    assert "your horizon" not in res.to_html(str(tmp_path / "r.html")).read_text()
    with pytest.raises(ValueError, match="^horizon_steps=None"):
        res.plot_horizon()


def _with_curves(res: QualityResult, loss) -> QualityResult:
    """The reference's runs given held-out curves: ``loss(seed, steps)`` every 8 of 192 steps."""
    res.runs = [QualityRun(**{**r.__dict__, "curve": tuple(EvalPoint(steps=n, samples=4 * n, wall_s=0.01 * n,
                                                                     loss=loss(r.seed, n)) for n in range(8, 193, 8))})
                if r.label == "native" else r for r in res.runs]
    return res


def test_a_reference_whose_loss_stopped_falling_makes_the_projection_an_upper_bound_and_says_so():
    noise = {0: (0.01, -0.02, 0.015), 1: (-0.01, 0.02, 0.0), 2: (0.02, 0.0, -0.015)}
    falling = _with_curves(_study(("inductor", REF.replace(backend="inductor"), 10.0, 0.005, 80)),
                           lambda seed, n: 5.0 - 0.4 * math.log2(n) + noise[seed][n % 3])
    premise = still_falling(falling)
    assert premise.falling and premise.slope == pytest.approx(-0.4, abs=0.05) and premise.seeds == 3
    [p] = project(falling, 5000)
    assert p.falling and "upper bound" not in p.note and "upper bound" not in horizon_sentence(p, "native")
    # small BERT's shape: one seed at chance, two noisy around a plateau
    flat = _with_curves(_study(("inductor", REF.replace(backend="inductor"), 10.0, 0.005, 80)),
                        lambda seed, n: 0.69 - (0.3 + 0.08 * math.sin(n * (seed + 1))) * (seed > 0))
    premise = still_falling(flat)
    assert not premise.falling and premise.low < 0 < premise.high
    [p] = project(flat, 5000)
    assert not p.falling and p.note.startswith("the reference's held-out loss was not measurably falling")
    assert horizon_sentence(p, "native").endswith(
        "(the times are an upper bound: native's held-out loss had stopped falling)")
    assert still_falling(_study()).falling and still_falling(_study()).slope is None   # no curves: cannot tell
