"""Live views: per-job progress bars and one plotly FigureWidget (four panels), fed by observer events.

Before the first run (or a comparison loaded from History) the figure is hidden and a short "what you
will see" text stands in its place: four empty panels with −1…1 axes teach nothing. The figure takes the
page's full width (plotly autosize inside a 100 % wide box). The memory axis is always linear, so bar
heights compare as the numbers do; the budget is a dashed line when it is near the bars and a note
under the panel when it is far above them (``tcbench.plots.BUDGET_FAR``, the report's rule).

One FigureWidget, not four: each FigureWidget ships plotly's ~5 MB widget bundle to the browser and
anywidget gives a model 2 s to start — on a busy 2-core machine four of them time out and then
ignore every update. The figure is born with one trace per panel for every backend (Voilà draws
only what a widget held when the page connected); a run shows the backends it uses
(``visible``) and updates points in place inside ``batch_update()`` — traces are never added or
deleted after display.
"""

from __future__ import annotations

import html
import math
import statistics
import threading
import time
from typing import Any

import ipywidgets as w
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tcbench import BACKENDS, NATIVE, plots

PANELS = ("throughput", "memory", "loss", "step_time")
_TITLES = ("Throughput (samples/s, higher is better)", "Peak memory (MiB)", "Training loss",
           "Step time (ms, log); shaded: warmup = compiling")
HEIGHT = 660
_BUDGET_COLOR = "#b00020"
INTRO_HTML = (
    "<div style='border:1px solid #ddd;border-radius:4px;padding:8px 14px;color:#333;font-size:13px'>"
    "<b>What you will see</b> once you press <b>Run paired</b> (or pick a comparison on the History tab):"
    "<ul style='margin:4px 0'>"
    "<li><b>Step time</b> of every step: the first steps of a compiled backend are slow (shaded) — that is "
    "compiling;</li>"
    "<li><b>Throughput</b> (samples/s) of eager and of each compiled backend, with the speedup over eager;</li>"
    "<li><b>Peak memory</b> of each job, on a linear axis;</li>"
    "<li><b>Training loss</b> curves of eager and of each compiled backend (they should fall together);</li>"
    "</ul>then the <b>verdict</b> in words — faster, slower or no measurable difference — with the speedup's "
    "95 % interval over the rounds.</div>")


def _color(backend: str) -> str:
    return plots.color(backend)  # one colour per backend everywhere (panel, report, notebooks)


def live_speedup_label(backend: str, value: float | None, rnd: int, rounds: int) -> str:
    """The throughput bar's text while jobs run: ``"1.95× (round 1 of 3)"`` (a live estimate, no interval yet)."""
    if backend == NATIVE:
        return "baseline"
    if value is None or not math.isfinite(value):
        return "—"
    return f"{value:.2f}× (round {rnd + 1}{f' of {rounds}' if rounds else ''})"   # rounds 0: adaptive


def _num(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _new_figure(shown: list[str]) -> go.FigureWidget:
    """The four panels with a trace per (panel, backend) for every backend, the unused ones hidden."""
    fig = make_subplots(rows=2, cols=2, subplot_titles=_TITLES, vertical_spacing=0.16, horizontal_spacing=0.1)
    for panel, (row, col) in zip(PANELS, ((1, 1), (1, 2), (2, 1), (2, 2))):
        for b in BACKENDS:
            common = dict(name=b, legendgroup=b, visible=b in shown, meta=panel)
            if panel in ("throughput", "memory"):
                fig.add_trace(go.Bar(x=[b], y=[0], text=[""], textposition="outside", cliponaxis=False,
                                     marker_color=_color(b), showlegend=False, **common), row=row, col=col)
            else:
                fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines+markers", line=dict(color=_color(b)),
                                         marker=dict(size=4), showlegend=panel == "loss", **common), row=row, col=col)
    # no width: plotly sizes the figure to its box, the page's full width (Voilà included)
    fig.update_layout(height=HEIGHT, autosize=True, template="plotly_white",
                      margin=dict(l=60, r=20, t=50, b=40), legend=dict(orientation="h", y=-0.08, x=0.5,
                                                                       xanchor="center"))
    fig.update_xaxes(title_text="step", row=2)
    fig.update_yaxes(type="log", row=2, col=2)  # the compile spike is 100× a steady step: log keeps both readable
    fig.update_yaxes(type="linear", rangemode="tozero", row=1, col=2)  # memory: heights compare as the numbers do
    widget = go.FigureWidget(fig)
    widget._config = {**widget._config, "responsive": True}  # follow the window when it is resized
    return widget


def budget_marks(budget_mb: float | None, tallest_mb: float) -> tuple[list[dict], list[dict]]:
    """(shapes, annotations) that show the memory budget on the linear memory axis: a dashed line when it is
    within ``BUDGET_FAR`` × the tallest bar, else a note under the panel (a line there would squash the bars)."""
    if not budget_mb:
        return [], []
    gib = budget_mb / 1024
    if tallest_mb > 0 and budget_mb <= plots.BUDGET_FAR * tallest_mb:
        return [dict(type="line", xref="x2 domain", x0=0, x1=1, yref="y2", y0=budget_mb, y1=budget_mb,
                     line=dict(color=_BUDGET_COLOR, dash="dash"),
                     label=dict(text=f"memory budget {gib:.1f} GiB", textposition="end", yanchor="top",
                                font=dict(color=_BUDGET_COLOR, size=11)))], []
    far = f" — off the chart ({budget_mb / tallest_mb:.0f}× the tallest bar)" if tallest_mb > 0 else ""
    return [], [dict(name="budget", text=f"memory budget {gib:.1f} GiB{far}", showarrow=False,
                     xref="x2 domain", x=0.5, xanchor="center", yref="y2 domain", y=0, yanchor="top", yshift=-22,
                     font=dict(color=_BUDGET_COLOR, size=11))]


class _Series:
    """Points of one backend gathered from step events (thread-safe append, copied on flush)."""

    def __init__(self) -> None:
        self.steps: list[int] = []
        self.step_ms: list[float] = []
        self.loss_steps: list[int] = []
        self.losses: list[float] = []
        self.steady_s: list[float] = []
        self.peak_mb = 0.0
        self.warmup_last: int | None = None
        self.batch = 0

    def add(self, rec: Any, batch_size: int) -> None:
        self.steps.append(rec.step)
        self.step_ms.append(rec.step_s * 1e3)
        if rec.loss is not None and math.isfinite(rec.loss):
            self.loss_steps.append(rec.step)
            self.losses.append(rec.loss)
        if rec.warmup:
            self.warmup_last = rec.step if self.warmup_last is None else max(self.warmup_last, rec.step)
        else:
            self.steady_s.append(rec.step_s)
        self.peak_mb = max(self.peak_mb, (rec.mem_bytes or 0) / 2**20)
        self.batch = batch_size

    @property
    def samples_s(self) -> float | None:
        return self.batch / statistics.median(self.steady_s) if self.steady_s else None


class LiveFigures:
    """Throughput, memory, loss and step-time panels for the backends of one comparison."""

    def __init__(self, backends: list[str]):
        self.backends = list(backends)
        self.figure = _new_figure(self.backends)
        self.figure.add_class("tcb-figure")
        self._index = {(t.meta, t.name): i for i, t in enumerate(self.figure.data)}
        self._lock = threading.Lock()
        # one flush at a time, snapshot to figure: a job thread's live flush that took its snapshot before the
        # finished comparison's and wrote the figure after it left empty bars on the screen (seen in Voilà, on a
        # busy machine: "Done", and no bar)
        self._flushing = threading.Lock()
        self._series: dict[str, _Series] = {}
        self._round: dict[str, int] = {}
        self._final: dict[str, str] = {}
        self.rounds = 1
        self._dirty = False
        self._last_flush = 0.0
        self.budget_mb: float | None = None
        self.intro = w.HTML(INTRO_HTML)
        self.intro.add_class("tcb-intro")
        # a column box stretches the figure to its width; hidden until there is something to draw
        self.container = w.VBox([self.figure], layout=w.Layout(width="100%", display="none"))
        self.container.add_class("tcb-figure-box")
        self._box = w.VBox([self.intro, self.container], layout=w.Layout(width="100%"))

    def box(self) -> w.Widget:
        return self._box

    @property
    def shown(self) -> bool:
        """True once a run started or a comparison was loaded: the figure replaces the "what you will see" text."""
        return self.container.layout.display != "none"

    def _show(self) -> None:
        self.container.layout.display = "flex"
        self.intro.layout.display = "none"

    def trace(self, panel: str, backend: str) -> Any:
        return self.figure.data[self._index[(panel, backend)]]

    # -- a new run -----------------------------------------------------------------------------
    def reset(self, backends: list[str], budget_mb: float | None = None, rounds: int = 1) -> None:
        """Empty the panels, show the figure and one trace (line or bar) per backend of the new run."""
        with self._lock:
            self.backends = [b for b in backends if (PANELS[0], b) in self._index]
            self._series = {b: _Series() for b in self.backends}
            self._round, self._final, self.rounds = {}, {}, rounds
            self.budget_mb = budget_mb
            self._dirty = False
        self._show()
        fig = self.figure
        shapes, notes = budget_marks(budget_mb, 0.0)
        with self._flushing, fig.batch_update():
            for t in fig.data:
                t.visible = t.name in self.backends
                if t.type == "bar":
                    t.y, t.text = [0], [""]
                else:
                    t.x, t.y = [None], [None]
            fig.layout.shapes = shapes
            fig.layout.annotations = self._titles() + notes

    def _titles(self) -> list:
        return [a for a in self.figure.layout.annotations if a.text in _TITLES]

    def set_budget(self, budget_mb: float | None) -> None:
        """Show (or remove) the memory budget of the running comparison (a line or a note, see ``budget_marks``)."""
        if budget_mb == self.budget_mb:
            return
        with self._lock:
            self.budget_mb = budget_mb
            self._dirty = True
        self.flush(force=True)

    # -- events (any thread) ----------------------------------------------------------------------
    def add_step(self, backend: str, record: Any, batch_size: int, rnd: int = 0) -> None:
        with self._lock:
            self._series.setdefault(backend, _Series()).add(record, batch_size)
            self._round[backend] = rnd
            self._dirty = True

    def set_result(self, backend: str, result: Any, batch_size: int) -> None:
        """A job of any round ended: its bars take that job's figures (a live estimate until the summary)."""
        with self._lock:
            s = self._series.setdefault(backend, _Series())
            s.batch = s.batch or batch_size
            if _num(result.samples_s):
                s.steady_s = [s.batch / result.samples_s]
            if result.peak_mem_bytes is not None:
                s.peak_mb = result.peak_mem_bytes / 2**20
            self._round[backend] = result.round
            self._dirty = True

    def flush(self, force: bool = False, min_interval: float = 0.3) -> None:
        """Push gathered points to the figure in one update (at most every ``min_interval`` seconds)."""
        with self._flushing:
            self._flush(force, min_interval)

    def _flush(self, force: bool, min_interval: float) -> None:
        now = time.monotonic()
        if not self._dirty or (not force and now - self._last_flush < min_interval):
            return
        with self._lock:
            self._dirty, self._last_flush = False, now
            snap = {b: (list(s.steps), list(s.step_ms), list(s.loss_steps), list(s.losses), s.samples_s,
                        s.peak_mb, s.warmup_last) for b, s in self._series.items() if (PANELS[0], b) in self._index}
            native = snap[NATIVE][4] if NATIVE in snap else None
            texts = {b: self._bar_text(b, v[4], native) for b, v in snap.items()}
            budget_mb = self.budget_mb
        shapes, notes = budget_marks(budget_mb, max((v[5] for v in snap.values()), default=0.0))
        warm = [v[6] for v in snap.values() if v[6] is not None]
        starts = [min(v[0]) for v in snap.values() if v[0]]
        if warm and starts:
            shapes.append(dict(type="rect", xref="x4", yref="y4 domain", x0=min(starts) - 0.5, x1=max(warm) + 0.5,
                               y0=0, y1=1, fillcolor="#ffcc80", opacity=0.3, line=dict(width=0), layer="below"))
        with self.figure.batch_update():
            for b, (steps, step_ms, loss_steps, losses, tp, peak, _) in snap.items():
                if steps:
                    t = self.trace("step_time", b)
                    t.x, t.y = steps, step_ms
                if loss_steps:
                    t = self.trace("loss", b)
                    t.x, t.y = loss_steps, losses
                t = self.trace("throughput", b)
                t.y, t.text = [tp or 0], [texts[b]]
                t = self.trace("memory", b)
                t.y, t.text = [peak], [f"{peak:.0f} MiB" if peak else ""]
            self.figure.layout.shapes = shapes
            self.figure.layout.annotations = self._titles() + notes

    def _bar_text(self, backend: str, tp: float | None, eager_tp: float | None) -> str:
        """The summary's interval once the comparison ended; until then the live ratio and its round."""
        if backend in self._final:
            return self._final[backend]
        if not tp:
            return ""
        sp = tp / eager_tp if eager_tp and backend != NATIVE else None
        return live_speedup_label(backend, sp, self._round.get(backend, 0), self.rounds)

    def load(self, cmp: Any, budget_gb: float | None = None) -> None:
        """Redraw from a finished (or stored) comparison: curves of round 0 from the shared
        ``tcbench.plots.collect_*`` DataFrames, bars from ``summary()`` with the speedup's interval
        (``tcbench.plots.speedup_text``: "0.87× (0.80–0.95)", "single round" when rounds == 1)."""
        summary = cmp.summary()
        self.reset(list(summary["backend"]), budget_mb=budget_gb * 1024 if budget_gb else None, rounds=cmp.rounds)
        losses, times = plots.collect_losses(cmp), plots.collect_step_times(cmp)
        first_run = times.groupby("backend", sort=False)["run_id"].first().to_dict() if len(times) else {}
        with self._lock:
            for backend, run_id in first_run.items():
                s = self._series.setdefault(backend, _Series())
                t = times[(times["backend"] == backend) & (times["run_id"] == run_id)].sort_values("step")
                lo = losses[(losses["backend"] == backend) & (losses["run_id"] == run_id)].sort_values("step")
                s.steps, s.step_ms = t["step"].astype(int).tolist(), t["step_ms"].astype(float).tolist()
                s.loss_steps, s.losses = lo["step"].astype(int).tolist(), lo["loss"].astype(float).tolist()
                warm = t.loc[t["warmup"].astype(bool), "step"]
                s.warmup_last = int(warm.max()) if len(warm) else None
            for i, row in enumerate(summary.to_dict("records")):
                s = self._series.setdefault(row["backend"], _Series())
                tp, mem = row.get("samples_s"), row.get("peak_mem_mb")
                s.batch, s.steady_s = (1, [1 / tp]) if _num(tp) else (0, [])
                s.peak_mb = float(mem) if _num(mem) else 0.0
                self._final[row["backend"]] = plots.speedup_text(row, first=i == 0)
            self._dirty = True
        self.flush(force=True)

    def traces(self) -> dict[str, list[str]]:
        """What is drawn, per panel: the visible backends with points, and the texts on the throughput bars."""
        out: dict[str, list[str]] = {p: [] for p in PANELS}
        for t in self.figure.data:
            if t.visible is not False and t.y is not None and any(v for v in t.y if v is not None):
                out[t.meta].append(t.name)
        out["throughput_text"] = [str(x) for t in self.figure.data if t.meta == "throughput" and t.visible is not False
                                  for x in (t.text or ()) if x]
        return out


class JobProgress:
    """One progress bar per job: step n/N, current loss, samples/s, then the job's status."""

    def __init__(self) -> None:
        self.box = w.VBox([])
        self.box.add_class("tcb-progress")
        self._rows: dict[str, tuple[w.IntProgress, w.HTML]] = {}
        self._adding = threading.Lock()   # a lock-step round's jobs start together, each from a thread of its own

    def clear(self) -> None:
        self._rows = {}
        self.box.children = ()

    def start(self, job: str, steps: int) -> None:
        bar = w.IntProgress(value=0, min=0, max=max(steps, 1), layout=w.Layout(width="260px"))
        bar.add_class("tcb-progress-bar")
        text = w.HTML(f"<code>{html.escape(job)}</code> starting…")
        text.add_class("tcb-progress-text")
        with self._adding:
            self._rows[job] = (bar, text)
            self.box.children = (*self.box.children, w.HBox([bar, text], layout=w.Layout(align_items="center")))

    def step(self, job: str, record: Any) -> None:
        if job not in self._rows:
            self.start(job, record.step + 1)
        bar, text = self._rows[job]
        bar.value = min(bar.value + 1, bar.max)  # one event per step, whatever the step numbering
        loss = "—" if record.loss is None else f"{record.loss:.4f}"
        phase = " (warmup)" if record.warmup else ""
        text.value = (f"<code>{html.escape(job)}</code> step {bar.value}/{bar.max}{phase} · loss {loss} · "
                      f"{record.samples_s:.1f} samples/s")

    def end(self, job: str, result: Any) -> None:
        if job not in self._rows:
            self.start(job, result.spec.steps)
        bar, text = self._rows[job]
        status = result.status
        bar.bar_style = {"ok": "success", "interrupted": "warning"}.get(status, "danger")
        if status == "ok":
            bar.value = bar.max
            tail = f"{result.samples_s:.1f} samples/s" if result.samples_s else ""
        else:
            reason = (result.error or "").strip().splitlines()
            tail = html.escape(reason[-1][:200]) if reason else ""
        text.value = f"<code>{html.escape(job)}</code> <b>{status}</b> {tail}"
