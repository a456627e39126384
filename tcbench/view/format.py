"""How tcbench writes a value for people: ratios, intervals, numbers, percents and missing values, as text or HTML.
``COLUMNS``: the one table of the columns the CLI and the HTML report show (name, label, unit, cells)."""

from __future__ import annotations

import html
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import pandas as pd

# the part the lower layers use lives in core; re-exported here, so every formatter has one home for the view
from tcbench.core.fmt import MISSING, fmt_between, fmt_ratio, is_missing, is_null  # noqa: F401
from tcbench.core.results import aa_label
from tcbench.core.spec import BACKENDS


def fmt_ratio_range(low: float | None, high: float | None, unit_after_high: bool = True) -> str:
    """Two ratios as a range: ``0.80–0.95×`` (``0.80–0.95`` with ``unit_after_high=False``)."""
    high_text = fmt_ratio(high)
    return f"{fmt_ratio(low).removesuffix('×')}–{high_text if unit_after_high else high_text.removesuffix('×')}"


def fmt_interval(point: Any, low: Any, high: Any, unit_after_high: bool = True) -> str:
    """A ratio with its 95 % interval for people: ``0.87× (0.80–0.95×)`` (``0.87× (0.80–0.95)`` with
    ``unit_after_high=False``, as on the bars and in the CLI); the point alone without an interval, "–" without a
    point."""
    if is_missing(point):
        return MISSING
    if is_missing(low) or is_missing(high):
        return fmt_ratio(float(point))
    return f"{fmt_ratio(float(point))} ({fmt_ratio_range(float(low), float(high), unit_after_high)})"


def speedup_text(row: Mapping[str, Any], first: bool = False) -> str:
    """``"0.87× (0.80–0.95)"`` (+ ``"single round"`` when rounds == 1); the status when the job failed."""
    if row.get("status") != "ok":
        return str(row.get("status"))
    if first:
        return "baseline"
    if is_missing(row.get("speedup")):
        return ""
    text = fmt_interval(row.get("speedup"), row.get("speedup_ci_low"), row.get("speedup_ci_high"), False)
    rounds = row.get("rounds")
    return text + ("<br>single round" if not is_missing(rounds) and int(rounds) == 1 else "")


# -- numbers, percents, words ----------------------------------------------------------------------------------
def fmt_number(value: Any, decimals: int | None = None) -> str:
    """A number for people: thousand separators from 100 up, 3 significant digits below (or ``decimals``
    fixed ones), never an exponent; "–" when missing, "never" for infinity."""
    if is_missing(value):
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    value = float(value)
    if math.isinf(value):
        return "never"
    if decimals is not None:
        return f"{value:,.{decimals}f}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if value == 0 or abs(value) >= 0.001:
        return f"{value:.3g}"
    return "< 0.001" if value > 0 else "> -0.001"


def fmt_percent(value: Any, share: bool = True) -> str:
    """A share for people, one decimal: 0.123 is ``12.3 %`` (``share=False``: a value already in percent)."""
    if is_missing(value):
        return MISSING
    return f"{float(value) * 100:.1f} %" if share else f"{value:.1f} %"


def fmt_usd(value: Any) -> str:
    """Dollars: cents from $1 up, 3 significant digits below (``$0.0123``)."""
    if is_missing(value):
        return MISSING
    return f"${value:,.2f}" if value >= 1 else f"${value:.3g}"


def fmt_break_even(steps: Any, low: Any = None, high: Any = None) -> str:
    """Break-even steps: the range ``low–high`` when both are known, else the point; "never" for infinity."""
    if is_missing(steps):
        return MISSING
    if is_missing(low) or is_missing(high):
        return fmt_number(steps, 0)
    return f"{fmt_number(low, 0)}–{fmt_number(high, 0)}"


# -- memory: one convention everywhere, the compiled peak as a multiple of the native peak -----------------------
def memory_compared(row: Mapping[str, Any]) -> tuple[float, float | None, float | None] | None:
    """(compiled ÷ native peak, low, high) from the summary's ``memory_ratio`` (native ÷ compiled) and its interval
    (``memory_ci_low``, ``memory_ci_high``); None without a ratio. The interval's ends swap when inverted."""
    ratio, low, high = row.get("memory_ratio"), row.get("memory_ci_low"), row.get("memory_ci_high")
    if is_missing(ratio) or float(ratio) <= 0:
        return None
    if is_missing(low) or is_missing(high) or float(low) <= 0 or float(high) <= 0:
        return 1 / float(ratio), None, None
    low, high = sorted((1 / float(high), 1 / float(low)))
    return 1 / float(ratio), low, high


def memory_text(row: Mapping[str, Any], short: bool = False) -> str:
    """The peak memory of a compared job in the one convention: ``compiled peak 2.62× the native peak (2.40–2.85)``,
    with ``: no measurable difference`` when the interval contains 1 (``short``, for a bar: ``2.62× the native peak``
    or ``no measurable difference``); "" without a ratio."""
    found = memory_compared(row)
    if found is None:
        return ""
    point, low, high = found
    same = low is not None and high is not None and low <= 1 <= high
    if short:
        return "no measurable difference" if same else f"{fmt_ratio(point)} the native peak"
    spread = f"{fmt_ratio_range(low, high, False)}" if low is not None else "no interval: fewer than 2 rounds"
    return f"compiled peak {fmt_ratio(point)} the native peak ({spread})" + (": no measurable difference" if same
                                                                           else "")


# -- the bottom line of a compared job ---------------------------------------------------------------------------
def _speed_phrase(row: Mapping[str, Any]) -> str:
    sp, low, high, kind = row.get("speedup"), row.get("speedup_ci_low"), row.get("speedup_ci_high"), row.get(
        "verdict_kind")
    if is_missing(sp):
        return "inconclusive, no speedup measured"
    spread = "" if is_missing(low) or is_missing(high) else f" ({fmt_ratio_range(float(low), float(high), False)})"
    rounds = row.get("rounds")
    spread += ", single round" if not is_missing(rounds) and int(rounds) == 1 else ""
    ratio = fmt_ratio(float(sp))
    return {"faster": f"{ratio} faster{spread}", "slower": f"slower, {ratio} the native speed{spread}",
            "no measurable difference": f"no measurable difference, {ratio}{spread}"}.get(
        str(kind), f"inconclusive, {ratio}{spread}")


def pays_off_text(row: Mapping[str, Any]) -> str:
    """When compiling pays for its compile time, from the summary's break-even figures: ``pays off after 120–340
    steps``, ``never pays off``, or why there is no break-even."""
    kind, point = row.get("verdict_kind"), row.get("break_even_steps")
    if kind == "slower":
        return "never pays off"
    if kind == "no measurable difference":
        return "no break-even: no measurable gain pays for the compile"
    if kind != "faster":
        return "no break-even until the speedup is known"
    if is_missing(point):
        return "break-even unknown: no compile latency was measured"
    high = row.get("break_even_high")
    if round(float(point)) == 0 and (is_missing(high) or round(float(high)) == 0):
        return "pays off from the first step: no longer a warmup than native's"
    return f"pays off after {fmt_break_even(point, row.get('break_even_low'), row.get('break_even_high'))} steps"


def bottom_line(row: Mapping[str, Any]) -> str:
    """One compared job's verdict in one line: ``compiling inductor: 1.07× faster (1.02–1.12), pays off after
    120–340 steps`` (or ``slower, 0.44× the native speed (…)``, ``no measurable difference, …``,
    ``inconclusive, …``); an A/A twin's: ``eager (A/A) against eager: …``."""

    label = str(row.get("backend"))
    twin_of = {aa_label(b): b for b in BACKENDS}.get(label)   # a label tcbench makes, looked up (never parsed)
    who = f"{label} against {twin_of}" if twin_of else f"compiling {label}"
    return f"{who}: {_speed_phrase(row)}, {pays_off_text(row)}"


def verdict_reason(row: Mapping[str, Any]) -> str:
    """The verdict sentence without what ``bottom_line`` already says (the kind, the interval, the break-even):
    why it came out so and what to do, e.g. ``the interval: it contains 1 and reaches past ±5% — …``; "" when
    nothing is left."""
    text, kind = str(row.get("verdict") or ""), str(row.get("verdict_kind"))
    text = text.removeprefix(f"{kind}: ")
    sp, low, high = row.get("speedup"), row.get("speedup_ci_low"), row.get("speedup_ci_high")
    if not (is_missing(sp) or is_missing(low) or is_missing(high)):
        ci = f"{fmt_ratio(float(sp))} (95 % interval {fmt_ratio(float(low))}–{fmt_ratio(float(high))})"
        text = text.replace(" (single round: no run-to-run spread)", "")
        text = text.replace(f". Measured {ci}", "").replace(ci, "the interval")
        text = text.replace(fmt_between(float(sp), float(low), float(high)), "the interval")
    text = re.sub(r"; (compiling (pays off after [\d,]+–[\d,]+ steps|never pays off here)|it pays off from the first "
                  r"step \(no longer a warmup than the baseline's\))$", "", text).strip()
    if text == "the interval":
        return ""
    if text.startswith("the interval (") and text.endswith(")"):
        return text.removeprefix("the interval (")[:-1]
    return text


def fmt_text(value: Any) -> str:
    """The value as it is; "–" when missing or empty."""
    return MISSING if is_missing(value) or value == "" else str(value)


def fmt_yes_no(value: Any) -> str:
    return MISSING if is_missing(value) else ("yes" if value else "no")


def fmt_time(value: Any) -> str:
    """A moment as ``month-day hour:minute``."""
    return MISSING if is_missing(value) else pd.Timestamp(value).strftime("%m-%d %H:%M")


# -- HTML (styled by the report's stylesheet, tcbench.view.report) ---------------------------------------------------
def html_text(value: Any) -> str:
    """``fmt_text`` escaped for HTML."""
    return html.escape(fmt_text(value))


def html_table(df: pd.DataFrame, digits: int = 3) -> str:
    """A plain DataFrame (a tuning or scaling table) as an HTML table: numbers to ``digits`` significant digits,
    missing values as "–", no index: how the panel shows the tables the API returns."""
    return df.to_html(index=False, float_format=lambda v: f"{v:.{digits}g}", na_rep=MISSING)


def html_note(text: Any) -> str:
    """A note in small print on the next line; "" without one."""
    return "" if is_missing(text) or not text else f'<br><span class="tcb-note">{html.escape(str(text))}</span>'


def html_kind(kind: Any) -> str:
    """A verdict kind as a coloured badge ("inconclusive" when missing)."""
    kind = str(kind) if not is_missing(kind) else "inconclusive"
    return f'<span class="tcb-kind tcb-kind-{html.escape(kind.replace(" ", "-"))}">{html.escape(kind)}</span>'


# -- cells: how a column of a row is written -------------------------------------------------------------------
Cell = Callable[[Mapping[str, Any], str], str]   # (row, the column's name) -> text


def value(fmt: Callable[[Any], str]) -> Cell:
    """The cell that writes the column's own value with ``fmt``."""
    return lambda row, name: fmt(row.get(name))


def fixed(spec: str) -> Cell:
    """The column's value through ``format(value, spec)`` (``",.1f"``, ``".1%"``); "–" when missing."""
    return value(lambda v: MISSING if is_missing(v) else format(v, spec))


def interval(low: str, high: str, unit_after_high: bool = True) -> Cell:
    """The column's ratio with its interval from the columns ``low`` and ``high`` (``fmt_interval``)."""
    return lambda row, name: fmt_interval(row.get(name), row.get(low), row.get(high), unit_after_high)


def _unless_baseline(cell: Cell) -> Cell:
    return lambda row, name: "baseline" if row.get("verdict_kind") == "baseline" else cell(row, name)


def _break_even(row: Mapping[str, Any], name: str) -> str:
    return fmt_break_even(row.get(name), row.get("break_even_low"), row.get("break_even_high"))


def _verdict_html(row: Mapping[str, Any], name: str) -> str:
    return html_kind(row.get(name)) + html_note(row.get("verdict"))


def _memory_html(row: Mapping[str, Any], name: str) -> str:
    found = memory_compared(row)
    if found is None:
        return MISSING
    same = found[1] is not None and found[1] <= 1 <= found[2]
    return fmt_interval(*found) + (html_note("no measurable difference") if same else "")


def compile_phases_text(row: Mapping[str, Any]) -> str:
    """``Dynamo 2.1 s (2.0–2.3) · AOTAutograd 1.3 s (1.3–1.4) · backend 0.0 s (0.0–0.0)``: the summary's compile
    phases, median and range over the rounds; "–" for a job that compiled nothing."""
    text = row.get("compile_phases")
    return MISSING if is_missing(text) or not text else str(text)


def _phases_html(row: Mapping[str, Any], name: str) -> str:
    return html.escape(compile_phases_text(row)) + html_note(row.get("compile_cache"))


def _memory_cli(row: Mapping[str, Any], name: str) -> str:
    """The compiled job's peak as a multiple of the native peak (the report's convention), "–" for the baseline."""
    found = memory_compared(row)
    return MISSING if found is None or row.get("verdict_kind") == "baseline" else fmt_ratio(found[0])


def _mfu_html(row: Mapping[str, Any], name: str) -> str:
    return fmt_percent(row.get(name)) if not is_missing(row.get(name)) else html_text(row.get("mfu_note"))


def _noise_html(row: Mapping[str, Any], name: str) -> str:
    return html_text(row.get("noise")) if row.get(name) is True else "none detected"


def _loss_parity_html(row: Mapping[str, Any], name: str) -> str:
    parity = row.get(name)
    word = "not judged" if is_missing(parity) else ("yes" if parity else "no")
    diff = "" if is_missing(row.get("loss_diff")) else f" (|Δ| {fmt_number(row['loss_diff'])})"
    return word + diff + html_note(row.get("loss_parity_note"))


def _warnings_html(row: Mapping[str, Any], name: str) -> str:
    items = row.get(name)
    items = [] if is_missing(items) else list(items)
    return "<br>".join(f"⚠ {html.escape(str(w))}" for w in items) or "none"


# -- the one column table ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Column:
    """A column of a summary, run or step row as people read it.

    The report's row is titled ``label (unit)``, the CLI's column ``short unit`` (``short``: a name that fits a
    120-column table, else the label). ``cli`` and ``report`` write its cells (None: that view leaves it out);
    ``shows``: the further columns the report's row shows; ``figure``: the ``JobFigures`` field it shows.
    """

    name: str
    label: str
    unit: str = ""
    short: str = ""
    cli: Cell | None = None
    report: Cell | None = None
    shows: tuple[str, ...] = ()
    figure: str = ""

    @property
    def heading(self) -> str:
        """The CLI's column heading: ``median step ms``."""
        return f"{self.short or self.label} {self.unit}".strip()

    @property
    def title(self) -> str:
        """The report's row title: ``median step (ms)``."""
        return f"{self.label} ({self.unit})" if self.unit else self.label

    @property
    def columns(self) -> tuple[str, ...]:
        """Every row column the report's row shows."""
        return (self.name, *self.shows)

    def cli_text(self, row: Mapping[str, Any]) -> str:
        return self.cli(row, self.name)

    def report_html(self, row: Mapping[str, Any]) -> str:
        return self.report(row, self.name)


_TEXT, _COUNT = value(fmt_text), fixed(".0f")
# the job and where it ran, then one step: CLI only (the report heads its columns with the job label)
_JOB = (
    Column("run_id", "run", cli=_COUNT), Column("comparison_id", "comparison", cli=_COUNT),
    Column("created", "created", cli=value(fmt_time)), Column("backend", "backend", cli=_TEXT),
    Column("model", "model", cli=_TEXT), Column("size", "size", cli=_TEXT),
    Column("batch_size", "batch", cli=_COUNT), Column("seq_len", "seq", cli=_COUNT),
    Column("host", "host", cli=_TEXT), Column("threads", "threads", cli=_COUNT), Column("torch", "torch", cli=_TEXT),
    Column("commit", "commit", cli=_TEXT), Column("load", "load", cli=_TEXT),
    Column("step", "step", cli=_COUNT), Column("warmup", "warmup", cli=value(fmt_yes_no)),
    Column("step_ms", "step", "ms", cli=fixed(",.1f")), Column("cpu_ms", "cpu", "ms", cli=fixed(",.1f")),
    Column("loss", "loss", cli=fixed(".4f")),
    Column("step_iqr_ms", "step IQR", "ms", short="IQR", cli=fixed(",.1f"), figure="step_iqr_s"),
)
# the summary's columns, in the report's order
_SUMMARY = (
    Column("status", "status", cli=_TEXT, report=value(html_text)),
    Column("rounds", "rounds", cli=_COUNT, report=value(fmt_number)),
    Column("verdict_kind", "verdict", report=_verdict_html, shows=("verdict",)),
    Column("speedup", "speedup (95 % interval)", short="speedup (95% CI)",
           cli=interval("speedup_ci_low", "speedup_ci_high", False),
           report=_unless_baseline(interval("speedup_ci_low", "speedup_ci_high")),
           shows=("speedup_ci_low", "speedup_ci_high")),
    Column("resolution", "resolved to ±", short="±", cli=fixed(".1%"), report=value(fmt_percent)),
    Column("median_step_ms", "median step", "ms", cli=fixed(",.1f"), report=value(fmt_number), figure="median_step_s"),
    Column("step_cv", "step CV", short="CV", cli=fixed(".1%"), report=value(fmt_percent), figure="step_cv"),
    Column("samples_s", "samples/s", cli=fixed(",.1f"), report=value(fmt_number), figure="samples_s"),
    Column("tokens_s", "tokens/s", cli=fixed(",.0f"), report=value(fmt_number), figure="tokens_s"),
    Column("compile_latency_s", "compile latency", "s", short="compile", cli=fixed(",.1f"),
           report=value(lambda v: fmt_number(v, 1)), figure="compile_latency_s"),
    Column("cache", "compile cache", short="cache", cli=_TEXT, report=value(html_text)),
    Column("compile_dynamo_s", "compile latency in phases, and each phase's cache", short="phases",
           cli=lambda row, name: compile_phases_text(row), report=_phases_html,
           shows=("compile_aot_s", "compile_backend_s", "compile_phases", "compile_cache"), figure="compile_dynamo_s"),
    Column("extra_warmup_s", "warmup added by compiling", "s", report=value(lambda v: fmt_number(v, 1))),
    Column("break_even_steps", "break-even steps", short="break-even", cli=_break_even, report=_break_even,
           shows=("break_even_low", "break_even_high")),
    Column("peak_mem_mb", "peak memory", "MiB", short="peak", cli=fixed(",.0f"), report=value(fmt_number),
           figure="peak_mem_bytes"),
    Column("memory_ratio", "peak memory, compiled ÷ native (95 % interval)", short="peak ÷ native",
           cli=_memory_cli,
           report=_unless_baseline(_memory_html),
           shows=("memory_ci_low", "memory_ci_high")),
    Column("mfu", "MFU", cli=fixed(".3f"), report=_mfu_html, shows=("mfu_note",), figure="mfu"),
    Column("noisy", "noise", short="noisy", cli=value(fmt_yes_no), report=_noise_html, shows=("noise",),
           figure="noisy"),
    Column("final_loss", "final loss", cli=fixed(".4f"), report=value(fmt_number), figure="final_loss"),
    Column("loss_parity", "loss parity", report=_loss_parity_html, shows=("loss_diff", "loss_parity_note")),
    Column("recompiles", "recompilations after warmup", report=value(fmt_number),
           figure="recompiles_after_warmup"),
    Column("graph_breaks", "graph breaks", report=value(fmt_number), figure="graph_breaks"),
    Column("diagnosis", "what the compiler did", report=value(html_text)),
    Column("warnings", "warnings", report=_warnings_html),
    Column("error", "error", report=value(html_text)),
)
COLUMNS: tuple[Column, ...] = _JOB + _SUMMARY
CLI_COLUMNS = {c.name: c for c in COLUMNS if c.cli is not None}
REPORT_COLUMNS = tuple(c for c in COLUMNS if c.report is not None)
