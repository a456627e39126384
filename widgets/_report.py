"""The comparison in words: summary table, warnings a student understands, break-even, failures."""

from __future__ import annotations

import html
import math
from typing import Any

import pandas as pd

_TABLE_COLUMNS = [
    ("backend", "backend", None), ("status", "status", None), ("median_step_ms", "median step (ms)", "{:.1f}"),
    ("samples_s", "samples/s", "{:.1f}"), ("tokens_s", "tokens/s", "{:.0f}"), ("speedup", "speedup", "{:.2f}×"),
    ("compile_latency_s", "compile latency (s)", "{:.1f}"), ("peak_mem_mb", "peak memory (MB)", "{:.0f}"),
    ("memory_ratio", "memory ratio", "{:.2f}"), ("break_even_steps", "break-even (steps)", "{:.0f}"),
    ("mfu", "MFU", "{:.1%}"), ("loss_parity", "loss parity", None),
]
_CSS = ("<style>.tcb-table{border-collapse:collapse;font-size:12px}.tcb-table th,.tcb-table td{border:1px solid #ddd;"
        "padding:3px 8px;text-align:right}.tcb-table th{background:#f3f3f3}.tcb-table td:first-child,"
        ".tcb-table td:nth-child(2){text-align:left}</style>")


def _missing(value: Any) -> bool:
    if value is None:
        return True
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def _cell(value: Any, fmt: str | None) -> str:
    if _missing(value):
        return "—"
    if isinstance(value, float) and math.isinf(value):
        return "never"
    if fmt and isinstance(value, (int, float)) and not isinstance(value, bool):
        return fmt.format(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return html.escape(str(value))


def summary_table_html(summary: pd.DataFrame) -> str:
    """The engine's ``summary()`` as a compact HTML table (warnings and verdict go below it)."""
    cols = [c for c in _TABLE_COLUMNS if c[0] in summary.columns]
    head = "".join(f"<th>{html.escape(label)}</th>" for _, label, _ in cols)
    body = "".join("<tr>" + "".join(f"<td>{_cell(row.get(key), fmt)}</td>" for key, _, fmt in cols) + "</tr>"
                   for row in summary.to_dict("records"))
    return f"{_CSS}<table class='tcb-table tcb-summary-table'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def break_even_text(backend: str, value: Any) -> str:
    """``"compiling with inductor pays off after 120 steps"`` (or why it never does)."""
    if _missing(value):
        return f"{backend}: break-even unknown (the job did not finish)"
    if isinstance(value, str):
        if value.strip().lower() == "never":
            return f"compiling with {backend} never pays off here: its step is not faster than eager"
        return f"compiling with {backend} pays off after {value} steps"
    if math.isinf(value):
        return f"compiling with {backend} never pays off here: its step is not faster than eager"
    return f"compiling with {backend} pays off after {value:,.0f} steps"


def words_html(summary: pd.DataFrame) -> str:
    """One plain sentence per compiled backend (verdict and break-even), then the warnings."""
    lines, warns = [], []
    for row in summary.to_dict("records"):
        b = str(row.get("backend"))
        for text in row.get("warnings") or []:
            warns.append(f"<li class='tcb-warning'>⚠ <b>{html.escape(b)}</b>: {html.escape(str(text))}</li>")
        if b == "eager":
            continue
        verdict = str(row.get("verdict") or "")
        if row.get("status") == "ok" and "pay" not in verdict:
            verdict = f"{verdict}; {break_even_text(b, row.get('break_even_steps'))}" if verdict else \
                break_even_text(b, row.get("break_even_steps"))
        if verdict:
            lines.append(f"<li class='tcb-verdict'><b>{html.escape(b)}</b>: {html.escape(verdict)}</li>")
    parts = []
    if lines:
        parts.append(f"<ul style='margin:4px 0'>{''.join(lines)}</ul>")
    if warns:
        parts.append(f"<div><b>Warnings</b><ul style='margin:4px 0;color:#8a4b00'>{''.join(warns)}</ul></div>")
    return "".join(parts)


def failures_html(results: list[Any]) -> str:
    """One clear line per job that did not end ``ok``, with its reason."""
    lines = []
    for r in results:
        if r.status == "ok":
            continue
        reason = (r.error or "").strip().splitlines()
        why = reason[-1] if reason else {"interrupted": "stopped by the Stop button"}.get(r.status, "no reason recorded")
        lines.append(f"<li class='tcb-failure'><b>{html.escape(r.spec.backend)}</b> ended <b>{html.escape(r.status)}</b>: "
                     f"{html.escape(why[:400])}</li>")
    if not lines:
        return ""
    return f"<div style='color:#b00020'><ul style='margin:4px 0'>{''.join(lines)}</ul></div>"
