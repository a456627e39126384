"""tcbench.view.format: the value formatters (ratios, intervals, numbers, missing values) and the one column table."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

import tcbench as tc
from tcbench.comparison import Comparison
from tcbench.core.results import FIGURE_NAMES, JobResult, StepRecord
from tcbench.measure.metrics import job_figures
from tcbench.view import format as fmt

SPEC = tc.JobSpec(model="bert-base-cased", size="tiny", backend="eager", batch_size=8, seq_len=16, steps=12,
                  warmup_steps=2)


def _job(backend: str, rnd: int, step_s: float) -> JobResult:
    recs = [StepRecord(step=n, step_s=step_s * (10 if n < 2 and backend != "eager" else 1) * (1 + 0.01 * (n % 3)),
                       samples_s=8 / step_s, tokens_s=128 / step_s, mem_bytes=2**26, loss=2.0 - 0.05 * n,
                       warmup=n < 2, seq_len=16) for n in range(SPEC.steps)]
    return JobResult(spec=dataclasses.replace(SPEC, backend=backend), status="ok", run_id=10 * rnd + len(backend),
                     records=recs, figures=job_figures(recs, 8, 2), round=rnd)


@pytest.fixture(scope="module")
def summary() -> pd.DataFrame:
    results = [_job(b, rnd, s) for rnd in range(2) for b, s in (("eager", 0.1), ("inductor", 0.05))]
    return Comparison(spec=SPEC, backends=["eager", "inductor"], results=results, rounds=2).summary()


# -- ratios and intervals -------------------------------------------------------------------------------------------
def test_ratio_shows_a_third_decimal_only_near_one():
    assert fmt.fmt_ratio(0.8712) == "0.87×" and fmt.fmt_ratio(1.004) == "1.004×" and fmt.fmt_ratio(1.0) == "1.00×"
    assert fmt.fmt_ratio(None) == fmt.fmt_ratio(float("nan")) == fmt.fmt_ratio(float("inf")) == "–"


def test_interval_with_and_without_its_bounds():
    assert fmt.fmt_interval(0.8712, 0.8, 0.95) == "0.87× (0.80–0.95×)"
    assert fmt.fmt_interval(0.8712, 0.8, 0.95, unit_after_high=False) == "0.87× (0.80–0.95)"
    assert fmt.fmt_interval(np.float64(1.004), 0.9, 1.2) == "1.004× (0.90–1.20×)"
    assert fmt.fmt_interval(0.8712, None, 0.95) == fmt.fmt_interval(0.8712, 0.8, float("nan")) == "0.87×"
    assert fmt.fmt_interval(None, 0.8, 0.95) == fmt.fmt_interval(pd.NA, None, None) == "–"
    assert fmt.fmt_ratio_range(0.9612, 1.0612) == "0.96–1.06×"


def test_speedup_text_on_the_bars():
    row = dict(status="ok", speedup=0.8712, speedup_ci_low=0.8, speedup_ci_high=0.95, rounds=3)
    assert fmt.speedup_text(row) == "0.87× (0.80–0.95)" and fmt.speedup_text(row, first=True) == "baseline"
    assert fmt.speedup_text({**row, "rounds": 1}) == "0.87× (0.80–0.95)<br>single round"
    assert fmt.speedup_text({**row, "speedup": None}) == "" and fmt.speedup_text({**row, "status": "oom"}) == "oom"
    assert tc.plots.speedup_text is fmt.speedup_text          # the panel's bars use it through tc.plots


# -- missing values and numbers ---------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [None, float("nan"), np.nan, pd.NA, pd.NaT, np.float64("nan")])
def test_none_nan_and_na_are_missing_and_null(value):
    assert fmt.is_missing(value) and fmt.is_null(value)
    assert fmt.fmt_number(value) == fmt.fmt_percent(value) == fmt.fmt_text(value) == fmt.fmt_yes_no(value) == "–"
    assert fmt.fmt_usd(value) == fmt.fmt_break_even(value) == fmt.fmt_time(value) == fmt.html_text(value) == "–"
    assert fmt.html_note(value) == ""


@pytest.mark.parametrize("value", [0, 0.0, False, "", "x", (), {}, np.float64(1.5)])
def test_a_value_is_not_missing(value):
    assert not fmt.is_missing(value) and not fmt.is_null(value)


def test_a_container_is_a_value_to_show_not_a_null_cell():
    assert not fmt.is_missing([]) and not fmt.is_missing([None])   # a summary cell holding a list (warnings)
    assert fmt.is_null([None])                                     # stored cells are scalars: only pandas' answer


def test_numbers_for_people():
    assert fmt.fmt_number(0.012345) == "0.0123" and fmt.fmt_number(42.123) == "42.1"
    assert fmt.fmt_number(1234.5678) == "1,235" and fmt.fmt_number(2.86, 1) == "2.9"
    assert fmt.fmt_number(8.3e-05) == "< 0.001" and fmt.fmt_number(-8.3e-05) == "> -0.001"
    assert fmt.fmt_number(float("inf")) == "never" and fmt.fmt_number(True) == "yes" and fmt.fmt_number(0) == "0"
    assert fmt.fmt_percent(0.1234) == "12.3 %" and fmt.fmt_percent(12.34, share=False) == "12.3 %"
    assert fmt.fmt_usd(1234.5) == "$1,234.50" and fmt.fmt_usd(0.01234) == "$0.0123"
    assert fmt.fmt_break_even(float("inf")) == "never" and fmt.fmt_break_even(123.4) == "123"
    assert fmt.fmt_break_even(123.4, 100.2, 150.7) == "100–151"
    assert fmt.fmt_text("a<b") == "a<b" and fmt.html_text("a<b") == "a&lt;b" and fmt.fmt_yes_no(0) == "no"
    assert fmt.fmt_time(pd.Timestamp("2024-03-09 16:00:30")) == "03-09 16:00"


# -- the column table -------------------------------------------------------------------------------------------
def test_one_column_per_name_with_its_headings():
    names = [c.name for c in fmt.COLUMNS]
    assert len(names) == len(set(names))
    col = fmt.CLI_COLUMNS["median_step_ms"]
    assert col.heading == "median step ms" and col.title == "median step (ms)" and col in fmt.REPORT_COLUMNS
    assert fmt.CLI_COLUMNS["peak_mem_mb"].heading == "peak MiB" and fmt.CLI_COLUMNS["step_cv"].heading == "CV"
    assert all(c.cli is not None or c.report is not None for c in fmt.COLUMNS)


def test_the_table_covers_every_summary_column(summary):
    shown = {name for c in fmt.REPORT_COLUMNS for name in c.columns} | {"backend"}   # backend: the report's heading
    assert not set(summary.columns) - shown, f"summary columns with no column: {set(summary.columns) - shown}"
    for r in summary.to_dict("records"):
        for c in fmt.REPORT_COLUMNS:
            assert isinstance(c.report_html(r), str)
        for c in fmt.CLI_COLUMNS.values():
            assert isinstance(c.cli_text(r), str)


def test_every_cli_table_names_known_columns_and_figures_are_core_s():
    from tcbench.cli import app

    for columns in (app.COMPARE_COLUMNS, app.RUN_COLUMNS, app.RUNS_COLUMNS, app.STEPS_COLUMNS):
        assert set(columns) <= set(fmt.CLI_COLUMNS)
    figures = {c.figure for c in fmt.COLUMNS if c.figure}
    assert figures and figures <= set(FIGURE_NAMES)


def test_cells_of_a_summary_row():
    row = dict(backend="xla", status="ok", verdict_kind="faster", verdict="faster: 2×", speedup=2.0,
               speedup_ci_low=1.8, speedup_ci_high=2.2, break_even_steps=123.4, break_even_low=100.2,
               break_even_high=150.7, mfu=None, mfu_note="MFU unknown", noisy=True, noise="busy", warnings=["a<b"])
    cli = {n: fmt.CLI_COLUMNS[n].cli_text(row) for n in ("speedup", "break_even_steps", "mfu", "noisy")}
    assert cli == {"speedup": "2.00× (1.80–2.20)", "break_even_steps": "100–151", "mfu": "–", "noisy": "yes"}
    html = {c.name: c.report_html(row) for c in fmt.REPORT_COLUMNS}
    assert html["speedup"] == "2.00× (1.80–2.20×)" and html["mfu"] == "MFU unknown" and html["noisy"] == "busy"
    assert html["warnings"] == "⚠ a&lt;b" and html["verdict_kind"].startswith('<span class="tcb-kind tcb-kind-faster">')
    assert html["memory_ratio"] == "–" and fmt.CLI_COLUMNS["memory_ratio"].cli_text(row) == "–"
    baseline = {**row, "verdict_kind": "baseline"}
    assert {c.name: c.report_html(baseline) for c in fmt.REPORT_COLUMNS}["speedup"] == "baseline"


def test_a_faster_variant_that_warms_up_no_longer_pays_off_from_the_first_step():
    """compare_configs of two compiled configurations: the faster one compiled as long as the baseline, so its
    break-even is 0 steps, said in words rather than as "after 0–0 steps"."""
    def job(label: str, rnd: int, step_s: float) -> JobResult:
        recs = [StepRecord(step=n, step_s=step_s * (10 if n < 2 else 1) * (1 + 0.01 * (n % 3)), samples_s=8 / step_s,
                           tokens_s=128 / step_s, mem_bytes=2**26, loss=2.0 - 0.05 * n, warmup=n < 2, seq_len=16)
                for n in range(SPEC.steps)]
        return JobResult(spec=dataclasses.replace(SPEC, backend="inductor"), status="ok", run_id=10 * rnd + len(label),
                         records=recs, figures=job_figures(recs, 8, 2), round=rnd, label=label)

    variant = dataclasses.replace(SPEC, backend="inductor", compile_optimizer=True)
    results = [job(lab, rnd, s) for rnd in range(3) for lab, s in (("", 0.1), ("fused", 0.05))]
    cmp = Comparison(spec=dataclasses.replace(SPEC, backend="inductor"), backends=["inductor", "fused"],
                     results=results, rounds=3, variants={"fused": variant})
    row = cmp.summary().set_index("backend").loc["fused"].to_dict()
    assert row["verdict_kind"] == "faster" and "pays off after" not in row["verdict"]
    assert row["verdict"].endswith("; it pays off from the first step (no longer a warmup than the baseline's)")
    assert fmt.pays_off_text(row) == "pays off from the first step: no longer a warmup than native's"
