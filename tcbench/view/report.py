"""The comparison as HTML for people: the summary table and the findings (shared by the report and the
ipywidgets panel), and the report: its dates and environment first, one bottom line per compiled job, the charts,
then the long tables. plotly.js is loaded from ``plotly.min.js`` beside the report by default (written there once
per folder), from plotly's CDN, or inlined for a self-contained file (``PLOTLYJS``).

The table is transposed — one column per job label, one row per figure with its unit — so every figure
fits on screen and on paper without a horizontal scroll. Everything shown comes from the stored
comparison (its summary, its jobs' stored environment), never from the machine that renders it.
"""

from __future__ import annotations

import html
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from tcbench.core.results import TRACE_REPORT_DIR
from tcbench.view import plots
from tcbench.view.format import (MISSING, REPORT_COLUMNS, bottom_line, fmt_number, fmt_percent, fmt_usd, fmt_yes_no,
                                 html_kind, html_note, html_text, is_missing, memory_text, verdict_reason)
from tcbench.host.env import describe
from tcbench.host.paths import GENERATOR_META
from tcbench.job.diagnostics import top

__all__ = ["summary_table_html", "findings_html", "diagnostics_html", "comparison_html", "write_plotlyjs"]

# where the report's plotly.js comes from: a file beside it (once per folder), plotly's CDN, or inline
PLOTLYJS = ("directory", "cdn", "inline")
PLOTLYJS_FILE = "plotly.min.js"      # the name plotly's include_plotlyjs="directory" loads
IN_BOTTOM_LINE = ("verdict_kind", "warnings")     # summary rows the report says in its bottom line instead

_STYLE = """<style>
.tcb-summary{border-collapse:collapse;font-size:13px;width:100%;table-layout:fixed;font-variant-numeric:tabular-nums}
.tcb-summary th,.tcb-summary td{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top;
overflow-wrap:anywhere}
.tcb-summary thead th{background:#f3f3f3;border-top-width:4px}
.tcb-summary tbody th{background:#fafafa;font-weight:600;width:12em}
.tcb-summary .tcb-note{color:#666;font-size:11px}
.tcb-kind{display:inline-block;padding:0 6px;border-radius:3px;font-weight:600;font-size:12px;background:#eee}
.tcb-kind-faster{background:#d9f2e0;color:#14532d}.tcb-kind-slower{background:#fbe0e0;color:#7f1d1d}
.tcb-kind-inconclusive{background:#fff1cc;color:#7a4b00}.tcb-kind-baseline{background:#e6ebff;color:#1e3a8a}
.tcb-findings .tcb-warning{color:#8a4b00}
.tcb-bottom{padding:0;margin:.4em 0;list-style:none}
.tcb-bottom li{margin:.3em 0;padding-left:8px;border-left:5px solid #ccc}
.tcb-bottom .tcb-line-faster{border-color:#16a34a}.tcb-bottom .tcb-line-slower{border-color:#dc2626}
.tcb-bottom .tcb-line-inconclusive{border-color:#d97706}
.tcb-bottom .tcb-note{color:#555;font-size:12px}.tcb-bottom .tcb-warning{color:#8a4b00;font-size:12px}
.tcb-spec{border-collapse:collapse;font-size:12px}.tcb-spec th,.tcb-spec td{border:1px solid #ddd;padding:2px 8px;
text-align:left;vertical-align:top}.tcb-spec th{background:#fafafa;font-weight:600}
.tcb-diagnosis{border-collapse:collapse;font-size:12px;width:100%}
.tcb-diagnosis th,.tcb-diagnosis td{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top;
overflow-wrap:break-word}.tcb-diagnosis th{background:#f3f3f3;white-space:nowrap}
@media print{.tcb-summary{font-size:9pt}.tcb-summary tr{break-inside:avoid;page-break-inside:avoid}
.tcb-kind{border:1px solid #999}}
</style>"""

_PAGE_CSS = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;padding:0 1em;color:#222}
h1{font-size:1.4em;margin:.2em 0}h2{font-size:1.15em;margin:1em 0 .3em}.env,.tcb-when{color:#444;font-size:13px;
margin:.25em 0}
.tcb-costs{border-collapse:collapse;font-size:13px;font-variant-numeric:tabular-nums}
.tcb-costs td,.tcb-costs th{border:1px solid #ddd;padding:3px 8px;text-align:right}.tcb-costs th{background:#f3f3f3}
.tcb-costs td:first-child{text-align:left}.warn{color:#a33}.grid{display:grid;grid-template-columns:1fr 1fr;gap:8px}
code{background:#f6f6f6;padding:1px 4px;overflow-wrap:anywhere}
@page{size:A4;margin:12mm}
@media print{body{margin:0;max-width:none;padding:0;font-size:10pt}.grid{display:block}
.grid>div{break-inside:avoid;page-break-inside:avoid}h2{break-after:avoid;page-break-after:avoid}}"""


# -- the summary table: one row per figure --------------------------------------------------------------------
# (row title, the summary columns it shows, how to show them), from the one column table (tcbench.view.format)
ROWS: list[tuple[str, tuple[str, ...], Callable[[dict], str]]] = [(c.title, c.columns, c.report_html)
                                                                  for c in REPORT_COLUMNS]
COLUMN_ROWS = {col: label for label, cols, _ in ROWS for col in cols} | {"backend": "(column heading)"}


def summary_table_html(summary: pd.DataFrame, verdicts: bool = True) -> str:
    """``Comparison.summary()`` as a table that fits a screen and a printed page: one column per job label,
    one row per figure (units in the row labels). Shared by the HTML report and the ipywidgets panel.
    ``verdicts=False`` leaves out the verdict and warnings rows (the report says them once, in its bottom line)."""
    records = summary.to_dict("records")
    head = "".join(f'<th scope="col" style="border-top-color:{plots.color(str(r["backend"]))}">'
                   f'{html.escape(str(r["backend"]))}</th>' for r in records)
    body = []
    for label, cols, show in ROWS:
        if not any(c in summary.columns for c in cols) or (not verdicts and cols[0] in IN_BOTTOM_LINE):
            continue
        cells = "".join(f"<td>{show(r)}</td>" for r in records)
        body.append(f'<tr><th scope="row">{html.escape(label)}</th>{cells}</tr>')
    return (f'{_STYLE}<table class="tcb-summary"><thead><tr><th scope="col">job</th>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>')


def findings_html(summary: pd.DataFrame) -> str:
    """Per job label: its verdict kind, the verdict sentence and its warnings (from the summary's
    ``verdict_kind``, ``verdict`` and ``warnings`` columns)."""
    items = []
    for r in summary.to_dict("records"):
        warns = [] if is_missing(r.get("warnings")) else list(r["warnings"])
        sub = "".join(f'<li class="tcb-warning">⚠ {html.escape(str(w))}</li>' for w in warns)
        items.append(f'<li class="tcb-finding"><b>{html.escape(str(r["backend"]))}</b> '
                     f'{html_kind(r.get("verdict_kind"))} {html_text(r.get("verdict"))}'
                     f'{f"<ul>{sub}</ul>" if sub else ""}</li>')
    return f'{_STYLE}<ul class="tcb-findings">{"".join(items)}</ul>'


def diagnostics_html(diag: pd.DataFrame) -> str:
    """``Comparison.diagnostics()`` for people: each distinct graph break, recompile, fallback and host transfer
    once per job (from the first round that has it) with where, why, count and the checklist's advice; "" when
    there is none. Shared by the HTML report and the ipywidgets panel."""

    if diag is None or not len(diag):
        return ""
    body = "".join(
        f"<tr><td>{html_text(r['backend'])}</td><td>{html_text(r['kind'])}</td>"
        f"<td>{'<code>' + html.escape(r['where']) + '</code>' if r['where'] else MISSING}{html_note(r['code'])}</td>"
        f"<td>{html_text(r['why'])}</td><td>{fmt_number(r['count'])}</td><td>{html_text(r['advice'])}</td></tr>"
        for r in top(diag).to_dict("records"))
    return (f'{_STYLE}<table class="tcb-diagnosis"><thead><tr><th>job</th><th>kind</th><th>where</th><th>why</th>'
            f'<th>count</th><th>what to do</th></tr></thead><tbody>{body}</tbody></table>')


# -- the report ------------------------------------------------------------------------------------------
def _cost_profile(cmp: Any, profile: str | None) -> str | None:
    """The profile to price at: the one asked for, else the spec's unless it is this machine (no price)."""
    if profile:
        return profile
    return None if cmp.spec.profile == "this-machine" else cmp.spec.profile


def costs_html(cmp: Any, profile: str | None = None) -> str:
    """The cost section priced at ``profile`` (see ``_cost_profile``); "" when no profile was chosen."""
    prof = _cost_profile(cmp, profile)
    if prof is None:
        return ""
    try:
        c = cmp.costs(prof)
    except Exception as exc:   # a profile name from an older catalog: the report still renders
        return f"<h2>Cost on {html.escape(prof)}</h2><p>No cost table: {html.escape(str(exc))}</p>"
    cols = [("job", "backend", html_text), ("samples/s", "samples_s", fmt_number),
            ("$ per 1,000 steps", "usd_per_1k_steps", fmt_usd), ("$ per epoch", "usd_per_epoch", fmt_usd),
            ("$ per 1M tokens", "usd_per_1m_tokens", fmt_usd), ("hours per epoch", "hours_per_epoch", fmt_number),
            ("saved by compiling", "saved_pct", lambda v: fmt_percent(v, share=False))]
    head = "".join(f"<th>{label}</th>" for label, _, _ in cols)
    body = "".join("<tr>" + "".join(f"<td>{fmt(r.get(k))}</td>" for _, k, fmt in cols) + "</tr>"
                   for r in c.to_dict("records"))
    basis = c["basis"].dropna()
    basis_text = html.escape(str(basis.iloc[0])) + "; " if len(basis) else ""
    return (f"<h2>Cost on {html.escape(prof)}</h2><table class='tcb-costs'><tr>{head}</tr>{body}</table>"
            f"<p>{basis_text}epoch = 100,000 samples.</p>")


def check_plotlyjs(plotlyjs: Any) -> str:
    """``plotlyjs`` when it is one of ``PLOTLYJS``, else a ValueError naming it and the allowed values."""
    if not isinstance(plotlyjs, str) or plotlyjs not in PLOTLYJS:
        raise ValueError(f"plotlyjs={plotlyjs!r} is not allowed; it must be one of 'directory' ({PLOTLYJS_FILE} "
                         "beside the report, written once per folder), 'cdn' (loaded from plotly's CDN when the "
                         "report is opened) or 'inline' (a self-contained file of about 5 MB)")
    return plotlyjs


def write_plotlyjs(folder: str | Path) -> Path | None:
    """Write plotly's bundled ``plotly.min.js`` into ``folder`` unless a file of that name is there already (as
    plotly's own ``write_html(include_plotlyjs="directory")`` does); returns its path when written, else None."""
    from plotly.offline import get_plotlyjs

    target = Path(folder) / PLOTLYJS_FILE
    if target.exists():
        return None
    target.write_text(get_plotlyjs(), encoding="utf-8")
    return target


def _figures_html(cmp: Any, plotlyjs: str) -> str:
    """The four charts, and the compile phases' when a compiled job reported them; plotly.js comes with the first
    (``plotlyjs``: see ``PLOTLYJS``)."""
    figs = [plots.plot_throughput(plots.collect_throughput(cmp)),
            plots.plot_memory(plots.collect_memory(cmp), cmp.spec.memory_budget_gb),
            plots.plot_losses(plots.collect_losses(cmp)), plots.plot_step_times(plots.collect_step_times(cmp))]
    phases = plots.collect_compile_phases(cmp)
    if not phases.empty:
        figs.append(plots.plot_compile_phases(phases))
    first = {"directory": "directory", "cdn": "cdn", "inline": True}[check_plotlyjs(plotlyjs)]
    divs = [f.to_html(full_html=False, include_plotlyjs=first if i == 0 else False, default_height="360px",
                      default_width="100%") for i, f in enumerate(figs)]
    return f'<div class="grid">{"".join(f"<div>{d}</div>" for d in divs)}</div>'


def _errors_html(cmp: Any) -> str:
    return "".join(f'<p class="warn">{html.escape(r.name)} round {r.round} (run {r.run_id}): {html.escape(r.status)}'
                   f' — {html.escape(r.error[:600])}</p>' for r in cmp.results if r.error)


def _diagnosis_section(cmp: Any) -> str:
    table = diagnostics_html(cmp.diagnostics())
    if not table:
        return ""
    return ("<h2>What the compiler did</h2><p>Graph breaks and recompilations (dynamo: where and why), CPU fallbacks "
            "and host transfers (XLA's metrics), with the README's checklist item for each.</p>" + table)


def _traces_html(cmp: Any) -> str:
    """Links to the compile-trace reports (tlparse) of the jobs that ran with debug=True, where they exist."""
    found = [(r, Path(str(r.artifacts)) / TRACE_REPORT_DIR / "index.html") for r in cmp.results if r.artifacts]
    links = [f'<li><a href="{html.escape(page.as_uri())}">{html.escape(r.name)} round {r.round} (run {r.run_id})</a>'
             f"</li>" for r, page in found if page.is_file()]
    return ("<h2>Compile traces</h2><p>tlparse's reports of the jobs run with debug=True: every graph, its guards "
            "and recompiles, and where the compile time went.</p><ul>" + "".join(links) + "</ul>") if links else ""


# -- the report's first screen: when, where, and the bottom line -------------------------------------------------
def ran_at(cmp: Any) -> str:
    """When the comparison started (``Comparison.created``, stored with it), in this machine's time zone."""
    created = getattr(cmp, "created", None)
    if created is None or is_missing(created):   # built by hand, never run here
        return "at a time this comparison does not store"
    return datetime.fromtimestamp(float(created)).astimezone().strftime("%Y-%m-%d %H:%M %Z")


def _when_html(cmp: Any) -> str:
    written = datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    return f'<p class="tcb-when">Ran {html.escape(ran_at(cmp))} · report written {html.escape(written)}</p>'


def _job_line(cmp: Any) -> str:
    s = cmp.spec
    return (f"<p class='env'>Comparison {cmp.comparison_id}: {html.escape(s.model)} ({html.escape(s.size)}), batch "
            f"{s.batch_size} × sequence {s.seq_len}, {s.steps} steps ({s.warmup_steps} warmup), "
            f"{html.escape(str(s.precision))}; jobs {html.escape(', '.join(cmp.backends))}; "
            f"{html.escape(cmp.rounds_note)}.</p>")


def bottom_lines_html(summary: pd.DataFrame) -> str:
    """Per compared job: its verdict once, as one bottom line (``format.bottom_line``), why it came out so
    (``format.verdict_reason``), its peak memory in the one convention, and the warnings not said already."""
    items = []
    for r in summary.to_dict("records"):
        if r.get("verdict_kind") == "baseline":
            continue
        warns = [] if is_missing(r.get("warnings")) else [str(w) for w in r["warnings"]]
        regression = any(w.startswith("memory regression:") for w in warns)
        notes = [verdict_reason(r), ("⚠ memory regression: " if regression else "") + memory_text(r)]
        warns = [w for w in warns if not w.startswith(("memory regression:", "slower:"))]
        kind = html.escape(str(r.get("verdict_kind") or "inconclusive").replace(" ", "-"))
        items.append(f'<li class="tcb-bottom-line tcb-line-{kind}"><b>{html.escape(bottom_line(r))}</b>'
                     f'{"".join(html_note(n) for n in notes if n)}'
                     + "".join(f'<br><span class="tcb-warning">⚠ {html.escape(w)}</span>' for w in warns) + "</li>")
    return f'<ul class="tcb-bottom">{"".join(items)}</ul>' if items else ""


# -- the long tables -------------------------------------------------------------------------------------------
def _spec_value(v: Any) -> str:
    if isinstance(v, bool):
        return fmt_yes_no(v)
    if isinstance(v, dict):
        v = ", ".join(f"{k}={x}" for k, x in v.items())
    elif isinstance(v, (list, tuple)):
        v = ", ".join(map(str, v))
    return html_text(v)


def spec_table_html(spec: Any) -> str:
    """The job spec as a table: one row per field (its name) and its value ("–" for none)."""
    rows = "".join(f'<tr><th scope="row">{html.escape(str(k))}</th><td>{_spec_value(v)}</td></tr>'
                   for k, v in spec.to_dict().items())
    return f'<table class="tcb-spec"><thead><tr><th>field</th><th>value</th></tr></thead><tbody>{rows}</tbody></table>'


_METHOD = """<p>Step time: median of the steady-state steps (the first {warmup} warmup steps are reported apart).
Speedup: native fast step ÷ compiled fast step, a job's fast step being the 10th percentile of its steady steps
(the steps a shared machine left alone), with a 95 % interval (a t-interval over the rounds' log ratios;
Stein's two-stage interval when rounds were added until a resolution; a round whose compiled job filled the empty
compile cache is left out once two others are complete);
"faster" or "slower" only when the interval excludes 1. Compile latency: warmup time − warmup steps × steady
median. Memory: peak above the post-load baseline (CPU: RSS high-water), written as the compiled peak ÷ the native
peak, "no measurable difference" when its interval contains 1. Break-even: the warmup compiling adds
(the compiled job's compile latency minus the native job's own warmup overhead) ÷ per-step gain, as a range from
the speedup's interval.</p>"""


def comparison_html(cmp: Any, profile: str | None = None, plotlyjs: str = "directory") -> str:
    """The HTML report of ``cmp``: when it ran and the stored environment, one bottom line per compiled job, the
    charts, then the summary table, what the compiler did, a cost section when a profile was chosen (``profile``,
    else the spec's unless it is this machine) and the job spec. ``plotlyjs``: one of ``PLOTLYJS`` ("directory":
    the page loads ``plotly.min.js`` beside it, see ``write_plotlyjs``; "cdn"; "inline": self-contained)."""
    check_plotlyjs(plotlyjs)
    summary = cmp.summary()
    s = cmp.spec
    return f"""<!doctype html><html><head><meta charset="utf-8">{GENERATOR_META}
<title>tcbench comparison {cmp.comparison_id}</title>
<style>{_PAGE_CSS}</style>{_STYLE}</head><body>
<h1>tcbench: {html.escape(s.model)} ({html.escape(s.size)}) — native vs compiled</h1>
{_when_html(cmp)}
<p class="env">Measured on: {html.escape(describe(cmp.environment()))}</p>
{_job_line(cmp)}
<h2>Bottom line</h2>{bottom_lines_html(summary)}{_errors_html(cmp)}
{_figures_html(cmp, plotlyjs)}
<h2>Summary</h2>{summary_table_html(summary, verdicts=False)}
{_METHOD.format(warmup=s.warmup_steps)}
{_diagnosis_section(cmp)}
{_traces_html(cmp)}
{costs_html(cmp, profile)}
<h2>Job spec</h2>{spec_table_html(s)}
</body></html>"""
