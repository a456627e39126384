"""The self-contained HTML report of a comparison (plotly.js inline, no network needed to view)."""

from __future__ import annotations

import html
import math
import platform
from typing import Any

import pandas as pd

from . import plots

_CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}
th{background:#f3f3f3}.warn{color:#a33}.verdict{font-weight:600}.grid{display:grid;grid-template-columns:1fr 1fr;gap:8px}
code{background:#f6f6f6;padding:1px 4px}"""

_COLUMNS = ["backend", "status", "median_step_ms", "samples_s", "tokens_s", "compile_latency_s", "cache", "peak_mem_mb",
            "speedup", "speedup_min", "speedup_max", "memory_ratio", "break_even_steps", "mfu", "loss_parity",
            "final_loss"]


def _fmt(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, float):
        if math.isinf(v):
            return "never"
        return f"{v:.3g}" if abs(v) < 100 else f"{v:,.0f}"
    return html.escape(str(v))


def summary_table_html(summary: pd.DataFrame) -> str:
    """The summary DataFrame as a compact HTML table (shared with the panel)."""
    cols = [c for c in _COLUMNS if c in summary.columns]
    head = "".join(f"<th>{c}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{_fmt(row[c])}</td>" for c in cols) + "</tr>" for _, row in summary.iterrows())
    return f'<table class="tcb-summary"><tr>{head}</tr>{body}</table>'


def findings_html(summary: pd.DataFrame) -> str:
    """Verdict and warnings per compiled backend, in plain words."""
    items = []
    for _, row in summary.iterrows():
        items.append(f'<li><b>{html.escape(row["backend"])}</b>: <span class="verdict">{html.escape(row["verdict"])}</span>')
        for w in row["warnings"]:
            items.append(f'<ul><li class="warn">{html.escape(w)}</li></ul>')
        items.append("</li>")
    return "<ul>" + "".join(items) + "</ul>"


def _costs_html(cmp: Any) -> str:
    """The cost table on the spec's profile (or the catalog's ml.g5.2xlarge when this machine has no price)."""
    try:
        prof = cmp.spec.profile if cmp.spec.profile != "this-machine" else "ml.g5.2xlarge"
        c = cmp.costs(prof)
    except Exception as exc:   # a profile name from an older catalog: the report still renders
        return f"<p>No cost table: {html.escape(str(exc))}</p>"
    cols = ["backend", "samples_s", "usd_per_1k_steps", "usd_per_epoch", "usd_per_1m_tokens", "saved_pct"]
    head = "".join(f"<th>{k}</th>" for k in cols)
    body = "".join("<tr>" + "".join(f"<td>{_fmt(r[k])}</td>" for k in cols) + "</tr>" for _, r in c.iterrows())
    basis = html.escape(str(c["basis"].dropna().iloc[0])) if c["basis"].notna().any() else ""
    return (f"<h2>Cost on {html.escape(prof)}</h2><table class='tcb-costs'><tr>{head}</tr>{body}</table>"
            f"<p>{basis}; epoch = 100,000 samples.</p>")


def comparison_html(cmp: Any) -> str:
    summary = cmp.summary()
    figs = [plots.plot_throughput(plots.collect_throughput(cmp)), plots.plot_memory(plots.collect_memory(cmp),
            cmp.spec.memory_budget_gb), plots.plot_losses(plots.collect_losses(cmp)),
            plots.plot_step_times(plots.collect_step_times(cmp))]
    divs = [f.to_html(full_html=False, include_plotlyjs=(i == 0), default_height="360px") for i, f in enumerate(figs)]
    s = cmp.spec
    spec_txt = html.escape(", ".join(f"{k}={v!r}" for k, v in s.to_dict().items()))
    machine = html.escape(f"{platform.node()} · {platform.processor() or platform.machine()} · Python {platform.python_version()}")
    errors = "".join(f'<p class="warn">{html.escape(r.spec.backend)} (run {r.run_id}): {html.escape(r.status)} — '
                     f'{html.escape(r.error[:600])}</p>' for r in cmp.results if r.error)
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>tcbench comparison {cmp.comparison_id}</title>
<style>{_CSS}</style></head><body>
<h1>tcbench: {html.escape(s.model)} ({html.escape(s.size)}) — native vs compiled</h1>
<p>Comparison {cmp.comparison_id}; backends {html.escape(", ".join(cmp.backends))}; rounds {cmp.rounds}; machine {machine}.</p>
<h2>Findings</h2>{findings_html(summary)}{errors}
<h2>Summary</h2><div style="overflow-x:auto">{summary_table_html(summary)}</div>
{_costs_html(cmp)}
<p>Step time: median of the steady-state steps (the first {s.warmup_steps} warmup steps are reported apart).
Speedup: native median step ÷ compiled median step (median of the per-round ratios). Compile latency: warmup time −
warmup steps × steady median. Memory: peak above the post-load baseline (CPU: RSS high-water). Break-even: compile
latency ÷ per-step gain.</p>
<div class="grid">{"".join(f"<div>{d}</div>" for d in divs)}</div>
<h2>Job spec</h2><p><code>{spec_txt}</code></p>
</body></html>"""
