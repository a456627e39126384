"""The "Data parallel" tab: scaling measured on this machine, projected per instance profile, and the learning rate
for the global batch — each part a call of tcbench's public API on the Run tab's job (``controls.spec``).

- **Measured scaling**: ``tc.scaling`` runs the job at 1, 2, … processes (``batch_size`` per process, so the global
  batch grows with them) in alternating rounds, in a background thread with a Stop button; its progress rows, then
  the table (with the global batch), the verdicts in words and the scaling factor with its interval.
- **Projection** (an estimate, not a measurement): ``tc.project_scaling`` for the chosen instance profiles and node
  counts, from a ring all-reduce model; instant (no job), so it runs on the spot.
- **Learning rate for the global batch**: ``tc.predict_lr(spec, nproc=N)`` predicts the lr for
  ``batch_size × N`` from the job's lr at its global batch (measuring the gradient noise scale when none is stored).

Every error — a bad field here, a job that cannot run on this machine (preflight), an engine error — is one readable
line, never a traceback.
"""

from __future__ import annotations

import html
import re
import threading
from typing import Any, Callable

import ipywidgets as w
import pandas as pd
import plotly.graph_objects as go

import tcbench as tc
from tcbench.parallel.projection import DEFAULT_PROFILES

from ._background import Background
from ._controls import profile_label
from ._live import JobProgress

MAX_NPROC = 64   # JobSpec.nproc's upper bound
EFA_CHOICES = (("follow each profile", "profile"), ("both: with and without EFA", "both"))
PROJECTION_COLUMNS = ("profile", "efa", "nodes", "devices", "global_batch", "allreduce_ms", "compute_ms", "step_ms",
                      "samples_s", "scaling_factor", "link")
_ERROR_STYLE = "color:#b00020"
_HINT_STYLE = "color:#555;font-size:12px"
_PHASES = {"loading": "loading…", "compiling": "compiling…", "warmup": "warming up…", "measuring": "measuring…",
           "eval": "evaluating…"}


def _html(css_class: str, value: str = "") -> w.HTML:
    out = w.HTML(value)
    out.add_class(css_class)
    return out


def _error(text: str) -> str:
    """One readable line in red (a multi-line message folded into one)."""
    return f"<span class='tcb-parallel-error' style='{_ERROR_STYLE}'>{html.escape(' '.join(text.split()))}</span>"


def _failure(what: str, exc: BaseException) -> str:
    return _error(f"The {what} failed: {type(exc).__name__}: {exc}")


def _column(name: Any) -> str:
    """A column's name in words: "global batch", "samples/s", "step ms"."""
    text = str(name)
    return text[:-2] + "/s" if text.endswith(("samples_s", "tokens_s")) else text.replace("_", " ")


def _table_html(df: pd.DataFrame) -> str:
    """A DataFrame as a scrollable HTML table, its column names in words (``_column``)."""
    shown = df.rename(columns=_column)
    return ("<div style='overflow:auto;max-height:420px'>"
            + tc.html_table(shown) + "</div>")


def parse_counts(field: str, text: str, high: int | None = None, at_least: int = 1,
                 example: str = "1,2") -> tuple[int, ...]:
    """Whole numbers from 1 (to ``high``) separated by commas or spaces, all different, at least ``at_least`` of
    them, in the order given; otherwise a ValueError naming the field, the value and what is allowed."""
    parts = [p for p in re.split(r"[,;\s]+", str(text).strip()) if p]
    values = tuple(int(p) for p in parts if re.fullmatch(r"\d+", p))
    if (len(values) != len(parts) or len(values) < at_least or len(set(values)) != len(values)
            or any(v < 1 or (high is not None and v > high) for v in values)):
        span = f"from 1 to {high}" if high is not None else ">= 1"
        many = "two or more" if at_least == 2 else "one or more" if at_least <= 1 else f"{at_least} or more"
        raise ValueError(f"{field}={text!r} is not allowed; use {many} different whole numbers {span}, "
                         f"separated by commas, e.g. {example}")
    return values


def projection_profiles() -> list[tuple[str, str]]:
    """(label, name) of every catalog profile but this machine (whose link must be measured: tc.calibrate_link)."""
    return [(profile_label(n), n) for n in tc.profiles()["name"] if n != "this-machine"]


def _figure(fig: Any, css_class: str) -> go.FigureWidget:
    out = go.FigureWidget(fig)
    out.add_class(css_class)
    return out


class ParallelTab:
    """Measured scaling, projected scaling and the global batch's learning rate for the Run tab's job."""

    def __init__(self, controls: Any):
        self.controls = controls
        self.scaling: Any = None          # the last tc.ScalingResult
        self.projection: Any = None       # the last tc.ScalingProjection (all its columns: .table)
        self.prediction: Any = None       # the last LrPrediction for a number of processes
        self._bg = Background()
        self._rounds = 1
        self._round: dict[str, int] = {}
        self._make_measured()
        self._make_projection()
        self._make_lr()
        controls.on_owner(lambda: self._sync_buttons())
        # where the running work's job events go: its section's progress rows and status line
        self._progress, self._out = self.progress, self.status
        self.box = w.VBox([self.measured_box, self.projection_box, self.lr_box])
        self.box.add_class("tcb-parallel")
        self._sync_buttons()

    # -- widgets -----------------------------------------------------------------------------------
    def _make_measured(self) -> None:
        self.nprocs = w.Text(value="1,2", description="Processes", continuous_update=False,
                             tooltip="process counts to measure, e.g. 1,2 (the first is the baseline); each runs the "
                                     "Run tab's batch per process, so the global batch grows with them",
                             layout=w.Layout(width="220px"))
        self.nprocs.add_class("tcb-parallel-nprocs")
        self.rounds = w.BoundedIntText(value=3, min=1, max=20, description="Rounds", layout=w.Layout(width="150px"))
        self.rounds.add_class("tcb-parallel-rounds")
        self.backend = w.Dropdown(options=list(tc.BACKENDS), value="eager", description="Backend",
                                  layout=w.Layout(width="200px"))
        self.backend.add_class("tcb-parallel-backend")
        self.measure_button = w.Button(description="Measure scaling", icon="play", button_style="primary")
        self.measure_button.add_class("tcb-measure-scaling")
        self.stop_button = w.Button(description="Stop", icon="stop", button_style="danger", disabled=True)
        self.stop_button.add_class("tcb-parallel-stop")
        self.measure_button.on_click(lambda _b: self.measure())
        self.stop_button.on_click(lambda _b: self.stop())
        self.status = _html("tcb-parallel-status")
        self.progress = JobProgress()
        self.progress.box.add_class("tcb-parallel-progress")
        self.scaling_table, self.scaling_text = _html("tcb-scaling-table"), _html("tcb-scaling-text")
        self.scaling_plot = w.Box([])
        self.scaling_plot.add_class("tcb-scaling-plot")
        self.measured_box = w.VBox([
            w.HTML("<h4 style='margin:6px 0 2px'>Measured scaling on this machine</h4>"
                   f"<span style='{_HINT_STYLE}'>the Run tab's job at each process count, its batch per process "
                   "(global batch = batch × processes); scaling factor = throughput of n ÷ (n × throughput of the "
                   "first), with its 95 % interval over the rounds</span>"),
            w.HBox([self.nprocs, self.rounds, self.backend, self.measure_button, self.stop_button]),
            self.status, self.progress.box, self.scaling_text, self.scaling_table, self.scaling_plot])

    def _make_projection(self) -> None:
        options = projection_profiles()
        names = [n for _, n in options]
        self.profiles = w.SelectMultiple(options=options, value=[n for n in DEFAULT_PROFILES if n in names], rows=6,
                                         description="Profiles", layout=w.Layout(width="520px"))
        self.profiles.add_class("tcb-projection-profiles")
        self.nodes = w.Text(value="1,2,4,8", description="Nodes", continuous_update=False,
                            tooltip="instances, e.g. 1,2,4,8 (with 1: also 1, 2, 4 … devices of one instance)",
                            layout=w.Layout(width="220px"))
        self.nodes.add_class("tcb-projection-nodes")
        self.efa = w.Dropdown(options=EFA_CHOICES, value="profile", description="EFA",
                              layout=w.Layout(width="300px"))
        self.efa.add_class("tcb-projection-efa")
        self.project_button = w.Button(description="Project", icon="calculator")
        self.project_button.add_class("tcb-project-scaling")
        self.project_button.on_click(lambda _b: self.project())
        self.projection_message = _html("tcb-projection-message")
        self.projection_table, self.projection_text = _html("tcb-projection-table"), _html("tcb-projection-text")
        self.projection_plot = w.Box([])
        self.projection_plot.add_class("tcb-projection-plot")
        self.projection_box = w.VBox([
            w.HTML("<h4 style='margin:12px 0 2px'>Projected scaling per instance profile — an estimate, "
                   "not a measurement</h4>"
                   f"<span style='{_HINT_STYLE}'>a ring all-reduce model of the Run tab's model (its parameters, "
                   "batch per device, sequence length and precision); the assumptions are written under the table"
                   "</span>"),
            w.HBox([self.profiles, w.VBox([self.nodes, self.efa, self.project_button])]),
            self.projection_message, self.projection_table, self.projection_text, self.projection_plot])

    def _make_lr(self) -> None:
        self.lr_nproc = w.BoundedIntText(value=2, min=1, max=MAX_NPROC, description="Processes",
                                         layout=w.Layout(width="170px"))
        self.lr_nproc.add_class("tcb-parallel-lr-nproc")
        self.lr_button = w.Button(description="Predict LR for 2 processes", icon="line-chart",
                                  layout=w.Layout(width="auto"))
        self.lr_button.add_class("tcb-parallel-predict-lr")
        self.lr_nproc.observe(lambda ch: setattr(self.lr_button, "description",
                                                 f"Predict LR for {ch['new']} processes"), names="value")
        self.lr_button.on_click(lambda _b: self.run_predict())
        self.lr_stop_button = w.Button(description="Stop", icon="stop", button_style="danger", disabled=True)
        self.lr_stop_button.add_class("tcb-parallel-lr-stop")
        self.lr_stop_button.on_click(lambda _b: self.stop())
        self.lr_batches, self.lr_message = _html("tcb-parallel-lr-batches"), _html("tcb-parallel-lr-message")
        self.lr_table, self.lr_advice = _html("tcb-parallel-lr-table"), _html("tcb-parallel-lr-advice")
        self.lr_progress = JobProgress()
        self.lr_progress.box.add_class("tcb-parallel-lr-progress")
        self.lr_box = w.VBox([
            w.HTML("<h4 style='margin:12px 0 2px'>Learning rate for the global batch</h4>"
                   f"<span style='{_HINT_STYLE}'>N processes of the Run tab's batch train with a global batch N × "
                   "larger: the lr predicted for it from the gradient noise scale (measured once per job, then "
                   "reused), beside the linear and square-root rules</span>"),
            w.HBox([self.lr_nproc, self.lr_button, self.lr_stop_button]), self.lr_batches, self.lr_message,
            self.lr_progress.box, self.lr_table, self.lr_advice])

    # -- state -------------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._bg.busy

    def _sync_buttons(self) -> None:
        """Start buttons off while this tab measures or another tab holds the panel."""
        self.measure_button.disabled = self.lr_button.disabled = self._bg.busy or self.controls.owner is not None
        self.stop_button.disabled = self.lr_stop_button.disabled = not self._bg.busy

    def _start(self, what: str, out: w.HTML, progress: JobProgress,
               job: Callable[[Any], None]) -> threading.Thread | None:
        """Run ``job(spec)`` on a background thread, its job events shown in ``progress`` and ``out``; an error
        becomes one line in ``out``."""
        spec = self.controls.spec
        if spec is None:
            out.value = _error(f"Fix the Run tab first: {self.controls.error}")
            return None
        if self._bg.busy:
            out.value = _error("Another measurement of this tab is running: wait for it or press Stop.")
            return None

        def claim() -> bool:
            if self.controls.claim(what):
                out.value = _error(self.controls.busy_text())
                return False
            self._progress, self._out, self._round = progress, out, {}
            progress.clear()
            self._sync_buttons()
            return True

        def work(_stop: threading.Event) -> None:
            try:
                job(spec)
            except Exception as exc:  # noqa: BLE001 - bad input, preflight or an engine error: a line, not a traceback
                out.value = _failure(what, exc)

        return self._bg.start(what, work, finish=lambda _: self.controls.release(), claim=claim)   # syncs every tab

    def stop(self) -> None:
        """Stop the running measurement; what was measured is kept and shown."""
        if self._bg.stop():
            self._out.value = "Stopping… (the running job is being ended; its measured steps are kept)"

    def wait(self, timeout: float | None = None) -> None:
        """Block until the running measurement ends."""
        self._bg.wait(timeout)

    # -- measured scaling --------------------------------------------------------------------------
    def measure(self) -> threading.Thread | None:
        """Check the process counts, then run ``tc.scaling`` on the Run tab's job in the background."""
        try:
            counts = parse_counts("processes", self.nprocs.value, MAX_NPROC, at_least=2)
        except ValueError as exc:
            self.status.value = _error(str(exc))
            return None
        rounds, backend = int(self.rounds.value), self.backend.value
        return self._start("scaling measurement", self.status, self.progress,
                           lambda spec: self._measure(spec, counts, rounds, backend))

    def _measure(self, spec: Any, counts: tuple[int, ...], rounds: int, backend: str) -> None:
        spec = spec.replace(backend=backend) if spec.backend != backend else spec
        self.scaling_table.value = self.scaling_text.value = ""
        self._rounds = rounds
        self.status.value = html.escape(
            f"Measuring {spec.model} ({spec.backend}) at {', '.join(map(str, counts))} processes, batch "
            f"{spec.batch_size} per process (global batch {', '.join(str(spec.batch_size * n) for n in counts)}), "
            f"{rounds} round(s) …")
        result = tc.scaling(spec, nprocs=list(counts), rounds=rounds, observer=self._observe, stop=self._bg.stop_event)
        self._show_scaling(result, spec)
        self.status.value = ("Stopped: the table shows what was measured before Stop." if self._bg.stopping
                             else "<span class='tcb-done'>Done.</span>")

    def show_stored(self, result: Any) -> None:
        """Draw a scaling measurement loaded from the store (History tab), nothing rerun."""
        self._show_scaling(result, result.spec)
        self.status.value = (f"Scaling measurement #{result.comparison_id} from the store ({len(result.results)} "
                             "runs), not rerun.")

    def _show_scaling(self, result: Any, spec: Any) -> None:
        self.scaling = result
        table = result.table()
        if "global_batch" not in table.columns:
            table.insert(1, "global_batch", table["nproc"] * spec.batch_size)
        self.scaling_table.value = _table_html(table)
        self.scaling_text.value = f"<p>{html.escape(result.describe())}</p>"
        self._replace_plot(self.scaling_plot, _figure(result.plot(), "tcb-scaling-figure"))

    @staticmethod
    def _replace_plot(box: w.Box, fig: go.FigureWidget) -> None:
        """Show ``fig`` in ``box``; the figure it replaces is closed (its browser model freed)."""
        old = box.children
        box.children = (fig,)
        for child in old:
            child.close()

    def _observe(self, event: Any) -> None:
        """The jobs' events (``tc.events``, on the background thread): progress rows and a status line; never
        raises."""
        try:
            if not isinstance(event, tc.events.JobEvent):
                return
            job, label = event.job, event.label or event.backend
            if isinstance(event, tc.events.JobStarted):
                self._round[job] = event.round
                self._progress.start(job, event.spec.steps)
            elif isinstance(event, tc.events.PhaseChanged) and not self._bg.stopping:
                phase = event.phase
                self._out.value = (f"<b>{html.escape(label)}</b> · round {self._round.get(job, 0) + 1} of "
                                     f"{self._rounds} · <span class='tcb-phase'>"
                                     f"{html.escape(_PHASES.get(phase, phase + '…'))}</span>")
            elif isinstance(event, tc.events.StepMeasured):
                self._progress.step(job, event.record)
            elif isinstance(event, tc.events.JobEnded):
                self._progress.end(job, event.result)
        except Exception:  # noqa: BLE001 - drawing never stops the jobs
            pass

    # -- projection --------------------------------------------------------------------------------
    def project(self) -> Any:
        """``tc.project_scaling`` for the chosen profiles, nodes and EFA setting (instant: no job runs)."""
        self.projection_message.value = ""
        spec = self.controls.spec
        if spec is None:
            self.projection_message.value = _error(f"Fix the Run tab first: {self.controls.error}")
            return None
        try:
            nodes = parse_counts("nodes", self.nodes.value, at_least=1, example="1,2,4,8")
            if not self.profiles.value:
                raise ValueError("profiles=() is not allowed; select one or more instance profiles")
        except ValueError as exc:
            self.projection_message.value = _error(str(exc))
            return None
        try:
            proj = tc.project_scaling(spec=spec, profiles=list(self.profiles.value), nodes=list(nodes),
                                      efa=None if self.efa.value == "profile" else "both")
            self._show_projection(proj)
        except Exception as exc:  # noqa: BLE001 - a bad choice is a line, not a traceback
            self.projection_message.value = _failure("projection", exc)
            return None
        return proj

    def _show_projection(self, proj: Any) -> None:
        self.projection = proj
        table = proj.table.copy()
        if "global_batch" not in table.columns:
            table.insert(table.columns.get_loc("devices") + 1, "global_batch", table["devices"] * proj.per_device_batch)
        self.projection_table.value = _table_html(table[[c for c in PROJECTION_COLUMNS if c in table.columns]])
        self.projection_text.value = f"<p style='{_HINT_STYLE}'>{html.escape(proj.describe())}</p>"
        self._replace_plot(self.projection_plot, _figure(proj.plot(), "tcb-projection-figure"))

    # -- learning rate for the global batch ----------------------------------------------------------
    def run_predict(self) -> threading.Thread | None:
        """``tc.predict_lr(spec, nproc=N)`` in the background: the lr for the global batch ``batch_size × N``."""
        n = int(self.lr_nproc.value)
        return self._start("learning-rate prediction", self.lr_message, self.lr_progress,
                           lambda spec: self._predict(spec, n))

    def _predict(self, spec: Any, n: int) -> None:
        per = spec.batch_size
        self.lr_batches.value = html.escape(f"global batch {spec.global_batch} ({spec.nproc} × {per}) → "
                                            f"{per * n} ({n} × {per})")
        self.lr_table.value = self.lr_advice.value = ""
        self._rounds = 1
        self.lr_message.value = ("Reading the stored gradient noise scale of this job, or measuring it (one eager "
                                 "job) …")
        p = tc.predict_lr(spec, nproc=n, stop=self._bg.stop_event, observer=self._observe)
        self.prediction = p
        self.lr_table.value = _table_html(p.table())
        self.lr_message.value = f"<p>{html.escape(p.describe())}</p>"
        self.lr_advice.value = f"<p><b>Which rule?</b> {html.escape(p.advice())}</p>"
