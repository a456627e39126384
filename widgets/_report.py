"""The comparison in words: per compiled job its verdict (a coloured badge of ``verdict_kind`` and the
engine's ``verdict`` sentence, interval and break-even included), the noise floor beside it, failures,
and what the compiler did (graph breaks, recompiles, fallbacks, host transfers).

The table and the verdict badges are tcbench's own (``tc.report``), so the panel and the HTML report
show one thing one way.
"""

from __future__ import annotations

import html
import time
from typing import Any

import pandas as pd

import tcbench as tc

NOT_MEASURED = "noise floor not measured"


def words_html(summary: pd.DataFrame) -> str:
    """The verdict of every compared job (the native baseline row is the table's, not a finding)."""
    compared = summary[summary["verdict_kind"] != "baseline"]
    return tc.report.findings_html(compared) if len(compared) else ""


def _ago(seconds: float) -> str:
    if seconds < 60:
        return "just now"
    if seconds < 120 * 60:
        return f"{seconds / 60:.0f} min ago"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.0f} h ago"
    return f"{seconds / 86400:.0f} days ago"


def noise_floor_text(info: tc.StoredNoiseFloor | None, now: float | None = None) -> str:
    """``"this machine resolves ≥ 1.06× now (A/A, measured 12 min ago)"`` from a stored noise floor
    (``tc.latest_noise_floor``, or ``tc.StoredNoiseFloor.from_summary`` of one just measured); ``NOT_MEASURED`` for
    None."""
    if info is None:
        return NOT_MEASURED
    when = "" if info.created is None else f", measured {_ago((now or time.time()) - float(info.created))}"
    resolvable = info.resolvable
    if resolvable is None or pd.isna(resolvable):
        return f"noise floor unknown (A/A{when}): {info.verdict or 'no complete pair'}"
    text = f"this machine resolves ≥ {float(resolvable):.2f}× now (A/A{when})"
    kind = info.verdict_kind
    if kind and kind != "no measurable difference":
        text += f"; the A/A run itself came out {kind}: {info.verdict}"
    return text


def failures_html(results: list[Any]) -> str:
    """One clear line per job that did not end ``ok``, with its reason."""
    lines = []
    for r in results:
        if r.status == "ok":
            continue
        reason = (r.error or "").strip().splitlines()
        default = "stopped by the Stop button" if r.status == "interrupted" else "no reason recorded"
        why = reason[-1] if reason else default
        lines.append(f"<li class='tcb-failure'><b>{html.escape(r.name)}</b> round {r.round + 1} ended "
                     f"<b>{html.escape(r.status)}</b>: {html.escape(why[:400])}</li>")
    if not lines:
        return ""
    return f"<div style='color:#b00020'><ul style='margin:4px 0'>{''.join(lines)}</ul></div>"


def diagnostics_html(cmp: Any) -> str:
    """Under the summary: every graph break, recompile, CPU fallback and host transfer the compiled jobs reported,
    with where, why and what to do (tcbench's own table); "" when there was none."""
    table = tc.report.diagnostics_html(cmp.diagnostics())
    return f"<h4 style='margin:10px 0 4px'>What the compiler did</h4>{table}" if table else ""
