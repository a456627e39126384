"""The summary table, findings, HTML report and plots, from comparisons built by hand (no training jobs)."""

from __future__ import annotations

import dataclasses
import html
import math
import platform
import re
import socket

import numpy as np
import pandas as pd
import pytest

import tcbench as tc
from tcbench import plots
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
    assert set(tc.report.__all__) == {"summary_table_html", "findings_html", "diagnostics_html", "comparison_html"}


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
