"""Plots in two steps, as optuna's visualization does: ``collect_*(x) -> DataFrame``, then
``plot_*(df) -> plotly Figure``. Notebooks, the panel, the HTML report and the CLI share them.

``collect_*`` accepts a Comparison, a list of JobResults or a single JobResult. Traces are per job
label ("eager", "inductor", "eager (A/A)"); an A/A twin has its backend's colour, drawn dashed.
"""

from __future__ import annotations

import zlib
from typing import Any, Iterable

import pandas as pd
import plotly.graph_objects as go

from tcbench.core.results import aa_label, standing_for
from tcbench.view.format import is_missing, memory_compared, memory_text, speedup_text   # the panel's bars too

# One colour per backend everywhere (panel, report, notebooks).
COLORS = {"eager": "#636EFA", "inductor": "#EF553B", "xla": "#00CC96"}
_BACKEND_OF = standing_for(COLORS)   # "eager (A/A)", "inductor · default", ... -> their backend
LAYOUT = dict(template="plotly_white", height=360, margin=dict(l=60, r=20, t=60, b=50),
               legend=dict(orientation="h", y=-0.25), title_font_size=14)
BUDGET_FAR = 4.0     # a memory budget more than 4x the tallest bar is written in the title, not drawn


# a configuration's label (``compare_configs``: "inductor · bf16") takes one of these, the same in every figure
VARIANT_COLORS = ("#AB63FA", "#FFA15A", "#19D3F3", "#FF6692", "#B6E880", "#FF97FF", "#FECB52")


def color(label: str) -> str:
    """The colour of a job label's backend (``"eager (A/A)"`` and ``"inductor · default"`` have their backend's); any
    other configuration's label one of ``VARIANT_COLORS``, chosen by the label's own characters (stable between runs
    and figures)."""
    if label in _BACKEND_OF:
        return COLORS[_BACKEND_OF[label]]
    return VARIANT_COLORS[zlib.crc32(label.encode()) % len(VARIANT_COLORS)]


def _dash(label: str) -> str:
    """An A/A twin is drawn dashed (hatched bars)."""
    return "dash" if label in {aa_label(b) for b in COLORS} else "solid"


def _error_bar(height: float, point: Any, low: Any, high: Any) -> dict[str, Any] | None:
    """plotly ``error_y`` of a bar of ``height`` whose ratio ``point`` has the 95 % interval ``low``–``high``: the
    whiskers span height × low ÷ point to height × high ÷ point (the interval, relative to the bar); None without
    an interval."""
    if any(is_missing(v) for v in (point, low, high)) or height <= 0 or float(point) <= 0:
        return None
    point, low, high = float(point), float(low), float(high)
    return dict(type="data", symmetric=False, array=[height * (high / point - 1)],
                arrayminus=[height * (1 - low / point)], color="#333", thickness=1.5, width=8)


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
                                 "<sub>on the bars: speedup vs native; whiskers: its 95 % interval</sub>") -> go.Figure:
    """Bars per job label; on each bar the speedup with its 95 % interval ("single round" when rounds == 1), and
    the interval as whiskers (``_error_bar``: relative to the bar, so the baseline has none)."""
    fig = go.Figure(layout=dict(title=title, xaxis_title="job", yaxis_title="samples / s (median steady step)",
                                **LAYOUT))
    for i, row in enumerate(df.to_dict("records")):
        label = str(row["backend"])
        height = 0.0 if is_missing(row.get("samples_s")) else float(row["samples_s"])
        fig.add_bar(x=[label], y=[height], name=label, marker_color=color(label),
                    marker_pattern_shape="/" if _dash(label) == "dash" else "",
                    error_y=_error_bar(height, row.get("speedup"), row.get("speedup_ci_low"),
                                       row.get("speedup_ci_high")),
                    text=[speedup_text(row, first=i == 0)], textposition="inside" if height > 0 else "outside",
                    insidetextanchor="middle", cliponaxis=False)
    fig.update_layout(showlegend=False, uniformtext_minsize=10)
    return fig


# -- compile phases --------------------------------------------------------------------------------------
PHASES = (("Dynamo", "compile_dynamo_s"), ("AOTAutograd", "compile_aot_s"), ("backend compile", "compile_backend_s"))
PHASE_COLORS = {"Dynamo": "#FFA15A", "AOTAutograd": "#19D3F3", "backend compile": "#B6E880",
                "first steps (the rest)": "#D3D3D3"}


def collect_compile_phases(x: Any) -> pd.DataFrame:
    """Per compiled job label that reported its phases: one row per phase (``phase``, ``seconds``: the median over
    its rounds), and "first steps (the rest)": the compile latency measured from the steps minus the timed phases
    (running the first steps, allocation: what no compiler phase timed; never below 0)."""
    df = x.summary() if hasattr(x, "summary") else pd.DataFrame(
        [dict(backend=r.name, compile_latency_s=r.compile_latency_s, **{n: getattr(r, n) for _, n in PHASES})
         for r in _results(x)])
    rows = []
    for row in df.to_dict("records"):
        timed = {label: row.get(name) for label, name in PHASES if not is_missing(row.get(name))}
        if not timed:
            continue
        rows += [dict(backend=row["backend"], phase=label, seconds=float(v)) for label, v in timed.items()]
        if not is_missing(row.get("compile_latency_s")):
            rest = max(float(row["compile_latency_s"]) - sum(timed.values()), 0.0)
            rows.append(dict(backend=row["backend"], phase="first steps (the rest)", seconds=rest))
    return pd.DataFrame(rows, columns=["backend", "phase", "seconds"])


def plot_compile_phases(df: pd.DataFrame,
                        title: str = "Compile latency in phases (s)<br><sub>median over rounds; the rest: what the "
                                     "first steps took beyond the timed phases</sub>") -> go.Figure:
    """A stacked horizontal bar per compiled job label, one segment per phase."""
    fig = go.Figure(layout=dict(title=title, xaxis_title="seconds", barmode="stack", **LAYOUT))
    for phase, g in df.groupby("phase", sort=False):
        fig.add_bar(y=list(g["backend"]), x=list(g["seconds"]), name=str(phase), orientation="h",
                    marker_color=PHASE_COLORS.get(str(phase)), text=[f"{v:.1f}" for v in g["seconds"]],
                    textposition="inside", hovertemplate=f"{phase}: %{{x:.2f}} s<extra>%{{y}}</extra>")
    if df.empty:
        fig.add_annotation(text="no compiled job reported its compile phases", showarrow=False,
                           xref="paper", yref="paper", x=0.5, y=0.5)
    return fig


# -- memory ----------------------------------------------------------------------------------------------
def collect_memory(x: Any) -> pd.DataFrame:
    """Per job label: status, peak_mem_mb (MiB), memory_ratio (native ÷ this, as the summary stores it) and its
    95 % interval; the plot shows it as the compiled peak ÷ the native peak (``format.memory_text``)."""
    cols = ["backend", "status", "peak_mem_mb", "memory_ratio", "memory_ci_low", "memory_ci_high"]
    if hasattr(x, "summary"):
        return x.summary().reindex(columns=cols).copy()
    rows = [dict(backend=r.name, status=r.status,
                 peak_mem_mb=None if r.peak_mem_bytes is None else r.peak_mem_bytes / 2**20) for r in _results(x)]
    return pd.DataFrame(rows, columns=cols)


def plot_memory(df: pd.DataFrame, budget_gb: float | None = None,
                title: str = "Peak memory above the post-load baseline (MiB)<br><sub>on the bars: compiled "
                             "peak ÷ native peak; whiskers: its 95 % interval</sub>") -> go.Figure:
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
        ratio = None if i == 0 else memory_compared(row)        # the first row is the native baseline
        fig.add_bar(x=[label], y=[peaks[i]], name=label, marker_color=color(label),
                    marker_pattern_shape="/" if _dash(label) == "dash" else "",
                    error_y=None if ratio is None else _error_bar(peaks[i], *ratio),
                    text=["" if ratio is None else memory_text(row, short=True)],
                    textposition="inside" if peaks[i] > 0 else "outside", insidetextanchor="middle",
                    cliponaxis=False)
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


def _rounds(df: pd.DataFrame) -> pd.Series:
    """Each step's round: the stored one, else its run's rank among the runs of its job label (from 0)."""
    if "round" in df.columns:
        return df["round"]
    return df.groupby("backend")["run_id"].rank(method="dense").astype(int) - 1


def collect_step_times(x: Any) -> pd.DataFrame:
    """backend (job label), run_id, round, step, step_ms, warmup for every step (``round``: the comparison's round;
    for JobResults without one, the run's rank among its label's runs, from 0)."""
    df = collect_steps(x)
    if df.empty:
        return pd.DataFrame(columns=["backend", "run_id", "round", "step", "step_ms", "warmup"])
    out = df[["backend", "run_id", "step", "warmup"]].copy()
    out.insert(2, "round", _rounds(df))
    out["step_ms"] = df["step_s"] * 1e3
    return out


def plot_step_times(df: pd.DataFrame,
                    title: str = "Step time: warmup (compile) spike, then steady state") -> go.Figure:
    """Per job label one legend group, titled with the label: the median over its rounds, step by step, as a line,
    and each round as a faint line named "round k" (a click on an entry hides or shows it), on a log axis (compile
    spikes are 10–1000× a steady step); the warmup shaded."""
    legend = dict(orientation="v", x=1.02, y=1, groupclick="toggleitem", font_size=10, tracegroupgap=6)
    fig = go.Figure(layout=dict(title=title, xaxis_title="optimizer step", yaxis_title="step time (ms, log scale)",
                                yaxis_type="log", **{**LAYOUT, "legend": legend}))
    if "round" not in df.columns:
        df = df.assign(round=_rounds(df))
    for label, g in df.groupby("backend", sort=False):
        label, rounds = str(label), g.groupby("round", sort=True)
        line = dict(color=color(label), dash=_dash(label))
        median = g.groupby("step", sort=True)["step_ms"].median()
        fig.add_scatter(x=median.index, y=median.values, mode="lines", legendgroup=label, legendgrouptitle_text=label,
                        name=f"median of {rounds.ngroups} rounds" if rounds.ngroups > 1 else "1 round",
                        line={**line, "width": 2.5}, meta={"job": label, "kind": "median"})
        for rnd, r in rounds if rounds.ngroups > 1 else ():
            fig.add_scatter(x=r["step"], y=r["step_ms"], mode="lines", name=f"round {rnd}", legendgroup=label,
                            opacity=0.35, line={**line, "width": 1}, meta={"job": label, "kind": "round",
                                                                          "round": int(rnd)},
                            hovertemplate=f"{label} round {rnd}<br>step %{{x}}: %{{y:.1f}} ms<extra></extra>")
    if not df.empty and df["warmup"].any():
        last_warm = df.loc[df["warmup"].astype(bool), "step"].max()
        fig.add_vrect(x0=-0.5, x1=last_warm + 0.5, fillcolor="lightgrey", opacity=0.3, line_width=0,
                      annotation_text="warmup", annotation_position="top left")
    return fig
