"""The summary table, findings, HTML report and plots, from comparisons built by hand (no training jobs)."""

from __future__ import annotations

import dataclasses
import html
from datetime import datetime
import math
import platform
import re
import socket

import numpy as np
import pandas as pd
import pytest

import tcbench as tc
from tcbench import plots
from tcbench.view import format as fmt
from tcbench.view import report as _report
from tcbench.comparison import Comparison
from tcbench.measure.metrics import job_figures
from tcbench.view.format import fmt_number, fmt_ratio
from tcbench.core.results import JobResult, StepRecord

SPEC = tc.JobSpec(model="bert-base-cased", size="tiny", backend="eager", batch_size=8, seq_len=16, steps=40,
                  warmup_steps=3)
ENV = {"tcbench": "0.1.0", "torch": "9.9.9", "python": "3.99", "cpu": "Stored CPU", "cores": 64, "threads": 2,
       "host": "stored-host", "load_start": {"loadavg": [0.5, 0.5, 0.5]}, "load_end": {"loadavg": [0.6, 0.5, 0.5]}}


def _job(label: str, rnd: int, step_s: float, mem_mb: int, spec: tc.JobSpec = SPEC, seed: int = 0) -> JobResult:
    """One finished job with synthetic steps: warmup spikes for compiled backends, a falling noisy loss."""
    rng = np.random.default_rng(seed + 10 * rnd)
    backend = label.replace(" (A/A)", "")
    recs = []
    for n in range(spec.steps):
        warm = n < spec.warmup_steps
        s = step_s * (20 if warm and backend != "eager" else 1) * (1 + 0.01 * rng.standard_normal())
        recs.append(StepRecord(step=n, step_s=s, samples_s=spec.batch_size / s, tokens_s=spec.tokens_per_step / s,
                               mem_bytes=mem_mb * 2**20, loss=2.0 - 0.02 * n + 0.05 * rng.standard_normal(),
                               warmup=warm, seq_len=spec.seq_len))
    figs = job_figures(recs, spec.batch_size, spec.warmup_steps)
    return JobResult(spec=dataclasses.replace(spec, backend=backend), status="ok", run_id=100 * rnd + len(label),
                     records=recs, figures=figs, round=rnd, label=label if label != backend else "", env=dict(ENV))


def _comparison(step_s: dict[str, float], rounds: int = 3, spec: tc.JobSpec = SPEC) -> Comparison:
    mem = {"eager": 50, "inductor": 40, "xla": 70}
    labels = list(step_s)
    results = [_job(label, rnd, step_s[label], mem.get(label, 50), spec, seed=i)
               for rnd in range(rounds) for i, label in enumerate(labels)]
    return Comparison(spec=spec, backends=labels, results=results, rounds=rounds, comparison_id=7)


@pytest.fixture(scope="module")
def cmp() -> Comparison:
    return _comparison({"eager": 0.10, "inductor": 0.05, "xla": 0.20})


def test_report_module_is_the_one_implementation():
    assert tc.report.summary_table_html is _report.summary_table_html
    assert tc.report.findings_html is _report.findings_html
    assert tc.report.comparison_html is _report.comparison_html
    assert set(tc.report.__all__) == {"summary_table_html", "findings_html", "diagnostics_html", "comparison_html",
                                      "write_plotlyjs"}


def test_every_summary_column_has_a_labelled_row(cmp):
    summary = cmp.summary()
    unshown = set(summary.columns) - set(_report.COLUMN_ROWS)
    assert not unshown, f"summary columns with no row in the table: {unshown}"
    table = tc.report.summary_table_html(summary)
    for label, _, _ in _report.ROWS:
        assert f'<th scope="row">{html.escape(label)}</th>' in table
    for label in cmp.backends:       # one column per job label
        assert f">{label}</th>" in table
    assert "@media print" in table and "table-layout:fixed" in table


def test_verdict_interval_and_break_even_per_backend(cmp):
    summary = cmp.summary().set_index("backend")
    assert summary.loc["inductor", "verdict_kind"] == "faster" and summary.loc["xla", "verdict_kind"] == "slower"
    table = tc.report.summary_table_html(cmp.summary())
    for label in ("inductor", "xla"):
        r = summary.loc[label]
        interval = f"{fmt_ratio(r.speedup)} ({fmt_ratio(r.speedup_ci_low)[:-1]}–{fmt_ratio(r.speedup_ci_high)})"
        assert interval in table
        assert html.escape(r.verdict) in table
    fast = summary.loc["inductor"]
    assert f"{fast.break_even_low:,.0f}–{fast.break_even_high:,.0f}" in table
    be_row = table.split('break-even steps</th>')[1].split("</tr>")[0]
    assert be_row.count("never") == 1          # only xla: compiling never pays off there
    findings = tc.report.findings_html(cmp.summary())
    for label in cmp.backends:
        kind = summary.loc[label, "verdict_kind"]
        assert f"<b>{label}</b> <span class=\"tcb-kind tcb-kind-{kind.replace(' ', '-')}\">" in findings
    for w in summary.loc["xla", "warnings"]:
        assert html.escape(w) in findings


def test_findings_follow_verdict_kind_not_the_words():
    summary = pd.DataFrame([dict(backend="inductor", verdict_kind="no measurable difference",
                                 verdict="faster slower never pays off", warnings=["recompilations after warmup: 2"])])
    out = tc.report.findings_html(summary)
    assert re.findall(r'<span class="tcb-kind ([^"]+)"', out) == ["tcb-kind-no-measurable-difference"]
    assert "recompilations after warmup: 2" in out


def test_missing_values_infinity_and_numbers_for_people():
    row = dict(backend="xla", status="ok", rounds=1, median_step_ms=1234.5678, samples_s=12345.6, tokens_s=None,
               compile_latency_s=float("nan"), speedup=0.8712, speedup_ci_low=None, speedup_ci_high=None,
               break_even_steps=float("inf"), verdict_kind="slower", mfu=None, mfu_note="MFU unknown: no probe",
               loss_parity=None, loss_parity_note="not judged: no logged losses", warnings=[], noisy=False)
    table = tc.report.summary_table_html(pd.DataFrame([row]))

    def cell(label: str) -> str:
        return table.split(f"{label}</th><td>")[1].split("</td>")[0]

    assert cell("median step (ms)") == "1,235" and cell("samples/s") == "12,346"
    assert cell("tokens/s") == "–" and cell("compile latency (s)") == "–"
    assert cell("speedup (95 % interval)") == "0.87×" and cell("break-even steps") == "never"
    assert cell("MFU") == "MFU unknown: no probe" and cell("noise") == "none detected"
    assert cell("loss parity").startswith("not judged")
    assert fmt_number(0.012345) == "0.0123" and fmt_number(42.123) == "42.1"
    assert fmt_number(8.3e-05) == "< 0.001" and fmt_number(2.86, 1) == "2.9"


def test_header_shows_the_stored_environment_not_the_renderer(cmp, monkeypatch):
    monkeypatch.setattr(socket, "gethostname", lambda: "renderer-host-4711")
    monkeypatch.setattr(platform, "node", lambda: "renderer-host-4711")
    out = tc.report.comparison_html(cmp)
    header = out.split("<h2>")[0]
    assert "stored-host" in header and "torch 9.9.9" in header and "Stored CPU" in header
    assert "renderer-host-4711" not in out
    assert not hasattr(_report, "platform")


def test_no_cost_section_for_this_machine(cmp):
    assert cmp.spec.profile == "this-machine"
    out = tc.report.comparison_html(cmp)
    assert "Cost on" not in out and "ml.g5.2xlarge" not in out


def test_cost_section_for_a_chosen_profile(cmp, tmp_path):
    out = tc.report.comparison_html(cmp, profile="ml.g5.2xlarge")
    section = out.split("<h2>Cost on ml.g5.2xlarge</h2>")[1].split("<h2>")[0]
    assert "$ per 1,000 steps" in section and "priced at ml.g5.2xlarge" in section
    assert section.count("$0.") >= 3      # dollars per job, formatted
    path = tmp_path / "r.html"
    cmp.to_html(str(path), profile="ml.g5.2xlarge")
    assert "Cost on ml.g5.2xlarge" in path.read_text(encoding="utf-8")
    spec = dataclasses.replace(SPEC, profile="ml.g4dn.xlarge")
    from_spec = _comparison({"eager": 0.1, "inductor": 0.05}, rounds=1, spec=spec)
    assert "<h2>Cost on ml.g4dn.xlarge</h2>" in tc.report.comparison_html(from_spec)


def test_loss_plot_smoothed_line_over_raw_points_per_job(cmp):
    df = plots.collect_losses(cmp)
    fig = plots.plot_losses(df)
    for label in cmp.backends:
        raw = [t for t in fig.data if t.meta == {"job": label, "kind": "raw"}]
        smooth = [t for t in fig.data if t.meta == {"job": label, "kind": "smoothed"}]
        assert len(raw) == 1 and len(smooth) == 1
        assert raw[0].mode == "markers" and raw[0].opacity < 1 and smooth[0].mode == "lines"
        assert len(raw[0].x) == (df["backend"] == label).sum()
        wiggle = lambda y: float(np.abs(np.diff(np.asarray(y, dtype=float), n=2)).sum())   # roughness
        per_step = df[df["backend"] == label].groupby("step")["loss"].mean()
        assert wiggle(smooth[0].y) < 0.5 * wiggle(per_step.values)   # smoothed, not the raw curve
    assert fig.layout.xaxis.title.text and fig.layout.yaxis.title.text


@pytest.mark.parametrize("budget_gb", [0.08, 24.0])
def test_memory_axis_stays_linear_with_a_budget(cmp, budget_gb):
    fig = plots.plot_memory(plots.collect_memory(cmp), budget_gb)
    assert fig.layout.yaxis.type != "log"
    lines = [s for s in fig.layout.shapes if s.type == "line"]
    if budget_gb > 1:      # 24 GiB over ~70 MiB bars: said in the title, not drawn
        assert not lines and "24 GiB" in fig.layout.title.text
    else:
        assert len(lines) == 1 and math.isclose(lines[0].y0, budget_gb * 1024)


def test_throughput_shows_speedup_interval_and_single_round(cmp):
    df = plots.collect_throughput(cmp)
    assert {"speedup_ci_low", "speedup_ci_high", "rounds"} <= set(df.columns)
    texts = {t.name: t.text[0] for t in plots.plot_throughput(df).data}
    ind = df.set_index("backend").loc["inductor"]
    assert texts["eager"] == "baseline"
    assert texts["inductor"] == (f"{fmt_ratio(ind.speedup)} ({fmt_ratio(ind.speedup_ci_low)[:-1]}–"
                                 f"{fmt_ratio(ind.speedup_ci_high)[:-1]})")
    one = plots.collect_throughput(_comparison({"eager": 0.1, "inductor": 0.05}, rounds=1))
    assert "single round" in plots.plot_throughput(one).data[1].text[0]


def test_aa_twin_has_its_backends_colour():
    assert plots.color("eager (A/A)") == plots.color("eager") != plots.color("inductor")
    aa = _comparison({"eager": 0.1, "eager (A/A)": 0.1}, rounds=2)
    fig = plots.plot_losses(plots.collect_losses(aa))
    smooth = {t.meta["job"]: t for t in fig.data if t.meta["kind"] == "smoothed"}
    assert smooth["eager (A/A)"].line.color == smooth["eager"].line.color
    assert smooth["eager (A/A)"].line.dash == "dash"


def test_failed_job_shows_its_status_error_and_dashes():
    c = _comparison({"eager": 0.1, "xla": 0.05}, rounds=1)
    failed = c.results[1]
    failed.status, failed.error = "oom", "RuntimeError: out of memory (scripted)"
    failed.figures = job_figures(failed.records[:2], SPEC.batch_size, SPEC.warmup_steps)
    table = tc.report.summary_table_html(c.summary())
    status_row = table.split('status</th>')[1].split("</tr>")[0]
    assert "<td>oom</td>" in status_row and "out of memory (scripted)" in table
    speed_row = table.split('speedup (95 % interval)</th>')[1].split("</tr>")[0]
    assert speed_row.endswith("<td>–</td>")
    assert "tcb-kind-inconclusive" in tc.report.findings_html(c.summary()).split("</style>")[1]
    out = tc.report.comparison_html(c)
    assert 'class="warn">xla round 0' in out


def test_an_aa_pair_is_judged_like_any_pair_and_drift_is_a_warning_beside_it():
    """The same job 10 % slower against itself in every round: the interval excludes 1 and the verdict says so, as
    for any pair (how often that happens is measured by benchmarks/trust.py, never relabelled). A job whose median
    moves between rounds gets a drift warning beside the interval."""
    offset = _comparison({"eager": 0.10, "eager (A/A)": 0.11})
    row = offset.summary().set_index("backend").loc["eager (A/A)"]
    assert row.speedup_ci_high < 1 and row.verdict_kind == "slower"
    same = _comparison({"eager": 0.10, "inductor": 0.11})
    assert same.summary().set_index("backend").loc["inductor"].verdict_kind == "slower"
    drifting = _comparison({"eager": 0.10, "inductor": 0.10})
    for r in drifting.results:
        if r.round == 1:
            r.records = [dataclasses.replace(s, step_s=s.step_s * 1.3) for s in r.records]
            r.figures = dataclasses.replace(r.figures, median_step_s=r.figures.median_step_s * 1.3)
    warnings = drifting.row("inductor").warnings
    assert any(w.startswith("drift: the eager job's median step moved 30%") for w in warnings), warnings


# -- the report worth sending (issue 26, item 5) -------------------------------------------------------------------
KB = 1024


def test_default_report_loads_plotlyjs_from_its_folder_and_stays_small(cmp, tmp_path):
    out = cmp.to_html(str(tmp_path / "r.html"))
    assert len(out.encode()) < 200 * KB
    assert out.count('src="plotly.min.js"') == 1 and "cdn.plot.ly" not in out
    beside = tmp_path / "plotly.min.js"
    assert beside.exists() and beside.stat().st_size > 1_000_000
    assert (tmp_path / "r.html").read_text(encoding="utf-8") == out


def test_plotlyjs_is_written_once_per_folder(cmp, tmp_path):
    cmp.to_html(str(tmp_path / "a.html"))
    beside = tmp_path / "plotly.min.js"
    beside.write_text("// kept: a folder's copy is never overwritten", encoding="utf-8")
    cmp.to_html(str(tmp_path / "b.html"))
    assert beside.read_text(encoding="utf-8").startswith("// kept")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.html", "b.html", "plotly.min.js"]
    assert _report.write_plotlyjs(tmp_path) is None


def test_inline_is_self_contained_and_cdn_loads_from_the_cdn(cmp, tmp_path):
    inline = cmp.to_html(str(tmp_path / "inline.html"), plotlyjs="inline")
    assert len(inline.encode()) > 3_000_000 and 'src="plotly.min.js"' not in inline
    assert inline.count("plotly.js v") >= 1          # the library's own banner: the copy is inside the file
    cdn = cmp.to_html(plotlyjs="cdn")
    assert re.search(r'<script[^>]+src="https://cdn\.plot\.ly/plotly-[\d.]+\.min\.js"', cdn)
    assert len(cdn.encode()) < 200 * KB
    assert not (tmp_path / "plotly.min.js").exists()   # neither needs a copy beside it


@pytest.mark.parametrize("bad", ["self-contained", "", None, True, "INLINE"])
def test_a_bad_plotlyjs_is_refused_before_anything_is_written(cmp, tmp_path, bad):
    with pytest.raises(ValueError) as err:
        cmp.to_html(str(tmp_path / "r.html"), plotlyjs=bad)
    text = str(err.value)
    assert f"plotlyjs={bad!r}" in text and all(f"'{v}'" in text for v in ("directory", "cdn", "inline"))
    assert not list(tmp_path.iterdir())


def _dated(c: Comparison) -> Comparison:
    """The comparison with the start time a run or load_comparison gives it."""
    c.created = datetime(2026, 11, 24, 21, 20).timestamp()
    return c


def test_date_environment_and_bottom_line_come_before_the_first_chart(tmp_path):
    c = _dated(_comparison({"eager": 0.10, "inductor": 0.05, "xla": 0.20}))
    out = c.to_html()
    first_chart = out.index('class="plotly-graph-div"')
    ran = out.index("Ran 2026-11-24 21:20")
    assert ran < out.index("report written") < first_chart
    assert out.index("Measured on:") < first_chart and out.index("stored-host") < first_chart
    summary = c.summary().set_index("backend")
    for label in ("inductor", "xla"):
        line = html.escape(fmt.bottom_line(summary.loc[label].to_dict() | {"backend": label}))
        assert out.index(line) < first_chart
    assert out.index("<h2>Summary</h2>") > first_chart and out.index("<h2>Job spec</h2>") > first_chart


def test_bottom_line_words_interval_and_break_even():
    fast = dict(backend="inductor", verdict_kind="faster", speedup=1.0712, speedup_ci_low=1.0203,
                speedup_ci_high=1.1201, rounds=4, break_even_steps=200.0, break_even_low=120.4, break_even_high=340.2)
    assert fmt.bottom_line(fast) == "compiling inductor: 1.07× faster (1.02–1.12), pays off after 120–340 steps"
    even = {**fast, "break_even_steps": 0.0, "break_even_low": 0.0, "break_even_high": 0.2}   # it compiles no longer
    assert fmt.bottom_line(even).endswith("pays off from the first step: no longer a warmup than native's")
    assert fmt.verdict_reason({**even, "verdict": "faster: 1.07× (95 % interval 1.02×–1.12×); it pays off from the "
                                                  "first step (no longer a warmup than the baseline's)"}) == ""
    assert fmt.bottom_line({**fast, "break_even_steps": None}).endswith(
        "break-even unknown: no compile latency was measured")
    slow = dict(backend="xla", verdict_kind="slower", speedup=0.44, speedup_ci_low=0.36, speedup_ci_high=0.54,
                rounds=3, break_even_steps=float("inf"))
    assert fmt.bottom_line(slow) == "compiling xla: slower, 0.44× the native speed (0.36–0.54), never pays off"
    same = dict(backend="inductor", verdict_kind="no measurable difference", speedup=1.01, speedup_ci_low=0.98,
                speedup_ci_high=1.03, rounds=3)
    assert fmt.bottom_line(same).startswith("compiling inductor: no measurable difference, 1.01× (0.98–1.03), "
                                                  "no break-even")
    unsure = dict(backend="inductor", verdict_kind="inconclusive", speedup=1.04, speedup_ci_low=0.85,
                  speedup_ci_high=1.27, rounds=1)
    assert fmt.bottom_line(unsure) == ("compiling inductor: inconclusive, 1.04× (0.85–1.27), single round, "
                                             "no break-even until the speedup is known")
    failed = dict(backend="eager (A/A)", verdict_kind="inconclusive", speedup=None, rounds=1)
    assert fmt.bottom_line(failed).startswith("eager (A/A) against eager: inconclusive, no speedup measured")


def test_each_verdict_is_said_once(cmp):
    out = cmp.to_html()
    summary = cmp.summary().set_index("backend")
    for label in ("inductor", "xla"):
        r = summary.loc[label]
        line = html.escape(fmt.bottom_line(r.to_dict() | {"backend": label}))
        assert out.count(line) == 1
        assert out.count(f"{fmt_ratio(r.speedup)} (95 % interval") == 0   # the sentence is not repeated whole
        kind = r.verdict_kind
        assert out.count(f'tcb-kind-{kind.replace(" ", "-")}"') == 0    # no badge beside the line, no verdict row
    assert "verdict</th>" not in out and "warnings</th>" not in out
    assert out.count("compiling never pays off") == 0 and out.count("never pays off") == 1   # xla's bottom line


def test_verdict_reason_keeps_only_what_the_bottom_line_does_not_say():
    wide = dict(verdict_kind="inconclusive", speedup=1.036996, speedup_ci_low=0.847626, speedup_ci_high=1.268672,
                verdict="inconclusive: between 0.85× and 1.27× (point 1.04×, 95 % interval): it contains 1 and "
                        "reaches past ±5% — give the rounds more time than budget_s=150")
    assert fmt.verdict_reason(wide) == ("the interval: it contains 1 and reaches past ±5% — "
                                        "give the rounds more time than budget_s=150")
    fast = dict(verdict_kind="faster", speedup=2.0, speedup_ci_low=1.8, speedup_ci_high=2.2,
                verdict="faster: 2.00× (95 % interval 1.80×–2.20×); compiling pays off after 1,100–2,300 steps")
    assert fmt.verdict_reason(fast) == ""
    slow = dict(verdict_kind="slower", speedup=0.44, speedup_ci_low=0.36, speedup_ci_high=0.54,
                verdict="slower: 0.44× (95 % interval 0.36×–0.54×) (from this comparison's rounds alone: more "
                        "comparisons would widen it); compiling never pays off here")
    assert fmt.verdict_reason(slow) == "from this comparison's rounds alone: more comparisons would widen it"


@pytest.mark.parametrize("ratio, low, high, short, long", [
    # native ÷ compiled 1.13 with the interval 0.94–1.38, which contains 1: not "1.13× less"
    (1.13, 0.94, 1.38, "no measurable difference",
     "compiled peak 0.88× the native peak (0.72–1.06): no measurable difference"),
    (1 / 2.62, 1 / 2.85, 1 / 2.40, "2.62× the native peak", "compiled peak 2.62× the native peak (2.40–2.85)"),
    (1.25, None, None, "0.80× the native peak", "compiled peak 0.80× the native peak (no interval: fewer than 2 "
                                                "rounds)"),
])
def test_one_memory_convention(ratio, low, high, short, long):
    row = dict(backend="inductor", memory_ratio=ratio, memory_ci_low=low, memory_ci_high=high)
    assert fmt.memory_text(row, short=True) == short
    assert fmt.memory_text(row) == long


def test_memory_bar_table_and_bottom_line_say_no_measurable_difference_when_the_interval_contains_1(cmp):
    summary = cmp.summary()
    summary.loc[summary.backend == "inductor", ["memory_ratio", "memory_ci_low", "memory_ci_high"]] = [
        1.13, 0.94, 1.38]
    fig = plots.plot_memory(summary[["backend", "status", "peak_mem_mb", "memory_ratio", "memory_ci_low",
                                     "memory_ci_high"]])
    texts = {t.name: t.text[0] for t in fig.data}
    assert texts["inductor"] == "no measurable difference" and texts["eager"] == ""
    assert "less" not in " ".join(texts.values()) and "more" not in " ".join(texts.values())
    err = fig.data[1].error_y
    assert err.arrayminus[0] > 0 and err.array[0] > 0            # whiskers either side of the bar
    table = tc.report.summary_table_html(summary)
    row = table.split("peak memory, compiled ÷ native (95 % interval)</th>")[1].split("</tr>")[0]
    assert "0.88× (0.72–1.06×)" in row and "no measurable difference" in row
    assert "compiled peak 0.88× the native peak (0.72–1.06): no measurable difference" in (
        _report.bottom_lines_html(summary))


def test_throughput_bars_have_error_bars_from_the_speedup_interval(cmp):
    df = plots.collect_throughput(cmp)
    fig = plots.plot_throughput(df)
    bars = {t.name: t for t in fig.data}
    assert bars["eager"].error_y.array is None                    # the baseline has no interval
    for label in ("inductor", "xla"):
        r = df.set_index("backend").loc[label]
        err = bars[label].error_y
        assert math.isclose(r.samples_s + err.array[0], r.samples_s * r.speedup_ci_high / r.speedup)
        assert math.isclose(r.samples_s - err.arrayminus[0], r.samples_s * r.speedup_ci_low / r.speedup)


def test_step_time_rounds_can_be_told_apart(cmp):
    df = plots.collect_step_times(cmp)
    fig = plots.plot_step_times(df)
    for label in cmp.backends:
        group = [t for t in fig.data if t.legendgroup == label]
        medians = [t for t in group if t.meta["kind"] == "median"]
        rounds = [t for t in group if t.meta["kind"] == "round"]
        assert len(medians) == 1 and medians[0].legendgrouptitle.text == label
        assert [t.name for t in rounds] == [f"round {k}" for k in range(cmp.rounds)]
        assert all(t.opacity < 1 for t in rounds) and medians[0].line.width > rounds[0].line.width
        steps = df[df.backend == label]
        assert list(medians[0].y) == list(steps.groupby("step")["step_ms"].median())
    one = plots.plot_step_times(plots.collect_step_times(_comparison({"eager": 0.1, "inductor": 0.05}, rounds=1)))
    assert [t.name for t in one.data] == ["1 round", "1 round"]
    jobs = plots.plot_step_times(plots.collect_step_times(cmp.by_backend("xla")))   # JobResults: rounds by run
    assert [t.name for t in jobs.data] == ["median of 3 rounds", "round 0", "round 1", "round 2"]


def test_job_spec_is_a_table_of_fields(cmp):
    out = cmp.to_html()
    section = out.split("<h2>Job spec</h2>")[1]
    assert "JobSpec(" not in out and "model='" not in section
    table = section.split("</table>")[0]
    for name, value in cmp.spec.to_dict().items():
        assert f'<th scope="row">{name}</th>' in table
    assert '<th scope="row">model</th><td>bert-base-cased</td>' in table
    assert '<th scope="row">batch_size</th><td>8</td>' in table
