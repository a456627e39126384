"""Plots in two steps, as optuna's visualization does: ``collect_*(x) -> DataFrame``, then
``plot_*(df) -> plotly Figure``. Notebooks, the panel, the HTML report and the CLI share them.

``collect_*`` accepts a Comparison, a list of JobResults or a single JobResult. Traces are per job
label ("eager", "inductor", "eager (A/A)"); an A/A twin has its backend's colour, drawn dashed.
"""

from __future__ import annotations

from typing import Any, Iterable

import pandas as pd
import plotly.graph_objects as go

from tcbench.core.results import backend_of
from tcbench.view.format import fmt_ratio, is_missing, speedup_text   # speedup_text: the panel's bars too

# One colour per backend everywhere (panel, report, notebooks).
COLORS = {"eager": "#636EFA", "inductor": "#EF553B", "xla": "#00CC96"}
LAYOUT = dict(template="plotly_white", height=360, margin=dict(l=60, r=20, t=60, b=50),
               legend=dict(orientation="h", y=-0.25), title_font_size=14)
BUDGET_FAR = 4.0     # a memory budget more than 4x the tallest bar is written in the title, not drawn


def color(label: str) -> str:
    """The colour of a job label's backend (``"eager (A/A)"`` has eager's colour)."""
    return COLORS.get(backend_of(label), "#AB63FA")


def _dash(label: str) -> str:
    return "dash" if backend_of(label) != label else "solid"


def _results(x: Any) -> list:
    if hasattr(x, "results"):
        return list(x.results)
    if isinstance(x, Iterable) and not isinstance(x, (str, bytes)):
        return list(x)
    return [x]


# -- throughput --------------------------------------------------------------------------------------------
_THROUGHPUT = ["backend", "status", "rounds", "samples_s", "tokens_s", "median_step_ms", "speedup", "speedup_ci_low",
               "speedup_ci_high"]


def collect_throughput(x: Any) -> pd.DataFrame:
    """Per job label: status, rounds, samples_s, tokens_s, median_step_ms, speedup vs native and its 95 %
    interval (speedup_ci_low, speedup_ci_high); no speedup for single JobResults."""
    if hasattr(x, "summary"):
        df = x.summary()
        return df.reindex(columns=_THROUGHPUT).copy()
    rows = [dict(backend=r.name, status=r.status, rounds=1, samples_s=r.samples_s, tokens_s=r.tokens_s,
                 median_step_ms=None if r.median_step_s is None else r.median_step_s * 1e3)
            for r in _results(x)]
    return pd.DataFrame(rows, columns=_THROUGHPUT)


def plot_throughput(df: pd.DataFrame,
                    title: str = "Throughput (samples/s, higher is better)<br>"
                                 "<sub>on the bars: speedup vs native (95 % interval)</sub>") -> go.Figure:
    """Bars per job label; on each bar the speedup with its 95 % interval ("single round" when rounds == 1)."""
    fig = go.Figure(layout=dict(title=title, xaxis_title="job", yaxis_title="samples / s (median steady step)",
                                **LAYOUT))
    for i, row in enumerate(df.to_dict("records")):
        label = str(row["backend"])
        fig.add_bar(x=[label], y=[0.0 if is_missing(row.get("samples_s")) else row["samples_s"]], name=label,
                    marker_color=color(label), marker_pattern_shape="/" if _dash(label) == "dash" else "",
                    text=[speedup_text(row, first=i == 0)], textposition="outside", cliponaxis=False)
    fig.update_layout(showlegend=False, uniformtext_minsize=10)
    return fig


# -- memory ----------------------------------------------------------------------------------------------
def collect_memory(x: Any) -> pd.DataFrame:
    """Per job label: status, peak_mem_mb (MiB), memory_ratio (native ÷ this) and its 95 % interval."""
    cols = ["backend", "status", "peak_mem_mb", "memory_ratio", "memory_ci_low", "memory_ci_high"]
    if hasattr(x, "summary"):
        return x.summary().reindex(columns=cols).copy()
    rows = [dict(backend=r.name, status=r.status,
                 peak_mem_mb=None if r.peak_mem_bytes is None else r.peak_mem_bytes / 2**20) for r in _results(x)]
    return pd.DataFrame(rows, columns=cols)


def _memory_text(row: dict, first: bool) -> str:
    ratio = row.get("memory_ratio")
    if first or is_missing(ratio) or ratio <= 0:
        return ""          # the first row is the native baseline
    word, shown = ("less", ratio) if ratio >= 1 else ("more", 1 / ratio)
    return f"{fmt_ratio(shown)} {word}"


def plot_memory(df: pd.DataFrame, budget_gb: float | None = None,
                title: str = "Peak memory above the post-load baseline (MiB)") -> go.Figure:
    """Bars per job label on a linear axis; the memory budget as a dashed line when it is within
    ``BUDGET_FAR`` times the tallest bar, else written in the title (so the bars are not squashed)."""
    peaks = [0.0 if is_missing(v) else float(v) for v in df.get("peak_mem_mb", [])]
    tallest = max(peaks, default=0.0)
    budget_mb = budget_gb * 1024 if budget_gb else None
    far = budget_mb is not None and tallest > 0 and budget_mb > BUDGET_FAR * tallest
    if far:
        title += f"<br><sub>memory budget {budget_gb:g} GiB: far above the bars, not drawn</sub>"
    fig = go.Figure(layout=dict(title=title, xaxis_title="job", yaxis_title="MiB", yaxis_type="linear", **LAYOUT))
    for i, row in enumerate(df.to_dict("records")):
        label = str(row["backend"])
        fig.add_bar(x=[label], y=[peaks[i]], name=label, marker_color=color(label),
                    marker_pattern_shape="/" if _dash(label) == "dash" else "",
                    text=[_memory_text(row, i == 0)], textposition="outside", cliponaxis=False)
    if budget_mb is not None and not far:
        fig.add_hline(y=budget_mb, line_dash="dash", line_color="firebrick",
                      annotation_text=f"budget {budget_gb:g} GiB", annotation_position="top left")
    fig.update_layout(showlegend=False)
    return fig


# -- step records: losses and step times ------------------------------------------------------------------
def collect_steps(x: Any) -> pd.DataFrame:
    """Every step record, one row per (job, step)."""
    if hasattr(x, "steps") and hasattr(x, "results"):
        return x.steps()
    frames = [r.steps() for r in _results(x)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def collect_losses(x: Any) -> pd.DataFrame:
    """backend (job label), run_id, step, loss for every logged loss."""
    df = collect_steps(x)
    if df.empty:
        return pd.DataFrame(columns=["backend", "run_id", "step", "loss"])
    return df.loc[df["loss"].notna(), ["backend", "run_id", "step", "loss"]].reset_index(drop=True)


def smooth_losses(g: pd.DataFrame, span: int | None = None) -> pd.DataFrame:
    """step, loss_ema: the mean loss per step over a job label's runs, smoothed by an exponential moving
    average (pandas ``ewm(span=span, adjust=True)``; default span: a tenth of the logged steps, at least 3)."""
    per_step = g.groupby("step", sort=True)["loss"].mean()
    span = span or max(3, len(per_step) // 10)
    return pd.DataFrame({"step": per_step.index, "loss_ema": per_step.ewm(span=span, adjust=True).mean().values})


def plot_losses(df: pd.DataFrame, title: str = "Training loss (same seed, same data order)",
                span: int | None = None) -> go.Figure:
    """Per job label: its logged losses as faint points and their exponential moving average as a line
    (``smooth_losses``; ``span`` in logged steps)."""
    fig = go.Figure(layout=dict(title=title + "<br><sub>line: exponential moving average; points: logged losses"
                                "</sub>", xaxis_title="optimizer step", yaxis_title="training loss", **LAYOUT))
    for label, g in df.groupby("backend", sort=False):
        label = str(label)
        fig.add_scatter(x=g["step"], y=g["loss"], mode="markers", name=f"{label} (logged)", legendgroup=label,
                        showlegend=False, opacity=0.3, marker=dict(size=4, color=color(label)),
                        meta={"job": label, "kind": "raw"})
        sm = smooth_losses(g, span)
        fig.add_scatter(x=sm["step"], y=sm["loss_ema"], mode="lines", name=label, legendgroup=label,
                        line=dict(color=color(label), width=2.5, dash=_dash(label)),
                        meta={"job": label, "kind": "smoothed"})
    return fig


def collect_step_times(x: Any) -> pd.DataFrame:
    """backend (job label), run_id, step, step_ms, warmup for every step."""
    df = collect_steps(x)
    if df.empty:
        return pd.DataFrame(columns=["backend", "run_id", "step", "step_ms", "warmup"])
    out = df[["backend", "run_id", "step", "warmup"]].copy()
    out["step_ms"] = df["step_s"] * 1e3
    return out


def plot_step_times(df: pd.DataFrame,
                    title: str = "Step time: warmup (compile) spike, then steady state") -> go.Figure:
    """One line per job and run on a log axis (compile spikes are 10–1000× a steady step), warmup shaded."""
    fig = go.Figure(layout=dict(title=title, xaxis_title="optimizer step", yaxis_title="step time (ms, log scale)",
                                yaxis_type="log", **LAYOUT))
    for (label, _run_id), g in df.groupby(["backend", "run_id"], sort=False):
        label = str(label)
        first = not any(t.name == label for t in fig.data)
        fig.add_scatter(x=g["step"], y=g["step_ms"], mode="lines+markers", name=label, legendgroup=label,
                        showlegend=first, line=dict(color=color(label), dash=_dash(label)), marker=dict(size=4))
    if not df.empty and df["warmup"].any():
        last_warm = df.loc[df["warmup"].astype(bool), "step"].max()
        fig.add_vrect(x0=-0.5, x1=last_warm + 0.5, fillcolor="lightgrey", opacity=0.3, line_width=0,
                      annotation_text="warmup", annotation_position="top left")
    return fig
