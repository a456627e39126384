"""The benchmark script's table and arguments (its measurements are the README's figures, run by `make bench`)."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script(name: str):
    """A benchmarks/ script loaded as a module (they are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def rb():
    return _script("run_benchmarks")


def _row(backend, speedup, lo, hi, break_even):
    return dict(model="gpt2", size="tiny", backend=backend, status="ok", median_step_ms=100.0 / speedup,
                samples_s=80.0 * speedup, speedup=speedup, speedup_ci_low=lo, speedup_ci_high=hi,
                verdict_kind=None if backend == "eager" else ("faster" if lo > 1 else "slower" if hi < 1 else
                                                              "no measurable difference"), compile_warm_s=12.5,
                compile_cold_s=None if backend == "eager" else 61.0, peak_mem_mb=150.0, mfu=0.2, break_even=break_even)


def test_markdown_table_shows_speedup_range_and_never(rb):
    rows = [_row("eager", 1.0, None, None, None), _row("inductor", 1.25, 1.1, 1.4, 240.0),
            _row("xla", 0.5, 0.45, 0.55, float("inf"))]
    over = [dict(model="bert-base-cased", size="tiny", overhead_ratio=1.01, rounds=[0.99, 1.01, 1.03])]
    md = rb.markdown(rows, over, "this machine")
    lines = md.splitlines()
    eager = next(x for x in lines if "| eager |" in x)
    inductor = next(x for x in lines if "| inductor |" in x)
    xla = next(x for x in lines if "| xla |" in x)
    assert "| 1.00 |" in eager and "| – |" in eager          # the baseline has no interval
    assert "| 1.25 (1.10–1.40) faster |" in inductor and "| 240 |" in inductor and "| 61.0 |" in inductor
    assert "| 0.50 (0.45–0.55) slower |" in xla and xla.endswith("| never |")
    assert "| bert-base-cased tiny | 1.010 (rounds: 0.990, 1.010, 1.030) |" in lines
    assert "alternating rounds" in lines[0]


@pytest.mark.parametrize("argv,word", [(["--compare-rounds", "0"], "--compare-rounds"), (["--rounds", "0"], "--rounds"),
                                       (["--steps", "5"], "--steps")])
def test_bad_arguments_are_refused_with_the_value(rb, monkeypatch, capsys, argv, word):
    monkeypatch.setattr(sys, "argv", ["run_benchmarks.py", *argv])
    with pytest.raises(SystemExit) as e:
        rb.main()
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert word in err and argv[1] in err


@pytest.fixture(scope="module")
def lt():
    return _script("lr_transfer")


def _pred(lr, lr_star, loss, l_star):
    import math

    return {"lr": lr, "abs_log": abs(math.log(lr / lr_star)), "loss": loss, "regret": loss - l_star,
            "rel_regret": (loss - l_star) / l_star}


def test_lr_transfer_table_gives_regrets_medians_and_the_retune_fraction(lt, tmp_path, monkeypatch):
    rows = {}
    for k, l_star in ((2, 2.0), (4, 3.0)):
        rows[str(k)] = {"k": k, "b1": 4 * k, "steps": 320 // k, "lr_star": 0.003, "l_star": l_star, "l_star_se": 0.01,
                        "linear": _pred(0.003 * k, 0.003, l_star + 1.0, l_star),
                        "sqrt": _pred(0.003 * k ** 0.5, 0.003, l_star + 0.5, l_star),
                        "noise": _pred(0.0035, 0.003, l_star + 0.01, l_star),
                        "retune": {"best_lr": 0.0035, "regret": 0.01, "rel_regret": 0.01 / l_star, "fraction": 0.3,
                                   "fraction_with_noise": 0.4, "n_trials": 5, "n_pruned": 3, "nothing_learned": False}}
    data = {"jobs": {}, "models": {"gpt2": {"b0": 4, "steps": 320, "lr0": 0.003, "l0": 2.1, "per_k": rows,
                                            "noise": {"b_simple": 22.1, "low": 17.4, "high": None, "wall_s": 30}}}}
    monkeypatch.setitem(lt.OUT, "md", tmp_path / "lr.md")
    lt.write(data)
    md = (tmp_path / "lr.md").read_text()
    assert "B_simple = 22.1 samples (95 % interval 17.4–unbounded)" in md
    assert "| 2 | 8 | 160 | 0.003 | 2.0000 ± 0.0100 | 0.006, 0.69, +1.0000 |" in md
    assert "Median over k: linear regret +1.0000" in md and "noise regret +0.0100" in md
    assert "samples ÷ grid's median 30% (worst 30%; 40% counting the noise job)" in md


def test_lr_transfer_refuses_an_unknown_model_before_any_job(lt, capsys):
    with pytest.raises(SystemExit) as e:
        lt.main(["--models", "gpt2,resnet"])
    assert e.value.code == 2 and "'resnet'" in capsys.readouterr().err


def _first(logs, low=0.9, high=1.2, seconds=100.0):
    return dict(speedup=1.05, low=low, high=high, verdict_kind="inconclusive", verdict="", seconds=seconds,
                rounds=len(logs), logs=logs, stop_reason="all rounds ran", noisy=[], eager_ms=[40.0] * len(logs),
                inductor_ms=[38.0] * len(logs), launchers=list(range(1, 2 * len(logs) + 1)))


def test_first_comparisons_test_heterogeneity_and_write_their_table():
    fc = _script("first_comparisons")
    agree = [_first([0.05 + d for d in (-0.02, 0.01, 0.02, -0.01)]) for _ in range(5)]
    het = fc.heterogeneity(agree)
    assert het["k"] == 5 and het["p_f"] > 0.5 and het["tau"] == 0.0 and het["excluding"] == 0
    apart = [_first([m + d for d in (-0.01, 0.01, 0.0, 0.005)], low=1.0, high=1.01) for m in (0.0, 0.2, 0.4)]
    assert fc.heterogeneity(apart)["p_f"] < 0.001 and fc.heterogeneity(apart)["excluding"] >= 2
    data = dict(date="d", machine="m", rounds=4, comparisons=agree, heterogeneity=het, defaults=[_first([0.1, 0.0])],
                truth=dict(speedup=1.05, low=1.0, high=1.1, rounds=8, seconds=300.0))
    md = fc.markdown(data)
    assert "| 1 | 1.050 (0.900–1.200) | inconclusive | 4 | 100 s |" in md and "| 8 |" in md   # 8 launchers
    assert "p = " in md and "standard errors from it" in md and "±5 % needs about" in md


def test_the_aa_and_launcher_tables_say_what_the_goals_ask():
    aa = _script("aa_coverage")
    row = dict(low=0.95, high=1.06, verdict_kind="inconclusive", resolution=0.055, noisy_jobs=0, rounds=4,
               seconds=40.0)
    md = aa.markdown(dict(date="d", machine="m", quiet=[row, {**row, "low": 1.01, "rounds": 8}], load=[row]))
    assert "| quiet machine | 2 | **1 (50%)** | 0 / 0 / 0 / 2 | ±5.5% (±5.5%–±5.5%) | 6 (4–8) | 40 s | 0 |" in md
    assert "3 rounds per comparison" in md   # a table of fixed rounds says how many
    rule = aa.markdown(dict(date="d", machine="m", rounds=None, quiet=[row, row], load=[row]))
    assert "compare's default rule per comparison" in rule
    ln = _script("launchers")
    groups = [[30.0, 30.5, 29.8], [36.0, 36.4, 35.8], [31.0, 30.6, 31.2]]
    found = ln.anova(groups)
    assert found["icc"] > 0.9 and found["p"] < 0.001
    assert ln.anova([[30.0, 36.0, 31.0], [36.0, 30.5, 31.0], [30.8, 35.9, 31.1]])["icc"] < 0.2


def test_noise_components_split_the_spread_and_allocate_steps():
    nc = _script("noise_components")

    def job(median_ms, within=0.02, wall=6.0, steps_s=5.0):
        return dict(median_ms=median_ms, within=within, wall_s=wall, waited_s=wall, steps_s=steps_s)

    def side(meds, within=0.02):
        rows = [job(m, within) for m in meds]
        between = nc._log_sd(meds)
        return dict(jobs=rows, between=between, within=within, luck=max(0.0, between ** 2 - within ** 2) ** 0.5)

    lucky = dict(eager=side([30.0, 36.0, 31.0, 35.0]), inductor=side([33.0, 33.2, 32.9, 33.1]), steps=100)
    k = nc.allocation(lucky)
    assert k["a"] > 0 and k["c0_s"] == pytest.approx(2.0) and k["step_s"] == pytest.approx(0.05)
    # a round's fixed cost four times larger: twice the steps per job (n* grows as √c0)
    dearer = {b: {**lucky[b], "jobs": [{**j, "wall_s": j["wall_s"] + 3.0} for j in lucky[b]["jobs"]]}
              for b in ("eager", "inductor")}
    assert nc.allocation({**dearer, "steps": 100})["n_star"] == pytest.approx(2 * k["n_star"])
    # no spread between processes beyond the steps': steps are all that help
    assert nc.allocation(dict(eager=side([33.0, 33.0, 33.0]), inductor=side([33.0, 33.0, 33.0]),
                              steps=100))["n_star"] == float("inf")
    pair = dict(windows=20, correlation=0.01, ratio_sd=0.15, each_sd=0.1, shift_s=0.0)
    md = nc.markdown(dict(date="d", machine="m", rounds=4, steps=100, luck=lucky, allocation=k,
                          cores=dict(together=pair, apart={**pair, "shift_s": 19.0})))
    assert "| eager | 30.0, 36.0, 31.0, 35.0 |" in md and "| together, a core each | +0.01 |" in md
    assert "19 s apart" in md and "measured steps per job** (Kalibera & Jones)" in md


def test_the_suite_tables_show_coverage_and_the_graphs_compiled_twice(tmp_path):
    """benchmarks/suite.py's coverage row (from coverage.py's JSON totals) and benchmarks/suite_compiles.py's list of
    the jobs that compiled a graph anew, read from a test run's stores (issue 47)."""
    import json
    import sqlite3

    suite, compiles = _script("suite"), _script("suite_compiles")
    (tmp_path / "cov.json").write_text(json.dumps({"totals": {"num_statements": 200, "covered_lines": 150,
                                                              "percent_covered": 75.0}}))
    cov = suite.coverage(tmp_path / "cov.json")
    assert suite.coverage_text(cov) == "75.0 % (150 of 200 lines)" and suite.coverage_text(None) == "–"
    run = dict(date="d", tests=1, seconds=1.0, wall=60.0, folders={"tests": 1.0}, kinds={"unit": [1, 1.0]},
               slowest=[("tests/test_x.py::test_y", 1.0)], coverage=cov)
    assert "| line coverage (tcbench, widgets) | 75.0 % (150 of 200 lines) |" in suite.markdown({"x": run})

    def store(test: str, jobs: list[tuple]) -> None:   # (created, spec fields, FX misses, compile s)
        (tmp_path / "run" / test).mkdir(parents=True)
        con = sqlite3.connect(tmp_path / "run" / test / "t.db")
        con.execute("create table runs (created, spec_json, fx_cache_misses, compile_latency_s, wall_s, status)")
        con.executemany("insert into runs values (?, ?, ?, ?, 1.0, 'ok')",
                        [(t, json.dumps(s), m, c) for t, s, m, c in jobs])
        con.commit()
        con.close()

    tiny = dict(backend="inductor", model="gpt2", seq_len=32, dropout=0.0, cache="shared")
    store("test_a0", [(1, tiny, 2, 30.0), (4, {**tiny, "cache": "cold"}, 2, 20.0),
                      (5, {**tiny, "backend": "eager"}, 0, 0)])
    store("test_b0", [(2, tiny, 2, 35.0), (3, {**tiny, "seq_len": 64}, 1, 3.0)])   # the same graph, both anew
    jobs = compiles.jobs(tmp_path / "run")
    assert [j["test"] for j in jobs] == ["test_a0", "test_b0", "test_b0", "test_a0", "test_a0"]   # oldest first
    out = compiles.report(jobs)
    assert out.startswith("5 jobs; 3 Inductor jobs compiled a graph anew on the shared cache (68 s of compile), "
                          "1 asked to compile cold (20 s)")
    assert "more than once: 1" in out and "'seq_len': 32" in out and "'seq_len': 64" not in out.split("once")[1]
    assert "| test_a0 | cold |" not in out
    assert "| test_a0 | cold |" in compiles.report(jobs, show_all=True)
