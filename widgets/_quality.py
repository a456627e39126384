"""The "Time to quality" tab: does a candidate (compiled, at a bigger batch with its learning rate) reach the held-out
target loss sooner than the native job, over several seeds?

"Run" calls ``tc.time_to_quality`` in a background thread with the Run tab's job: the native reference's seeds
first (the target comes from them unless one is given), then each candidate's (by default tcbench's: compiled at the
same batch, at a bigger batch with the predicted learning rate, …; ``tab.candidates`` sets your own list of
``tc.Candidate``). The progress bar counts the study's jobs; each finished job's held-out loss joins the curves
figure. When the study ends: the curves (each seed faint, the median over seeds bold, the target dashed), bars of
time and cost to the target with their intervals, and the table with the target's origin, what the dollars mean, the
learning rate's premise check and the study's notes. Stop ends the running job; what finished is kept and shown.
"""

from __future__ import annotations

import html
import math
import statistics
import threading
import time
from typing import Any, Iterable

import ipywidgets as w
import pandas as pd
import plotly.colors
import plotly.graph_objects as go
from plotly.subplots import make_subplots

import tcbench as tc

from ._background import Background

COLORS = plotly.colors.qualitative.Plotly
_ERROR = "<span style='color:#b00020'>{}</span>"


def _number(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def _fmt(value: Any, fmt: str = "{:.3g}") -> str:
    x = _number(value)
    return "–" if x is None else fmt.format(x)


def with_interval(point: Any, low: Any, high: Any, fmt: str = "{:.3g}") -> str:
    """"12.3 [10.1–14.5]"; the bracket only where both ends are known; "–" without a point."""
    if _number(point) is None:
        return "–"
    if _number(low) is None or _number(high) is None:
        return _fmt(point, fmt)
    return f"{_fmt(point, fmt)} [{_fmt(low, fmt)}–{_fmt(high, fmt)}]"


def median_curve(curves: Iterable[Iterable[Any]]) -> tuple[list[float], list[float]]:
    """The median over seeds of held-out loss (y) against wall seconds (x), at each count of samples that at least
    half the seeds evaluated (every candidate evaluates after the same samples, so the seeds line up)."""
    curves = [list(c) for c in curves]
    by_samples: dict[int, list[Any]] = {}
    for curve in curves:
        for p in curve:
            if _number(p.loss) is not None and _number(p.wall_s) is not None:
                by_samples.setdefault(p.samples, []).append(p)
    xs, ys = [], []
    for samples in sorted(by_samples):
        points = by_samples[samples]
        if 2 * len(points) >= len(curves):
            xs.append(statistics.median(p.wall_s for p in points))
            ys.append(statistics.median(p.loss for p in points))
    return xs, ys


def _curves_figure() -> go.FigureWidget:
    return go.FigureWidget(layout=dict(
        template="plotly_white", height=380, margin=dict(l=60, r=20, t=50, b=40),
        title="Held-out loss against wall time (each seed faint, the median over seeds bold)",
        xaxis_title="wall time from the first step (s, compile included, evaluations left out)",
        yaxis_title="held-out loss", legend=dict(orientation="h", y=-0.2)))


def _bars_figure() -> go.FigureWidget:
    """Two bar traces, updated, never re-added: time to target (left) and cost to target (right)."""
    fig = go.FigureWidget(make_subplots(rows=1, cols=2, horizontal_spacing=0.12,
                                        subplot_titles=("time to target (s)", "cost to target ($)")))
    fig.add_bar(x=[], y=[], name="time to target", marker_color="#1f77b4", row=1, col=1)
    fig.add_bar(x=[], y=[], name="cost to target", marker_color="#2ca02c", row=1, col=2)
    fig.update_layout(template="plotly_white", height=340, margin=dict(l=60, r=20, t=60, b=40), showlegend=False,
                      title="To the target (olympic mean over seeds; whiskers: its interval)")
    return fig


class QualityTab:
    """Time to quality over the Run tab's job (``controls.spec``); ``result`` is the last ``tc.QualityResult``,
    ``candidates`` the candidates to run (None: tcbench's defaults)."""

    def __init__(self, controls: Any):
        self.controls = controls
        self.result: Any = None
        self.candidates: list[Any] | None = None
        self._bg = Background()
        self._curves: dict[str, dict[int, list[Any]]] = {}   # label -> seed -> its held-out curve, as jobs end
        self._labels: list[str] = []
        self._target: float | None = None
        self._done = 0
        controls.on_owner(lambda: self._sync_buttons())
        narrow = dict(style={"description_width": "initial"}, layout=w.Layout(width="170px"))
        self.seeds = w.BoundedIntText(value=5, min=3, max=50, description="Seeds", **narrow,
                                      tooltip="runs per candidate; MLPerf's olympic mean needs 3 at least")
        self.target = w.Text(value="", placeholder="from the reference", description="Target loss",
                             style={"description_width": "initial"}, layout=w.Layout(width="230px"))
        self.budget = w.BoundedFloatText(value=3.0, min=1.0, max=100.0, step=0.5, description="Budget ×", **narrow,
                                         tooltip="each run's samples, in reference runs: past it, 'did not converge'")
        self.big_batch = w.Text(value="", placeholder="largest that fits", description="Big batch",
                                style={"description_width": "initial"}, layout=w.Layout(width="220px"))
        self.retune = w.Checkbox(value=False, description="retune lr at the big batch", indent=False,
                                 layout=w.Layout(width="auto"))
        self.horizon = w.Text(value="", placeholder="not projected", description="Horizon (steps)",
                              style={"description_width": "initial"}, layout=w.Layout(width="250px"),
                              tooltip="the reference steps you train for: each candidate's time projected there")
        for name in ("seeds", "target", "budget", "big_batch", "retune", "horizon"):
            getattr(self, name).add_class(f"tcb-quality-{name.replace('_', '-')}")
        self.run_button = w.Button(description="Run", icon="play", button_style="primary")
        self.run_button.add_class("tcb-quality-run")
        self.stop_button = w.Button(description="Stop", icon="stop", button_style="danger", disabled=True)
        self.stop_button.add_class("tcb-quality-stop")
        self.run_button.on_click(lambda _b: self.run())
        self.stop_button.on_click(lambda _b: self.stop())
        self.progress = w.IntProgress(value=0, min=0, max=1, description="Jobs", bar_style="info")
        self.progress.add_class("tcb-quality-progress")
        self.progress_text = w.Label("")
        self.progress_text.add_class("tcb-quality-progress-text")
        self.status = w.HTML("<p>Runs the Run tab's job natively and each candidate over several seeds until the "
                             "held-out loss reaches the target. Target loss blank: the reference's; big batch "
                             "blank: the largest that fits the Run tab's profile.</p>")
        self.status.add_class("tcb-quality-status")
        self.curves_fig, self.bars_fig = _curves_figure(), _bars_figure()
        self.horizon_fig = go.FigureWidget(layout=dict(template="plotly_white", height=380))
        self.summary = w.HTML("")
        self.summary.add_class("tcb-quality-summary")
        curves_box, bars_box = w.Box([self.curves_fig]), w.Box([self.bars_fig])
        curves_box.add_class("tcb-quality-curves")
        bars_box.add_class("tcb-quality-bars")
        # time to target against the horizon: shown once a study with a horizon has ended
        self.horizon_box = w.Box([self.horizon_fig], layout=w.Layout(display="none"))
        self.horizon_box.add_class("tcb-quality-horizon-chart")
        self.box = w.VBox([w.HBox([self.seeds, self.target, self.budget, self.big_batch, self.horizon, self.retune],
                                  layout=w.Layout(flex_flow="row wrap")),
                           w.HBox([self.run_button, self.stop_button, self.progress, self.progress_text]),
                           self.status, curves_box, bars_box, self.horizon_box, self.summary])
        self.box.add_class("tcb-quality")

    # -- state -----------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._bg.busy

    def _sync_buttons(self) -> None:
        """Run off while this tab works or another tab holds the panel."""
        self.run_button.disabled = self._bg.busy or self.controls.owner is not None
        self.stop_button.disabled = not self._bg.busy

    def options(self) -> tuple[dict[str, Any], str]:
        """``tc.QualityOptions``' fields from the inputs, and "" (or what is wrong with an input, in words)."""
        wanted: dict[str, Any] = dict(seeds=int(self.seeds.value), budget=float(self.budget.value),
                                      retune=bool(self.retune.value))
        text = self.target.value.strip()
        try:
            wanted["target_loss"] = float(text) if text else None
        except ValueError:
            return {}, f"Target loss {text!r} is not a number: leave it blank to take the reference's."
        text = self.big_batch.value.strip()
        if text and not (text.isdigit() and int(text) > 0):
            return {}, f"Big batch {text!r} is not a whole number above 0: leave it blank for the largest that fits."
        wanted["big_batch"] = int(text) if text else None
        text = self.horizon.value.strip().replace(",", "").replace("_", "")
        if text and not (text.isdigit() and int(text) > 0):
            return {}, (f"Horizon {self.horizon.value.strip()!r} is not a whole number of steps above 0: leave it "
                        "blank for no projection.")
        wanted["horizon_steps"] = int(text) if text else None
        return wanted, ""

    # -- actions ---------------------------------------------------------------------------------
    def run(self) -> threading.Thread | None:
        """Start ``tc.time_to_quality`` on the Run tab's job in the background (what the Run button does)."""
        spec = self.controls.spec
        if spec is None:
            self.status.value = _ERROR.format(f"Fix the Run tab first: {html.escape(self.controls.error)}")
            return None
        if self._bg.busy:
            return None
        kwargs, problem = self.options()
        if problem:
            self.status.value = _ERROR.format(html.escape(problem))
            return None
        candidates = None if self.candidates is None else list(self.candidates)

        def claim() -> bool:
            if self.controls.claim("time-to-quality study"):
                self.status.value = _ERROR.format(html.escape(self.controls.busy_text()))
                return False
            self._sync_buttons()
            return True

        def work(stop: threading.Event) -> str:
            started = time.monotonic()
            try:
                result = tc.time_to_quality(spec, candidates, **kwargs, observer=self._observe, stop=stop)
            except tc.SpecError as exc:   # refused before (or instead of) the jobs: the settings to change
                return _ERROR.format(f"Check the settings: {html.escape(str(exc))}")
            except Exception as exc:  # noqa: BLE001 - an engine error is a message, the panel stays usable
                return _ERROR.format(f"The study failed: {html.escape(type(exc).__name__)}: {html.escape(str(exc))}")
            self.result = result
            try:
                self.show(result)
            except Exception as exc:  # noqa: BLE001
                return _ERROR.format(f"Could not draw the result: {html.escape(type(exc).__name__)}: "
                                     f"{html.escape(str(exc))}")
            took = time.monotonic() - started
            how = "Stopped" if stop.is_set() else "Done"
            return f"<span class='tcb-done'>{how} after {took:.0f} s: {len(result.runs)} runs.</span>"

        def finish(ending: str | None) -> None:
            self._sync_buttons()
            self.controls.release()
            if ending:
                self.status.value = ending

        self._reset(kwargs["seeds"], 1 + len(candidates) if candidates is not None else None,
                    kwargs.get("target_loss"))
        which = "your candidates" if candidates is not None else "the default candidates"
        self.status.value = html.escape(f"Running the native reference's {kwargs['seeds']} seeds, then {which} …")
        return self._bg.start("time to quality", work, finish=finish, claim=claim)

    def stop(self) -> bool:
        """Ask the study to stop: the running job ends; the finished runs are kept and shown."""
        if not self._bg.stop():
            return False
        self.status.value = "Stopping… (the running job is being ended; finished runs are kept)"
        return True

    def wait(self, timeout: float | None = None) -> Any:
        """Block until the study ends; returns ``result``."""
        self._bg.wait(timeout)
        return self.result

    # -- progress (on the background thread) ---------------------------------------------------------
    def _reset(self, seeds: int, candidates: int | None, target: float | None) -> None:
        self.result, self._curves, self._labels, self._done, self._target = None, {}, [], 0, target
        self._seeds, self._planned = seeds, candidates
        self.summary.value = ""
        self._progress()
        self.draw_curves({}, target)
        self.draw_bars(pd.DataFrame())

    def _progress(self) -> None:
        n = self._planned or max(2, len(self._labels))   # the default candidates are known as they start
        total = n * self._seeds
        self.progress.max = max(total, self._done, 1)
        self.progress.value = self._done
        more = "" if self._planned else " so far"
        self.progress_text.value = f"{self._done} of {total} jobs{more} ({n} candidates × {self._seeds} seeds)"

    @staticmethod
    def _label(event: Any) -> str:
        """The candidate a job event is of: its label, else (a label that is only the backend's name) its job's name
        without the "#round" the runner may add."""
        if event.label and event.label != event.backend:
            return event.label
        head, _, tail = (event.job or "").rpartition("#")
        return (head if tail.isdigit() else event.job) or event.label or event.backend

    def _observe(self, event: Any) -> None:
        """time_to_quality's observer (``tc.events``); a drawing error never stops the study."""
        try:
            if isinstance(event, tc.events.JobStarted):
                label = self._label(event)
                if label not in self._labels:
                    self._labels.append(label)
                self.status.value = html.escape(f"{label}, seed {event.spec.seed}: starting …")
                self._progress()
            elif isinstance(event, tc.events.PhaseChanged):
                self.status.value = html.escape(f"{self._label(event)}: {event.phase} …")
            elif isinstance(event, tc.events.JobEnded):
                self._ended(event)
        except Exception:  # noqa: BLE001
            pass

    def _ended(self, event: Any) -> None:
        """One of the study's jobs ended: count it and draw its held-out curve (jobs before the study's, such as
        the batch probes, evaluate nothing during training and are not counted)."""
        res, label = event.result, self._label(event)
        if not getattr(res.spec, "eval_every", 0):
            return
        self._done += 1
        if label not in self._labels:
            self._labels.append(label)
        self._progress()
        curve = list(getattr(res.extra, "eval_curve", None) or ())
        self._curves.setdefault(label, {})[res.spec.seed] = curve
        error = f": {res.error.strip().splitlines()[-1][:300]}" if res.status != "ok" and res.error.strip() else ""
        self.status.value = html.escape(f"{label}, seed {res.spec.seed}: {res.status}{error}")
        self.draw_curves(self._curves, self._target)

    # -- the result ----------------------------------------------------------------------------------
    def show(self, result: Any) -> None:
        """The curves, the bars and the table of a ``tc.QualityResult``."""
        curves: dict[str, dict[int, list[Any]]] = {c.label: {} for c in result.candidates}
        for r in result.runs:
            # no curve kept with the run: what its job sent while it ran
            points = getattr(r, "curve", None) or self._curves.get(r.label, {}).get(r.seed, ())
            curves.setdefault(r.label, {})[r.seed] = list(points)
        self._done, self._planned = max(self._done, len(result.runs)), len(result.candidates)
        self._progress()
        self.draw_curves(curves, _number(result.target), result.target_source)
        table = result.table()
        self.draw_bars(table)
        self.draw_horizon(result)
        self.summary.value = summary_html(result, table)

    def draw_horizon(self, result: Any) -> None:
        """The study's time to target against the horizon (``QualityResult.plot_horizon``: a line and band per
        candidate, the break-evens, the horizon) when it was run with one and has a target; hidden otherwise."""
        shown = bool(getattr(result, "horizon_steps", None)) and _number(result.target) is not None
        self.horizon_box.layout.display = "" if shown else "none"
        with self.horizon_fig.batch_update():
            self.horizon_fig.data = ()
            if shown:
                fig = result.plot_horizon()
                self.horizon_fig.layout = fig.layout
                self.horizon_fig.add_traces(fig.data)

    def draw_curves(self, curves: dict[str, dict[int, list[Any]]], target: float | None, source: str = "") -> None:
        """Per candidate (one colour each): a faint line per seed, the median over seeds bold; the target dashed."""
        traces = []
        for i, (label, seeds) in enumerate(curves.items()):
            color = COLORS[i % len(COLORS)]
            for seed, curve in sorted(seeds.items()):
                traces.append(go.Scatter(x=[p.wall_s for p in curve], y=[p.loss for p in curve], mode="lines",
                                         name=f"{label} seed {seed}", legendgroup=label, showlegend=False,
                                         opacity=0.3, line=dict(color=color, width=1),
                                         hovertemplate=f"{html.escape(label)} seed {seed}: %{{y:.4g}} at %{{x:.3g}} s"
                                                       "<extra></extra>"))
            xs, ys = median_curve(seeds.values())
            if xs:
                traces.append(go.Scatter(x=xs, y=ys, mode="lines+markers", name=label, legendgroup=label,
                                         line=dict(color=color, width=3), marker=dict(size=5)))
        with self.curves_fig.batch_update():
            self.curves_fig.data = ()
            line = [] if target is None else [dict(type="line", xref="paper", x0=0, x1=1, y0=target, y1=target,
                                                   line=dict(dash="dash", color="black", width=1.5))]
            self.curves_fig.layout.shapes = line
            self.curves_fig.layout.annotations = [] if target is None else [dict(
                xref="paper", x=1, y=target, text=f"target {target:.4g}", showarrow=False, xanchor="right",
                yanchor="bottom", hovertext=source or None)]
        if traces:
            self.curves_fig.add_traces(traces)

    def draw_bars(self, table: pd.DataFrame) -> None:
        """Time (and cost) to the target per candidate with its interval as whiskers; a candidate that could not
        be scored is an empty bar with its note as text."""
        rows = table.to_dict("records") if len(table) else []
        time_bar = _bar(rows, "time_to_target_s", "time_low", "time_high", "{:.3g} s")
        has_cost = any(_number(r.get("usd_to_target")) is not None for r in rows)
        cost_bar = _bar(rows, "usd_to_target", "usd_low", "usd_high", "${:.3g}") if has_cost else _bar([], "", "", "")
        with self.bars_fig.batch_update():
            for trace, (xs, ys, texts, plus, minus) in zip(self.bars_fig.data, (time_bar, cost_bar)):
                trace.x, trace.y, trace.text = xs, ys, texts
                trace.textposition = ["inside" if y else "outside" for y in ys]   # whiskers clear of the values
                trace.error_y = dict(type="data", array=plus, arrayminus=minus, visible=any(plus) or any(minus))
            self.bars_fig.layout.annotations = [a for a in self.bars_fig.layout.annotations
                                                if a.text in ("time to target (s)", "cost to target ($)")]
            self.bars_fig.layout.xaxis2.visible = self.bars_fig.layout.yaxis2.visible = has_cost
            if rows and not has_cost:
                self.bars_fig.add_annotation(text="no price for this profile", showarrow=False,
                                             xref="x2 domain", yref="y2 domain", x=0.5, y=0.5)


def _bar(rows: list[dict], value: str, low: str, high: str, fmt: str = "{:.3g}") -> tuple[list, ...]:
    """x (candidates), y (0 where unscored), texts (the value, or the note), whiskers up and down."""
    xs, ys, texts, plus, minus = [], [], [], [], []
    for r in rows:
        v, lo, hi = _number(r.get(value)), _number(r.get(low)), _number(r.get(high))
        xs.append(str(r.get("candidate")))
        ys.append(v if v is not None else 0.0)
        note = r.get("note")
        texts.append(fmt.format(v) if v is not None else html.escape(str(note) if note and note == note
                                                                       else "not scored"))
        plus.append(hi - v if v is not None and hi is not None and hi >= v else 0.0)
        minus.append(v - lo if v is not None and lo is not None and lo <= v else 0.0)
    return xs, ys, texts, plus, minus


def table_frame(table: pd.DataFrame) -> pd.DataFrame:
    """``QualityResult.table()`` for people: values with their intervals in brackets, a cost column only where the
    result has one."""
    cost = "usd_to_target" in table.columns and table["usd_to_target"].map(_number).notna().any()
    rows = []
    for r in table.to_dict("records"):
        g = r.get
        row = {"candidate": g("candidate"), "backend": g("backend"), "batch": g("batch_size"),
               "lr": _fmt(g("lr")), "time to target (s)": with_interval(g("time_to_target_s"), g("time_low"),
                                                                       g("time_high"))}
        if cost:
            row["cost to target ($)"] = with_interval(g("usd_to_target"), g("usd_low"), g("usd_high"), "{:.3g}")
        row.update({"samples to target": _fmt(g("samples_to_target"), "{:,.0f}"),
                    "speedup ×": with_interval(g("speedup"), g("speedup_low"), g("speedup_high")),
                    "samples ratio ×": with_interval(g("samples_ratio"), g("samples_ratio_low"),
                                                     g("samples_ratio_high")),
                    "runs": g("runs"), "not converged": g("not_converged"),
                    "note": "" if g("note") is None or g("note") != g("note") else g("note")})
        rows.append(row)
    return pd.DataFrame(rows)


def summary_html(result: Any, table: pd.DataFrame) -> str:
    """The table, the target and where it came from, what the dollars mean, the premise check and the notes."""
    target = _number(result.target)
    parts = []
    if target is not None and getattr(result, "horizon_steps", None):   # the user's horizon leads
        parts.append("<p class='tcb-quality-horizon'><b>At the length you train for</b> (projected from these runs: "
                     "compile, throughput, samples ratio):<br>"
                     + "<br>".join(html.escape(t) for t in result.projection_sentences()) + "</p>")
    parts.append(f"<p><b>Target:</b> held-out loss {_fmt(target, '{:.4g}')} — {html.escape(result.target_source)}</p>"
                 if target is not None else f"<p><b>No target:</b> {html.escape(result.target_source or 'none')}</p>")
    parts.append(tc.html_table(table_frame(table)))
    parts.append("<p style='font-size:12px'>speedup × and samples ratio ×: the reference's time (samples) ÷ the "
                 "candidate's over the seeds both reached the target, above 1 sooner; [low–high] its interval.</p>")
    basis = getattr(result, "price_basis", None)
    if basis:
        parts.append(f"<p><b>Cost:</b> {html.escape(str(basis))}</p>")
    premise = getattr(result, "premise", None)
    if premise is None:
        parts.append("<p class='tcb-quality-premise'><b>Learning-rate premise:</b> not checked</p>")
    else:
        held = getattr(premise, "held", None)
        word = {True: "held", False: "did not hold", None: "undecided"}.get(held, "undecided")
        parts.append(f"<p class='tcb-quality-premise'><b>Learning-rate premise ({word}):</b> "
                     f"{html.escape(str(getattr(premise, 'verdict', premise)))}</p>")
    notes = list(getattr(result, "notes", None) or ())
    if notes:
        parts.append("<ul>" + "".join(f"<li>{html.escape(str(n))}</li>" for n in notes) + "</ul>")
    return "".join(parts)
