"""Figures for max-batch searches and learning-rate retuning.

Two steps, as everywhere in tcbench: ``collect_*(result) -> DataFrame``, then
``plot_*(df) -> plotly Figure`` (the panel can redraw from a DataFrame it keeps updating).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from tcbench.view.plots import LAYOUT, color

STATE_COLORS = {"COMPLETE": "#636EFA", "PRUNED": "#FFA15A", "FAIL": "#EF553B", "RUNNING": "#AB63FA",
                "WAITING": "#B6B6B6"}
RULE_COLORS = {"linear": "#19D3F3", "sqrt": "#FF6692", "best": "#00CC96"}


# -- max batch ---------------------------------------------------------------------------------
def collect_probes(result: Any) -> pd.DataFrame:
    """Every probe of a MaxBatchResult (backend, batch_size, fits, peak_mem_mb, status, reason)."""
    return result.probes()


def plot_probes(df: pd.DataFrame, budget_gb: float | None = None,
                title: str = "Max-batch probes: peak memory vs batch size") -> go.Figure:
    """Peak memory per probe (log batch axis); probes that did not fit drawn as crosses at the budget."""
    fig = go.Figure(layout=dict(title=title, xaxis_title="batch size", yaxis_title="peak MiB above baseline",
                                xaxis_type="log", **LAYOUT))
    top = budget_gb * 1024 if budget_gb else None
    for backend, g in df.groupby("backend", sort=False):
        ok, bad = g[g["fits"].astype(bool)], g[~g["fits"].astype(bool)]
        fig.add_scatter(x=ok["batch_size"], y=ok["peak_mem_mb"], mode="markers+lines", name=f"{backend} fits",
                        line=dict(color=color(backend)), marker=dict(size=8))
        if not bad.empty:
            y = [v if v is not None and not (isinstance(v, float) and math.isnan(v)) else (top or 0.0)
                 for v in bad["peak_mem_mb"]]
            fig.add_scatter(x=bad["batch_size"], y=y, mode="markers", name=f"{backend} does not fit",
                            text=bad["reason"].str.slice(0, 120), hoverinfo="x+y+text",
                            marker=dict(symbol="x", size=11, color=color(backend)))
    if top:
        fig.add_hline(y=top, line_dash="dash", line_color="firebrick", annotation_text=f"budget {budget_gb:g} GiB")
    return fig


# -- learning-rate retuning --------------------------------------------------------------------
def collect_history(result: Any) -> pd.DataFrame:
    """number, value, best_so_far, state, rule for every trial of a RetuneResult."""
    df = result.trials[["number", "lr", "value", "state", "rule"]].sort_values("number").reset_index(drop=True)
    best, out = math.inf, []
    for _, row in df.iterrows():
        if row["state"] == "COMPLETE" and row["value"] is not None and row["value"] < best:
            best = row["value"]
        out.append(best if math.isfinite(best) else None)
    df["best_so_far"] = out
    return df


def plot_history(df: pd.DataFrame, title: str = "Optimization history (held-out loss)") -> go.Figure:
    """Each finished trial's objective and the best so far; rule guesses labelled."""
    fig = go.Figure(layout=dict(title=title, xaxis_title="trial", yaxis_title="held-out loss", **LAYOUT))
    done = df[df["state"] == "COMPLETE"]
    fig.add_scatter(x=done["number"], y=done["value"], mode="markers+text", name="trial",
                    text=done["rule"], textposition="top center", marker=dict(color=STATE_COLORS["COMPLETE"], size=9))
    fig.add_scatter(x=df["number"], y=df["best_so_far"], mode="lines", name="best so far",
                    line=dict(color=RULE_COLORS["best"], shape="hv"))
    return fig


def collect_lr_objective(result: Any) -> pd.DataFrame:
    """number, lr, value, state, rule (pruned/failed trials keep lr, value None)."""
    return result.trials[["number", "lr", "value", "state", "rule", "reason"]].copy()


def plot_lr_objective(df: pd.DataFrame, linear_lr: float, sqrt_lr: float, best_lr: float | None = None,
                      title: str = "Learning rate vs held-out loss (rule predictions marked)") -> go.Figure:
    """Complete trials as points (log lr axis); pruned and failed trials as ticks; both rules as vertical lines."""
    fig = go.Figure(layout=dict(title=title, xaxis_title="learning rate (log)", yaxis_title="held-out loss",
                                xaxis_type="log", **LAYOUT))
    done = df[df["state"] == "COMPLETE"]
    fig.add_scatter(x=done["lr"], y=done["value"], mode="markers", name="complete",
                    marker=dict(size=9, color=STATE_COLORS["COMPLETE"]))
    floor = float(done["value"].min()) if not done.empty else 0.0
    for state in ("PRUNED", "FAIL"):
        part = df[df["state"] == state]
        if not part.empty:
            fig.add_scatter(x=part["lr"], y=[floor] * len(part), mode="markers", name=state.lower(),
                            text=part["reason"].str.slice(0, 120), marker=dict(symbol="line-ns-open", size=16,
                                                                                color=STATE_COLORS[state]))
    for name, lr in (("linear rule", linear_lr), ("√ rule", sqrt_lr), ("best", best_lr)):
        if lr:
            key = "linear" if name.startswith("linear") else "sqrt" if name.startswith("√") else "best"
            # add_vline cannot place a line on a log axis by value: give the log10 position.
            fig.add_vline(x=math.log10(lr), line_dash="dash" if key != "best" else "solid",
                          line_color=RULE_COLORS[key], annotation_text=f"{name} {lr:.2g}")
    return fig


def collect_intermediate(result: Any) -> pd.DataFrame:
    """number, step, value, state for every reported intermediate value (pruned trials included)."""
    return result.intermediate.copy()


def plot_intermediate(df: pd.DataFrame, title: str = "Intermediate values (training loss; pruned trials stop early)"
                      ) -> go.Figure:
    """One line per trial, coloured by its final state."""
    fig = go.Figure(layout=dict(title=title, xaxis_title="step", yaxis_title="mean training loss", **LAYOUT))
    for number, g in df.groupby("number", sort=True):
        state = g["state"].iloc[0]
        first = not any(t.legendgroup == state for t in fig.data)
        fig.add_scatter(x=g["step"], y=g["value"], mode="lines+markers", name=state.lower(), legendgroup=state,
                        showlegend=first, hovertext=f"trial {number}",
                        line=dict(color=STATE_COLORS.get(state, "#444")), marker=dict(size=4))
    return fig
