"""How a time-to-quality study is shown: the held-out loss against wall time (each seed faint, the median over seeds
bold, the target as a line), bars of time and cost to target with their intervals, time to target against the
horizon a user trains for (``plot_horizon``), the summary in words, and the HTML report (``tcbench report``)."""

from __future__ import annotations

import html
import math
import statistics
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.colors import hex_to_rgb, qualitative
from plotly.subplots import make_subplots

from tcbench.view.format import fmt_number
from tcbench.view.plots import LAYOUT
from tcbench.host.paths import GENERATOR_META, check_output
from tcbench.tuning.quality.projection import horizon_steps_grid, project, time_curves
from tcbench.view.report import check_plotlyjs, write_plotlyjs

SHOWN = ["candidate", "backend", "batch_size", "lr", "time_to_target_s", "time_low", "time_high", "usd_to_target",
         "samples_to_target", "speedup", "speedup_low", "speedup_high", "samples_ratio", "samples_ratio_low",
         "samples_ratio_high", "runs", "not_converged", "note"]


def _num(value: Any) -> str:
    """A figure for people (3 significant digits, an exponent only below 0.001: learning rates, small costs)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:.3g}" if 0 < abs(float(value)) < 0.001 else fmt_number(value)


def color(i: int) -> str:
    """The i-th candidate's colour (the reference's first), the same in every figure of a study."""
    return qualitative.Plotly[i % len(qualitative.Plotly)]


def _interval(point: Any, low: Any, high: Any, unit: str = "") -> str:
    if point is None or (isinstance(point, float) and math.isnan(point)):
        return "—"
    if low is None or high is None or (isinstance(low, float) and math.isnan(low)):
        return f"{_num(point)}{unit}"
    return f"{_num(point)}{unit} ({_num(low)}–{_num(high)})"


def _verdict(point: Any, low: Any, high: Any, better: str, worse: str) -> str:
    """A paired ratio in words: ``better`` or ``worse`` when its interval excludes 1, else inconclusive."""
    text = _interval(point, low, high, "×")
    if text == "—":
        return "— (no seed reached the target in both)"
    if low is None or high is None or (isinstance(low, float) and math.isnan(low)):
        return f"inconclusive: {text} (one seed pair)"
    if low > 1:
        return f"{better}: {text}"
    if high < 1:
        return f"{worse}: {text}"
    return f"inconclusive: {text}, the interval includes 1"


def horizon_sentence(p: Any, reference: str) -> str:
    """A ``projection.Projection`` in one sentence: "at 20,000 steps, inductor reaches the reference's quality sooner:
    1.7× (1.5–1.9); on the medians, native is sooner below 900 steps" (reference ÷ candidate, per seed, as the
    table's ratios; the break-even from the seeds' median factors)."""
    head = f"at {p.horizon_steps:,} steps, {p.label}"
    if p.speedup is None:
        return f"{head}: not projected ({p.note})"
    text = f"{head} reaches the reference's quality {_verdict(p.speedup, p.low, p.high, 'sooner', 'later')}"
    if p.break_even_steps is not None:   # where the lines through the seeds' medians cross
        n = f"{p.break_even_steps:,.0f}"
        text += (f"; on the medians, {reference} is sooner below {n} steps" if p.break_even_kind == "sooner above"
                 else f"; on the medians, {reference} is sooner above {n} steps")
    elif p.break_even_kind in ("always sooner", "never sooner"):
        text += (f"; on the medians, {'sooner' if p.break_even_kind == 'always sooner' else 'later'} than "
                 f"{reference} at every horizon")
    if not p.falling:
        text += f" (the times are an upper bound: {reference}'s held-out loss had stopped falling)"
    return text


def median_curve(points: list[list[tuple[float, float]]]) -> tuple[list[float], list[float]]:
    """The median over seeds at each evaluation index that every seed reached: (median wall s, median loss)."""
    n = min((len(p) for p in points), default=0)
    return ([statistics.median(p[i][0] for p in points) for i in range(n)],
            [statistics.median(p[i][1] for p in points) for i in range(n)])


def plot_curves(result: Any) -> go.Figure:
    """Held-out loss against wall time (compile included, evaluations left out) per candidate: each seed faint, the
    median over seeds bold, the target dashed."""
    fig = go.Figure(layout=dict(LAYOUT, title="Held-out loss against wall time (seeds faint, median bold)",
                                xaxis_title="wall time from the first step (compile included), s",
                                yaxis_title="held-out loss"))
    for i, c in enumerate(result.candidates):
        runs = [r for r in result.runs if r.label == c.label and r.curve]
        for j, r in enumerate(runs):
            fig.add_scatter(x=[p.wall_s for p in r.curve], y=[p.loss for p in r.curve], mode="lines",
                            line=dict(color=color(i), width=1), opacity=0.3, legendgroup=c.label, showlegend=False,
                            name=f"{c.label} seed {r.seed}", meta={"candidate": c.label, "seed": r.seed})
        x, y = median_curve([[(p.wall_s, p.loss) for p in r.curve] for r in runs])
        fig.add_scatter(x=x, y=y, mode="lines+markers", line=dict(color=color(i), width=3), legendgroup=c.label,
                        name=f"{c.label} (median)", meta={"candidate": c.label, "median": True})
    if math.isfinite(result.target):
        fig.add_hline(y=result.target, line=dict(dash="dash", color="black"),
                      annotation_text=f"target {result.target:.4g}")
    return fig


def plot_bars(result: Any) -> go.Figure:
    """Time (and, with a price, cost) to target per candidate: the olympic score, the seeds' 95 % interval as error
    bars; a candidate that cannot be scored has no bar and says why in its hover text."""
    table = result.table()
    priced = table["usd_to_target"].notna().any()
    fig = make_subplots(rows=1, cols=2 if priced else 1,
                        subplot_titles=["time to target, s"] + (["cost to target, $"] if priced else []))
    for col, (what, low, high) in enumerate([("time_to_target_s", "time_low", "time_high"),
                                             ("usd_to_target", "usd_low", "usd_high")][:2 if priced else 1], 1):
        y = table[what].astype(float)
        fig.add_bar(x=table["candidate"], y=y, marker_color=[color(i) for i in range(len(table))], showlegend=False,
                    error_y=dict(type="data", symmetric=False, array=(table[high].astype(float) - y).tolist(),
                                 arrayminus=(y - table[low].astype(float)).tolist()),
                    hovertext=[n or "" for n in table["note"]], row=1, col=col, name=what)
    fig.update_layout(LAYOUT, title="Time and cost to target (olympic mean; bars: the seeds' 95 % interval)")
    return fig


def _fill(hex_color: str, alpha: float = 0.18) -> str:
    r, g, b = hex_to_rgb(hex_color)
    return f"rgba({r}, {g}, {b}, {alpha})"


def plot_horizon(result: Any, horizon_steps: int) -> go.Figure:
    """Time to target against the horizon: per candidate (the reference too) its projected time to what the reference
    reaches at each number of its steps, a line (the geometric mean over seeds) in a band (their 95 % interval), on
    log axes; each break-even marked where it crosses the reference's line; the user's horizon a dotted vertical
    line. A candidate no seed projects is a legend entry that says why (``projection`` module)."""
    projections = project(result, horizon_steps)
    steps = horizon_steps_grid(horizon_steps, projections)
    curves = time_curves(result, steps)
    fig = go.Figure(layout=dict(LAYOUT, title=f"Time to the reference's quality at each horizon (bands: the seeds' "
                                              f"95 % interval; × break-even) — yours: {horizon_steps:,} steps",
                                xaxis=dict(type="log", title="reference steps you train for"),
                                yaxis=dict(type="log", title="time to what the reference reaches there, s")))
    why = {p.label: p.note for p in projections if p.speedup is None}
    for i, c in enumerate(result.candidates):
        rows = curves[curves["label"] == c.label]
        meta = {"candidate": c.label}
        if rows.empty:
            fig.add_scatter(x=[None], y=[None], mode="lines", line=dict(color=color(i)), meta=meta,
                            name=f"{c.label}: not projected ({why.get(c.label, 'the reference reached no target')})")
            continue
        if rows["low"].notna().all():
            fig.add_scatter(x=[*rows["steps"], *rows["steps"][::-1]], y=[*rows["high"], *rows["low"][::-1]],
                            fill="toself", fillcolor=_fill(color(i)), line=dict(width=0), hoverinfo="skip",
                            legendgroup=c.label, showlegend=False, meta={**meta, "band": True})
        fig.add_scatter(x=rows["steps"], y=rows["time_s"], mode="lines", line=dict(color=color(i), width=2.5),
                        name=c.label, legendgroup=c.label, meta=meta,
                        hovertemplate=f"{html.escape(c.label)}: %{{y:.3g}} s at %{{x:,}} steps<extra></extra>")
    ref = curves[curves["label"] == result.reference.label].set_index("steps")["time_s"]
    crossings = [(p, round(p.break_even_steps)) for p in projections
                 if p.break_even_steps is not None and round(p.break_even_steps) in ref.index]
    if crossings:
        fig.add_scatter(x=[n for _, n in crossings], y=[ref[n] for _, n in crossings], mode="markers+text",
                        marker=dict(symbol="x", size=11, color="black"), textposition="top center",
                        text=[f"{p.label}: {n:,}" for p, n in crossings], name="break-even (on the medians)",
                        meta={"break_even": [p.label for p, _ in crossings]})
    if len(curves):
        low = curves["low"].fillna(curves["time_s"]).min()
        high = curves["high"].fillna(curves["time_s"]).max()
        fig.add_scatter(x=[horizon_steps, horizon_steps], y=[low, high], mode="lines", meta={"horizon": True},
                        line=dict(color="black", dash="dot", width=1.5), name=f"your horizon: {horizon_steps:,} steps")
    return fig


def describe(result: Any) -> str:
    """The study in a few lines: the target, each candidate's time, cost and samples to target with the ratios
    against the reference, the premise check and the notes."""
    lines = []
    if result.horizon_steps is not None and math.isfinite(result.target):   # the user's horizon leads
        lines += result.projection_sentences()
    lines.append(f"target held-out loss {result.target:.4g} ({result.target_source})" if math.isfinite(result.target)
                 else f"no target: {result.target_source}")
    for _, row in result.table().iterrows():
        if row.candidate == result.reference.label:
            lines.append(f"- {row.candidate} (reference): {_num(row.time_to_target_s)} s to target, "
                         f"{_num(row.samples_to_target)} samples{', ' + row.note if row.note else ''}")
            continue
        time = _verdict(row.speedup, row.speedup_low, row.speedup_high, "sooner", "later")
        samples = _verdict(row.samples_ratio, row.samples_ratio_low, row.samples_ratio_high, "fewer", "more")
        lines.append(f"- {row.candidate}: {_num(row.time_to_target_s)} s to target; {time} (reference ÷ this, per "
                     f"seed); samples: {samples}{', ' + row.note if row.note else ''}")
    lines.append(f"cost: {result.price_basis}")
    premise = result.premise
    lines.append(f"lr premise: {premise.verdict}" if premise is not None else "lr premise: not checked")
    lines += [f"note: {n}" for n in result.notes]
    return "\n".join(lines)


def _compile(seconds: Any, cold: Any) -> str:
    """A compiled candidate's median compile and in how many runs it was cold; "—" for a native one."""
    if seconds is None or seconds != seconds:
        return "—"
    return f"{_num(seconds)} ({int(cold)} cold)"


def table_html(table: pd.DataFrame) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in
                   ("candidate", "batch", "lr", "time to target, s", "cost, $", "samples", "speedup vs native",
                    "samples ratio", "not converged", "compile s (cold runs)", "note"))
    rows = []
    for _, r in table.iterrows():
        cells = (r.candidate, r.batch_size, _num(r.lr), _interval(r.time_to_target_s, r.time_low, r.time_high),
                 _num(r.usd_to_target), _num(r.samples_to_target),
                 _interval(r.speedup, r.speedup_low, r.speedup_high, "×"),
                 _interval(r.samples_ratio, r.samples_ratio_low, r.samples_ratio_high, "×"),
                 f"{r.not_converged} of {r.runs}",
                 _compile(r.compile_s, r.cold_compiles),
                 r.note or "")
        rows.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    return f"<table class='tcb-quality'><tr>{head}</tr>{''.join(rows)}</table>"


def to_html(result: Any, path: str | Path, plotlyjs: str = "directory") -> Path:
    """The study as one HTML page: the summary, the table, the curves and the bars."""
    first = {"directory": "directory", "cdn": "cdn", "inline": True}[check_plotlyjs(plotlyjs)]
    target = check_output(path, "path")   # never over the store, a SQLite file, or into a missing folder
    figs = [plot_curves(result), plot_bars(result)]
    if result.horizon_steps is not None and math.isfinite(result.target):   # the user's horizon: its chart first
        figs.insert(0, plot_horizon(result, result.horizon_steps))
    divs = "".join(f"<div>{f.to_html(full_html=False, include_plotlyjs=first if i == 0 else False)}</div>"
                   for i, f in enumerate(figs))
    summary = "".join(f"<p>{html.escape(line)}</p>" for line in describe(result).splitlines())
    spec = result.reference.spec
    page = (f"<!doctype html><html><head><meta charset='utf-8'>{GENERATOR_META}<title>tcbench time to quality "
            f"{result.comparison_id or ''}</title></head><body><h1>Time to quality: {html.escape(spec.model)} "
            f"{html.escape(spec.size)}</h1>{summary}{table_html(result.table())}{divs}</body></html>")
    target.write_text(page, encoding="utf-8")
    if first == "directory":   # the page loads plotly.min.js from beside it, as a comparison's report does
        write_plotlyjs(target.resolve().parent)
    return target
