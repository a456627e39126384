"""Plots in two steps, as optuna's visualization does: ``collect_*(x) -> DataFrame``, then
``plot_*(df) -> plotly Figure``. Notebooks, the panel, the HTML report and the CLI share them.

``collect_*`` accepts a Comparison, a list of JobResults or a single JobResult.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

import pandas as pd
import plotly.graph_objects as go

# One colour per backend everywhere (panel, report, notebooks).
COLORS = {"eager": "#636EFA", "inductor": "#EF553B", "xla": "#00CC96"}
_LAYOUT = dict(template="plotly_white", height=340, margin=dict(l=60, r=20, t=50, b=50),
               legend=dict(orientation="h", y=-0.2))


def color(backend: str) -> str:
    return COLORS.get(backend, "#AB63FA")


def _results(x: Any) -> list:
    if hasattr(x, "results"):
        return list(x.results)
    if isinstance(x, Iterable) and not isinstance(x, (str, bytes)):
        return list(x)
    return [x]


def collect_throughput(x: Any) -> pd.DataFrame:
    """backend, samples_s, tokens_s, median_step_ms, speedup (vs the native backend) per backend."""
    if hasattr(x, "summary"):
        df = x.summary()
        return df[["backend", "status", "samples_s", "tokens_s", "median_step_ms", "speedup"]].copy()
    rows = [dict(backend=r.spec.backend, status=r.status, samples_s=r.samples_s, tokens_s=r.tokens_s,
                 median_step_ms=None if r.median_step_s is None else r.median_step_s * 1e3, speedup=None)
            for r in _results(x)]
    return pd.DataFrame(rows, columns=["backend", "status", "samples_s", "tokens_s", "median_step_ms", "speedup"])


def _speedup_text(sp: Any, status: str) -> str:
    if status != "ok":
        return status
    if sp is None or (isinstance(sp, float) and math.isnan(sp)):
        return ""
    return f"{sp:.2f}×"


def plot_throughput(df: pd.DataFrame, title: str = "Throughput (samples/s) — speedup vs native") -> go.Figure:
    """Bars per backend, the speedup written on each bar."""
    fig = go.Figure(layout=dict(title=title, yaxis_title="samples / s", **_LAYOUT))
    for _, row in df.iterrows():
        fig.add_bar(x=[row["backend"]], y=[row["samples_s"] or 0.0], name=row["backend"],
                    marker_color=color(row["backend"]), text=[_speedup_text(row.get("speedup"), row["status"])],
                    textposition="outside")
    fig.update_layout(showlegend=False, uniformtext_minsize=10)
    return fig


def collect_memory(x: Any) -> pd.DataFrame:
    """backend, peak_mem_mb, memory_ratio per backend."""
    if hasattr(x, "summary"):
        return x.summary()[["backend", "status", "peak_mem_mb", "memory_ratio"]].copy()
    rows = [dict(backend=r.spec.backend, status=r.status, memory_ratio=None,
                 peak_mem_mb=None if r.peak_mem_bytes is None else r.peak_mem_bytes / 2**20) for r in _results(x)]
    return pd.DataFrame(rows, columns=["backend", "status", "peak_mem_mb", "memory_ratio"])


def plot_memory(df: pd.DataFrame, budget_gb: float | None = None,
                title: str = "Peak memory above the post-load baseline (MiB)") -> go.Figure:
    """Bars per backend; the profile's memory budget as a horizontal line when given."""
    fig = go.Figure(layout=dict(title=title, yaxis_title="MiB", **_LAYOUT))
    for i, (_, row) in enumerate(df.iterrows()):
        ratio = row.get("memory_ratio")
        if ratio is None or (isinstance(ratio, float) and math.isnan(ratio)) or i == 0:
            text = ""          # the first row is the native baseline
        else:
            text = f"{ratio:.2f}× less" if ratio >= 1 else f"{1 / ratio:.2f}× more"
        fig.add_bar(x=[row["backend"]], y=[row["peak_mem_mb"] or 0.0], name=row["backend"],
                    marker_color=color(row["backend"]), text=[text], textposition="outside")
    if budget_gb:
        fig.add_hline(y=budget_gb * 1024, line_dash="dash", line_color="firebrick",
                      annotation_text=f"budget {budget_gb:g} GiB", annotation_position="top left")
    fig.update_layout(showlegend=False)
    return fig


def collect_steps(x: Any) -> pd.DataFrame:
    """Every step record, one row per (job, step)."""
    if hasattr(x, "steps") and hasattr(x, "results"):
        return x.steps()
    frames = [r.steps() for r in _results(x)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def collect_losses(x: Any) -> pd.DataFrame:
    """backend, run_id, step, loss for every logged loss."""
    df = collect_steps(x)
    if df.empty:
        return pd.DataFrame(columns=["backend", "run_id", "step", "loss"])
    return df.loc[df["loss"].notna(), ["backend", "run_id", "step", "loss"]].reset_index(drop=True)


def plot_losses(df: pd.DataFrame, title: str = "Training loss (same seed, same data order)") -> go.Figure:
    """One line per backend (per run when there are several rounds) on one step axis."""
    fig = go.Figure(layout=dict(title=title, xaxis_title="step", yaxis_title="loss", **_LAYOUT))
    for i, ((backend, run_id), g) in enumerate(df.groupby(["backend", "run_id"], sort=False)):
        first = not any(t.name == backend for t in fig.data)
        fig.add_scatter(x=g["step"], y=g["loss"], mode="lines", name=backend, legendgroup=backend,
                        showlegend=first, line=dict(color=color(backend)))
    return fig


def collect_step_times(x: Any) -> pd.DataFrame:
    """backend, run_id, step, step_ms, warmup for every step."""
    df = collect_steps(x)
    if df.empty:
        return pd.DataFrame(columns=["backend", "run_id", "step", "step_ms", "warmup"])
    out = df[["backend", "run_id", "step", "warmup"]].copy()
    out["step_ms"] = df["step_s"] * 1e3
    return out


def plot_step_times(df: pd.DataFrame, title: str = "Step time (ms): warmup / compile spike, then steady state") -> go.Figure:
    """One line per backend, log scale, the warmup steps shaded."""
    fig = go.Figure(layout=dict(title=title, xaxis_title="step", yaxis_title="ms (log)", yaxis_type="log", **_LAYOUT))
    for (backend, run_id), g in df.groupby(["backend", "run_id"], sort=False):
        first = not any(t.name == backend for t in fig.data)
        fig.add_scatter(x=g["step"], y=g["step_ms"], mode="lines+markers", name=backend, legendgroup=backend,
                        showlegend=first, line=dict(color=color(backend)), marker=dict(size=4))
    if not df.empty and df["warmup"].any():
        last_warm = df.loc[df["warmup"].astype(bool), "step"].max()
        fig.add_vrect(x0=-0.5, x1=last_warm + 0.5, fillcolor="lightgrey", opacity=0.3, line_width=0,
                      annotation_text="warmup", annotation_position="top left")
    return fig
