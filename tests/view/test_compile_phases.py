"""Compile latency in phases: the summary's medians and cache words, the CLI/report cell, the stacked bar (the
rest = compile latency minus the timed phases), and the figures' round trip through the store. Fakes only: the
phases a real Inductor job reports are checked in tests/job/test_inductor_phases.py."""

from __future__ import annotations

import dataclasses

import pytest

import tcbench as tc
from tcbench import plots
from tcbench.comparison import Comparison, load_comparison
from tcbench.core.results import COMPILE_PHASE_NAMES, CompilePhases, JobResult, StepRecord, compile_cache_text
from tcbench.measure.metrics import job_figures
from tcbench.view import format as fmt
from tcbench.view import report as _report

SPEC = tc.JobSpec(model="gpt2", size="tiny", batch_size=8, seq_len=16, steps=12, warmup_steps=2)


def _job(backend: str, rnd: int, phases: CompilePhases | None) -> JobResult:
    recs = [StepRecord(step=n, step_s=(3.0 if n == 0 and backend != "eager" else 0.1), samples_s=80.0,
                       tokens_s=1280.0, mem_bytes=2**20, loss=1.0, warmup=n < 2, seq_len=16) for n in range(12)]
    given = dataclasses.asdict(phases) if phases is not None else {}
    return JobResult(spec=dataclasses.replace(SPEC, backend=backend), status="ok", run_id=10 * rnd + len(backend),
                     records=recs, figures=job_figures(recs, 8, 2, **given), round=rnd)


def _cmp(hits: int = 0) -> Comparison:
    ph = [CompilePhases(compile_dynamo_s=0.4 + 0.1 * r, compile_aot_s=0.6, compile_backend_s=1.0, aot_cache_hits=hits,
                        aot_cache_misses=2 - hits, fx_cache_hits=2 * hits, fx_cache_misses=4 - 2 * hits)
          for r in range(3)]
    results = [j for r in range(3) for j in (_job("eager", r, None), _job("inductor", r, ph[r]))]
    return Comparison(spec=SPEC, backends=["eager", "inductor"], results=results, rounds=3, comparison_id=3)


def test_the_summary_has_each_phase_median_and_its_cache_in_words():
    s = _cmp(hits=1).summary().set_index("backend")
    assert s.compile_dynamo_s["inductor"] == pytest.approx(0.5) and s.compile_aot_s["inductor"] == 0.6
    assert s.compile_backend_s["inductor"] == 1.0 and s.compile_latency_s["inductor"] == pytest.approx(2.9)
    assert s.compile_cache["inductor"] == ("Dynamo traced · AOTAutograd 3 of 6 graphs from its cache · "
                                           "Inductor 6 of 12 graphs from the FX graph cache")
    assert s.compile_cache["eager"] == "" and s.compile_dynamo_s.isna()["eager"]
    assert fmt.compile_phases_text(s.loc["inductor"].to_dict()) == "Dynamo 0.5 s (0.4–0.6) · AOTAutograd 0.6 s (0.6–0.6) · backend 1.0 s (1.0–1.0)"
    assert fmt.compile_phases_text(s.loc["eager"].to_dict()) == "–"


def test_cache_words_without_phases_are_empty_and_a_cold_compile_says_zero():
    assert compile_cache_text([_job("eager", 0, None)]) == ""
    cold = compile_cache_text(_cmp(hits=0).by_backend("inductor"))
    assert "AOTAutograd 0 of 6" in cold and "Inductor 0 of 12" in cold


def test_the_stacked_bar_adds_the_rest_of_the_compile_latency():
    df = plots.collect_compile_phases(_cmp())
    got = df.set_index("phase").seconds
    assert list(df.backend.unique()) == ["inductor"]
    assert list(got.index) == ["Dynamo", "AOTAutograd", "backend compile", "first steps (the rest)"]
    assert got.sum() == pytest.approx(2.9) and got["first steps (the rest)"] == pytest.approx(0.8)
    fig = plots.plot_compile_phases(df)
    assert fig.layout.barmode == "stack" and [t.name for t in fig.data] == list(got.index)
    assert plots.collect_compile_phases(Comparison(spec=SPEC, backends=["eager"], results=[_job("eager", 0, None)],
                                                   rounds=1)).empty


def test_the_report_draws_the_phases_only_when_a_job_reported_them():
    assert "Compile latency in phases" in _report.comparison_html(_cmp(), plotlyjs="cdn")
    plain = Comparison(spec=SPEC, backends=["eager", "inductor"], rounds=1,
                       results=[_job("eager", 0, None), _job("inductor", 0, None)])
    assert "Compile latency in phases" not in _report.comparison_html(plain, plotlyjs="cdn")
    assert "Dynamo 0.5 s (0.4–0.6) · AOTAutograd 0.6 s (0.6–0.6) · backend 1.0 s (1.0–1.0)" in tc.report.summary_table_html(_cmp().summary())


def test_the_phases_are_run_figures_kept_by_the_store(tmp_path):
    store = tc.Store(str(tmp_path / "s.db"))
    cmp = _cmp(hits=1)
    cid = store.insert_comparison("compare", SPEC, cmp.backends, 3, {})
    for r in cmp.results:
        r.run_id = store.insert_run(r.spec, comparison_id=cid, round=r.round)
        store.finish_run(r)
    back = load_comparison(cid, store)
    for a, b in zip(cmp.results, back.results):
        assert {n: getattr(a, n) for n in COMPILE_PHASE_NAMES} == {n: getattr(b, n) for n in COMPILE_PHASE_NAMES}
    assert back.summary().set_index("backend").compile_cache["inductor"].startswith("Dynamo traced")


def test_the_terminal_says_where_each_compile_went(capsys):
    from tcbench.cli.tables import print_comparison

    print_comparison(_cmp(hits=1))
    out = capsys.readouterr().out
    assert ("    compile: Dynamo 0.5 s (0.4–0.6) · AOTAutograd 0.6 s (0.6–0.6) · backend 1.0 s (1.0–1.0) (Dynamo traced · AOTAutograd 3 of 6 graphs "
            "from its cache · Inductor 6 of 12 graphs from the FX graph cache)") in out
    assert out.count("compile: ") == 1   # the baseline compiled nothing


def test_one_round_shows_its_phases_without_a_range():
    from tcbench.core.results import compile_phases_text

    one = _cmp().by_backend("inductor")[:1]
    assert compile_phases_text(one) == "Dynamo 0.4 s · AOTAutograd 0.6 s · backend 1.0 s"
    assert compile_phases_text([_job("eager", 0, None)]) == ""


def test_a_configurations_label_has_a_colour_of_its_own():
    """compare_configs' labels: the default configuration keeps its backend's colour, another one is never it."""
    from tcbench.view.plots import COLORS, VARIANT_COLORS, color

    assert color("inductor · default") == COLORS["inductor"] and color("eager (A/A)") == COLORS["eager"]
    other = color("inductor · max-autotune-no-cudagraphs · eager optimizer · bf16")
    assert other in VARIANT_COLORS and other == color("inductor · max-autotune-no-cudagraphs · eager optimizer · bf16")
