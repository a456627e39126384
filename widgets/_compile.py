"""The "Compile search" tab: which compiled configuration of the Run tab's job is fastest while keeping loss parity.

"Search" calls ``tc.tune_compile`` in a background thread with the Run tab's job: an Optuna study over Inductor's
mode, the compile scope, whether ``optimizer.step`` is compiled, the precision and ``cpp_wrapper``; a configuration
that breaks loss parity with the native job is rejected, and the fastest one left is confirmed against the default
compiled configuration and native in alternating rounds. An unticked field is searched only at the Run tab's value.
Each finished trial is a line of the message while the search runs; then the answer in one sentence, why the search
ended, the trials' table and a figure of each configuration's median step. "Use this configuration" copies the
answer into the Run tab's compiler settings (and precision) and ticks inductor there.
"""

from __future__ import annotations

import dataclasses
import html
import math
import threading
import time
from typing import Any

import ipywidgets as w
import pandas as pd
import plotly.graph_objects as go

import tcbench as tc

from ._background import Background

FIELDS = tuple(f.name for f in dataclasses.fields(tc.CompileConfig))   # what tune_compile searches
FIELD_LABELS = {"compile_mode": "mode", "compile_scope": "scope (model / blocks)",
                "compile_optimizer": "compile optimizer.step", "precision": "precision", "cpp_wrapper": "cpp_wrapper"}
TABLE_COLUMNS = ["number", "label", "state", "median_step_ms", "step_iqr_ms", "compile_s", "parity", "reason"]
# the figure's traces, in order: outcome -> colour
OUTCOMES = {"kept parity": "#1f77b4", "rejected": "#9467bd", "pruned": "#ff7f0e", "failed": "#d62728"}
_ERROR = "<p style='color:#b00020'>{}</p>"


def outcome(state: Any, parity: Any) -> str:
    """A trial's outcome in the figure's words: kept parity, rejected (loss parity failed), pruned or failed."""
    if state == "COMPLETE":
        return "rejected" if parity is False else "kept parity"
    return "pruned" if state == "PRUNED" else "failed"


def _number(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def _figure() -> go.FigureWidget:
    """One horizontal bar trace per outcome (updated, never re-added); the native median is a vertical line."""
    fig = go.FigureWidget(layout=dict(template="plotly_white", height=320, margin=dict(l=20, r=20, t=50, b=40),
                                      title="Median step per configuration (whiskers: ± half the steps' IQR)",
                                      xaxis_title="median step (ms)", yaxis=dict(automargin=True, type="category"),
                                      barmode="overlay", legend=dict(orientation="h", y=-0.2)))
    for name, color in OUTCOMES.items():
        fig.add_bar(x=[], y=[], orientation="h", name=name, marker_color=color)
    return fig


def native_median_ms(result: Any) -> float | None:
    """The native job's median step (ms) from the confirmation's rounds; None without a confirmation."""
    cmp = getattr(result, "confirmation", None)
    if cmp is None or not getattr(cmp, "backends", None):
        return None
    try:
        return _number(cmp.row(cmp.backends[0]).median_step_ms)
    except Exception:  # noqa: BLE001 - a confirmation that cannot be summed is simply not drawn
        return None


class CompileTab:
    """Compile search over the Run tab's job (``controls.spec``); ``result`` is the last ``tc.CompileSearch``."""

    def __init__(self, controls: Any):
        self.controls = controls
        self.result: Any = None
        self._bg = Background()
        self._lines: list[str] = []
        self._running: str | None = None     # what runs now (a trial, a confirmation round), None between trials
        self._doing, self._confirming = "", False
        controls.on_owner(lambda: self._sync_buttons())
        self.budget = w.FloatText(value=600.0, description="Budget s", layout=w.Layout(width="180px"),
                                  tooltip="the whole search's wall-clock budget, the confirmation's third included")
        self.trials = w.BoundedIntText(value=0, min=0, max=1000, description="Trials", layout=w.Layout(width="160px"),
                                       tooltip="0: as many configurations as the budget allows")
        self.fields = {name: w.Checkbox(value=True, description=FIELD_LABELS.get(name, name), indent=False,
                                        layout=w.Layout(width="auto")) for name in FIELDS}
        for name, cb in self.fields.items():
            cb.add_class(f"tcb-compile-field-{name.replace('_', '-')}")
        self.keep_study = w.Checkbox(value=False, description="keep the study in the store (optuna-dashboard)",
                                     indent=False, layout=w.Layout(width="auto"))
        self.keep_study.add_class("tcb-compile-keep-study")
        self.search_button = w.Button(description="Search", icon="search", button_style="primary")
        self.search_button.add_class("tcb-compile-search")
        self.stop_button = w.Button(description="Stop", icon="stop", button_style="danger", disabled=True)
        self.stop_button.add_class("tcb-compile-stop")
        self.use_button = w.Button(description="Use this configuration", icon="check", disabled=True,
                                   layout=w.Layout(width="auto"))
        self.use_button.add_class("tcb-use-compile")
        self.message = w.HTML("<p>Searches the compiled configuration of the Run tab's job; an unticked field stays "
                              "at the Run tab's value. Trials 0: the budget decides.</p>")
        self.message.add_class("tcb-compile-message")
        self.table = w.HTML("")
        self.table.add_class("tcb-compile-table")
        self.fig = _figure()
        self.search_button.on_click(lambda _b: self.search())
        self.stop_button.on_click(lambda _b: self.stop())
        self.use_button.on_click(lambda _b: self.use_config())
        self.box = w.VBox([w.HBox([self.budget, self.trials, self.search_button, self.stop_button, self.use_button]),
                           w.HBox([w.Label("Search:"), *self.fields.values()], layout=w.Layout(flex_flow="row wrap")),
                           self.keep_study, self.message, self.table, self.fig])
        self.box.add_class("tcb-compile")

    # -- state -----------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._bg.busy

    def _sync_buttons(self) -> None:
        """Search off while this tab works or another tab holds the panel; Use only with an answer."""
        busy = self._bg.busy or self.controls.owner is not None
        self.search_button.disabled = busy
        self.stop_button.disabled = not self._bg.busy
        self.use_button.disabled = busy or self.result is None or self.result.best is None

    # -- actions ---------------------------------------------------------------------------------
    def arguments(self, spec: Any) -> dict[str, Any]:
        """``tc.tune_compile``'s keyword arguments from the tab's controls (the observer and stop event aside)."""
        space = {name: [getattr(spec, name)] for name, cb in self.fields.items() if not cb.value}
        storage = "store" if self.keep_study.value else None   # a new study each time: the panel never resumes one
        name = f"panel-compile-{spec.model}-{time.strftime('%Y%m%d-%H%M%S')}" if storage else None
        return dict(budget_s=float(self.budget.value), n_trials=int(self.trials.value) or None, space=space or None,
                    storage=storage, study_name=name)

    def search(self) -> threading.Thread | None:
        """Start ``tc.tune_compile`` on the Run tab's job in the background (what the Search button does)."""
        spec = self.controls.spec
        if spec is None:
            self.message.value = _ERROR.format(f"Fix the Run tab first: {html.escape(self.controls.error)}")
            return None
        if self._bg.busy:
            return None
        kwargs = self.arguments(spec)

        def claim() -> bool:
            if self.controls.claim("compile search"):
                self.message.value = _ERROR.format(html.escape(self.controls.busy_text()))
                return False
            self._sync_buttons()
            return True

        def work(stop: threading.Event) -> None:
            try:
                result = tc.tune_compile(spec, **kwargs, observer=self._observe, stop=stop)
                self.result = result
                self.show(result)
            except Exception as exc:  # bad input or an engine error: shown, the panel stays usable
                self.message.value = _ERROR.format(f"{html.escape(type(exc).__name__)}: {html.escape(str(exc))}")

        def finish(_result: None) -> None:
            self._sync_buttons()
            self.controls.release()

        self._lines, self._running, self._confirming = [], None, False
        self.message.value = "<p>Running the native reference job (its losses are what every configuration must " \
                             "match) …</p>"
        return self._bg.start("compile search", work, finish=finish, claim=claim)

    def stop(self) -> bool:
        """Ask the search to stop: the running trial ends and does not count; what finished is shown."""
        return self._bg.stop()

    def wait(self, timeout: float | None = None) -> Any:
        """Block until the search ends; returns ``result``."""
        self._bg.wait(timeout)
        return self.result

    def use_config(self) -> None:
        """Copy the best configuration into the Run tab (compiler settings, precision) and tick inductor there."""
        best = None if self.result is None else self.result.best
        if best is None:
            return
        backends = (*self.controls.selected_backends(), "inductor")
        self.controls.set(backends=backends, **dataclasses.asdict(best))
        self.message.value = f"<p>Run tab set to {html.escape(best.label())} (inductor ticked).</p>"

    # -- progress (on the background thread) ---------------------------------------------------------
    def _observe(self, event: Any) -> None:
        """tune_compile's observer (``tc.events``): a line per finished trial, then what runs now; a drawing error
        never stops the search."""
        try:
            if isinstance(event, tc.events.CompileTrialStarted):
                self._running, self._doing = f"Trial {event.number} · {event.label}", "running"
            elif isinstance(event, tc.events.CompileTrialEnded):
                self._lines.append(f"Trial {event.number} · {event.label}: {event.status}")
                self._running = None
            elif isinstance(event, tc.events.JobStarted) and (self._confirming or self._lines and
                                                              self._running is None):
                self._confirming = True   # a job after the search's last trial: the confirmation's rounds
                self._running, self._doing = (f"Confirming the fastest against the default and native: round "
                                              f"{event.round + 1}, {event.label}"), "running"
            elif isinstance(event, tc.events.PhaseChanged) and self._running is not None:
                self._doing = event.phase
            else:
                return
            lines = self._lines[-30:] + ([f"{self._running}: {self._doing} …"] if self._running else [])
            self.message.value = "<p>" + "<br>".join(html.escape(x) for x in lines) + "</p>"
        except Exception:  # noqa: BLE001
            pass

    # -- the result ----------------------------------------------------------------------------------
    def show(self, result: Any) -> None:
        """The answer, why the search ended, its notes, the trials' table and the figure."""
        notes = "".join(f"<li>{html.escape(str(n))}</li>" for n in result.notes)
        kept = (f"<p>Study <b>{html.escape(result.study_name)}</b> is kept in {html.escape(result.storage)}: "
                f"<code>tcbench dashboard --storage '{html.escape(result.storage)}'</code></p>"
                if result.storage else "")
        self.message.value = (f"<p><b>{html.escape(result.answer())}</b></p>"
                              f"<p>The search ended: {html.escape(result.stop_reason or 'nothing left to try')}.</p>"
                              + (f"<ul>{notes}</ul>" if notes else "") + kept)
        table = result.table()
        shown = table[[c for c in TABLE_COLUMNS if c in table.columns]].copy()   # each configuration once
        shown["parity"] = shown["parity"].map(lambda v: "–" if v is None or v != v else v)
        self.table.value = tc.html_table(shown)
        self.draw(table, native_median_ms(result))

    def draw(self, table: pd.DataFrame, native_ms: float | None) -> None:
        """Each configuration measured (``CompileSearch.table()``: each once) as a bar of its median step, by
        outcome."""
        groups: dict[str, tuple[list, list, list, list]] = {k: ([], [], [], []) for k in OUTCOMES}
        for row in table.itertuples(index=False):
            key = outcome(row.state, None if pd.isna(row.parity) else bool(row.parity))
            med, iqr = _number(row.median_step_ms), _number(row.step_iqr_ms)
            xs, ys, errs, texts = groups[key]
            xs.append(med if med is not None else 0.0)
            ys.append(html.escape(f"#{row.number} {row.label}"))   # plotly reads tags in its texts
            errs.append(iqr / 2 if iqr is not None and med is not None else 0.0)
            texts.append("" if med is not None else key)
        with self.fig.batch_update():
            for trace, key in zip(self.fig.data, OUTCOMES):
                xs, ys, errs, texts = groups[key]
                trace.x, trace.y, trace.text = xs, ys, texts
                trace.error_x = dict(type="data", array=errs, visible=any(errs))
            self.fig.layout.shapes = [] if native_ms is None else [dict(
                type="line", x0=native_ms, x1=native_ms, y0=0, y1=1, yref="paper",
                line=dict(dash="dash", color="grey"))]
            self.fig.layout.annotations = [] if native_ms is None else [dict(
                x=native_ms, y=1, yref="paper", text=f"native {native_ms:.3g} ms", showarrow=False, yanchor="bottom")]
            self.fig.layout.height = max(320, 90 + 28 * len(table))
