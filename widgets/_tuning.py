"""The "Batch & LR" tab: find the largest batch per backend, predict the learning rate for it, retune it.

Each action calls tcbench's public API (``tc.find_max_batch``, ``tc.predict_lr``, ``tc.retune_lr``) in a
background thread. "Predict LR" measures the gradient noise scale (or reads the stored one) and shows the
noise-scale prediction beside the linear and square-root rules, in plain words for the chosen optimiser;
"Retune LR" searches from those guesses, trials appearing in the live figure as they finish (pruned trials
marked). "Use this learning rate" copies the best lr (and the new batch) into the Run tab's controls. "Keep
the study" retunes in tcbench's store instead of in memory; the study can then be opened in optuna-dashboard,
started on 127.0.0.1 from a thread of this kernel when it is installed (``tcbench-workbench[dashboard]``), or
from a terminal with the ``tcbench dashboard`` command shown.
"""

from __future__ import annotations

import html
import importlib.util
import math
import threading
import time
from typing import Any, Callable

import ipywidgets as w
import plotly.graph_objects as go

import tcbench as tc

from ._background import Background

_MARKS = {"complete": ("circle", "#1f77b4"), "pruned": ("x", "#ff7f0e"), "failed": ("diamond", "#d62728")}


def _figure() -> go.FigureWidget:
    """Trials: held-out loss vs learning rate; the two rules as vertical lines (updated, never re-added)."""
    fig = go.FigureWidget(layout=dict(template="plotly_white", height=320, margin=dict(l=60, r=20, t=40, b=40),
                                      title="Retune LR: held-out loss per trial (× pruned, ◆ failed)",
                                      xaxis=dict(title="learning rate", type="log"), yaxis_title="eval loss"))
    for state, (symbol, color) in _MARKS.items():
        fig.add_scatter(x=[], y=[], mode="markers", name=state, marker=dict(symbol=symbol, color=color, size=10))
    for name, dash, color in _LINES:
        fig.add_scatter(x=[], y=[], mode="lines", name=name, line=dict(dash=dash, color=color))
    return fig


# the guesses drawn as vertical lines, in the figure's trace order after the three marker traces
_LINES = (("linear rule", "dash", "grey"), ("square-root rule", "dot", "grey"),
          ("noise-scale prediction", "solid", "#2ca02c"), ("original lr", "dashdot", "#9467bd"))
OPTIMIZERS = (("Adam(W) (tcbench's jobs)", "adam"), ("SGD", "sgd"))
SAMPLE_BUDGETS = (("equal samples", "equal_samples"), ("equal steps", "equal_steps"))


class TuningTab:
    """Find max batch + Retune LR, driven by the Run tab's controls (``controls.spec``)."""

    def __init__(self, controls: Any):
        self.controls = controls
        self.max_batch: Any = None
        self.retune: Any = None
        self._bg = Background()
        controls.on_owner(lambda: self._sync_buttons())
        self.budget = w.FloatText(value=0.0, description="Budget GiB", style={"description_width": "initial"},
                                  layout=w.Layout(width="200px"))
        self.include_compiled = w.Checkbox(value=True, description="also probe the Run tab's compiled backends",
                                           indent=False, layout=w.Layout(width="auto"))
        self.find_button = w.Button(description="Find max batch", icon="search")
        self.find_button.add_class("tcb-find-max-batch")
        self.new_batch = w.BoundedIntText(value=32, min=1, max=1 << 16, description="New batch",
                                          layout=w.Layout(width="200px"))
        self.trials = w.BoundedIntText(value=8, min=1, max=200, description="Trials", layout=w.Layout(width="160px"))
        self.optimizer = w.Dropdown(options=OPTIMIZERS, value="adam", description="Optimizer",
                                    layout=w.Layout(width="260px"))
        self.seeds = w.BoundedIntText(value=1, min=1, max=10, description="Seeds (3 finalists)",
                                      style={"description_width": "initial"}, layout=w.Layout(width="190px"))
        self.sample_budget = w.Dropdown(options=SAMPLE_BUDGETS, value="equal_samples", description="Each trial",
                                        layout=w.Layout(width="240px"))
        self.predict_button = w.Button(description="Predict LR", icon="line-chart")
        self.predict_button.add_class("tcb-predict-lr")
        self.prediction: Any = None
        self.advice = w.HTML("")
        self.advice.add_class("tcb-lr-advice")
        self.retune_button = w.Button(description="Retune LR", icon="sliders")
        self.retune_button.add_class("tcb-retune")
        self.use_button = w.Button(description="Use this learning rate", icon="check", disabled=True)
        self.use_button.add_class("tcb-use-lr")
        self.stop_button = w.Button(description="Stop", icon="stop", button_style="danger", disabled=True)
        self.keep_study = w.Checkbox(value=False, description="keep the study in the store (optuna-dashboard)",
                                     indent=False, layout=w.Layout(width="auto"))
        self.keep_study.add_class("tcb-keep-study")
        self.dashboard_button = w.Button(description="Open in optuna-dashboard", icon="external-link",
                                         layout=w.Layout(display="none", width="auto"))
        self.dashboard_button.add_class("tcb-open-dashboard")
        self.dashboard_note = w.HTML("")
        self.dashboard_note.add_class("tcb-dashboard")
        self._study: tuple[str, str, str] | None = None   # (storage, shown URL, study name) of a kept retune
        self._dashboard: Any = None                         # the running tc.Dashboard and its storage
        self._dashboard_storage: str | None = None
        self.message = w.HTML("<p>Budget 0 = the chosen profile's memory per device.</p>")
        self.message.add_class("tcb-tuning-message")
        self.table = w.HTML("")
        self.table.add_class("tcb-tuning-table")
        self.fig = _figure()
        self.find_button.on_click(lambda _b: self.find())
        self.predict_button.on_click(lambda _b: self.run_predict())
        self.retune_button.on_click(lambda _b: self.run_retune())
        self.use_button.on_click(lambda _b: self.use_lr())
        self.stop_button.on_click(lambda _b: self._bg.stop())
        self.dashboard_button.on_click(lambda _b: self.open_dashboard())
        self.box = w.VBox([w.HBox([self.budget, self.include_compiled, self.find_button]),
                           w.HBox([self.new_batch, self.optimizer, self.predict_button]),
                           w.HBox([self.trials, self.seeds, self.sample_budget, self.retune_button, self.use_button,
                                   self.stop_button]),
                           w.HBox([self.keep_study, self.dashboard_button]), self.dashboard_note,
                           self.message, self.advice, self.table, self.fig])
        self.box.add_class("tcb-tuning")

    # -- actions ---------------------------------------------------------------------------------
    def _start(self, target: Callable[[Any], None]) -> threading.Thread | None:
        spec = self.controls.spec
        if spec is None:
            self.message.value = (f"<p style='color:#b00020'>Fix the Run tab first: "
                                  f"{html.escape(self.controls.error)}</p>")
            return None
        if self._bg.busy:
            return None

        def claim() -> bool:
            if self.controls.claim("tuning search"):
                self.message.value = f"<p style='color:#b00020'>{html.escape(self.controls.busy_text())}</p>"
                return False
            self._sync_buttons()
            return True

        def work(_stop: threading.Event) -> None:
            try:
                target(spec)
            except Exception as exc:  # bad input or an engine error: shown, the panel stays usable
                self.message.value = (f"<p style='color:#b00020'>{html.escape(type(exc).__name__)}: "
                                      f"{html.escape(str(exc))}</p>")

        def finish(_result: None) -> None:
            self._sync_buttons()
            self.controls.release()

        return self._bg.start("tuning", work, finish=finish, claim=claim)

    def _sync_buttons(self) -> None:
        """Start buttons off while this tab works or another tab holds the panel."""
        busy = self._bg.busy or self.controls.owner is not None
        self.find_button.disabled = self.retune_button.disabled = self.predict_button.disabled = busy
        self.stop_button.disabled = not self._bg.busy
        self.use_button.disabled = busy or self.retune is None or self.retune.best_lr is None

    def find(self) -> threading.Thread | None:
        """Grow-then-bisect the batch per backend (eager + the checked compiled backends)."""
        return self._start(self._find)

    def _find(self, spec: Any) -> None:
        backends = (tc.NATIVE, *(self.controls.selected_backends() if self.include_compiled.value else ()))
        self.message.value = f"<p>Probing batch sizes for {', '.join(backends)} …</p>"
        probes: list[str] = []

        def observer(event: Any) -> None:
            if isinstance(event, tc.events.BatchProbed):
                probes.append(f"{event.backend} batch {event.batch_size}: "
                              f"{'fits' if event.fits else event.status}")
                self.message.value = "<p>" + html.escape("; ".join(probes[-6:])) + "</p>"

        budget = self.budget.value if self.budget.value and self.budget.value > 0 else None
        mb = tc.find_max_batch(spec, profile=spec.profile, backends=backends, observer=observer,
                               stop=self._bg.stop_event, memory_budget_gb=budget, probe_steps=3)
        self.max_batch = mb
        table = mb.table()
        self.table.value = tc.html_table(table)
        compiled = [b for b in backends if b != tc.NATIVE and mb.max_batch.get(b)]
        best = mb.max_batch.get(compiled[0]) if compiled else mb.max_batch.get(tc.NATIVE)
        if best:
            self.new_batch.value = int(best)
        self.message.value = ("<p>Largest batch that fits: "
                              + html.escape(", ".join(f"{b} {mb.max_batch.get(b) or 'none'}" for b in backends))
                              + ". Retune LR for the new batch next.</p>")

    def run_retune(self) -> threading.Thread | None:
        """Optuna search at the new batch, starting with the linear and square-root rules."""
        return self._start(self._retune)

    def _lines(self, spec: Any, new_batch: int, predicted: float | None, clear: bool) -> None:
        """The guesses as vertical lines (the prediction's only once known); ``clear`` empties the trials."""
        lrs = (spec.lr * new_batch / spec.batch_size, spec.lr * math.sqrt(new_batch / spec.batch_size), predicted,
               spec.lr)
        with self.fig.batch_update():
            if clear:
                for trace in self.fig.data[:3]:
                    trace.x, trace.y = [], []
            finite = [y for t in self.fig.data[:3] for y in t.y if y is not None and math.isfinite(y)]
            ys = [min(finite), max(finite)] if finite else [0, 1]
            for trace, lr in zip(self.fig.data[3:], lrs):
                trace.x, trace.y = ([lr, lr], ys) if lr is not None else ([], [])

    def run_predict(self) -> threading.Thread | None:
        """The noise-scale prediction for the new batch (measures the noise scale when none is stored)."""
        return self._start(self._predict)

    def _predict(self, spec: Any) -> None:
        new_batch = int(self.new_batch.value)
        self.message.value = (f"<p>Measuring the gradient noise scale of batch {spec.batch_size} (one eager job; "
                              f"a stored measurement of this job is reused) …</p>")
        p = tc.predict_lr(spec, new_batch, optimizer=self.optimizer.value, stop=self._bg.stop_event)
        self._show_prediction(p)
        self._lines(spec, new_batch, p.lr, clear=False)

    def _show_prediction(self, p: Any) -> None:
        self.prediction = p
        self.table.value = tc.html_table(p.table())
        self.message.value = f"<p>{html.escape(p.describe())}</p>"
        self.advice.value = f"<p><b>Which rule?</b> {html.escape(p.advice())}</p>"

    def _retune(self, spec: Any) -> None:
        new_batch = int(self.new_batch.value)
        self._lines(spec, new_batch, None, clear=True)
        points: dict[str, tuple[list, list]] = {k: ([], []) for k in _MARKS}
        lines: dict[str, float | None] = {"prediction": None}

        def observer(event: Any) -> None:
            if isinstance(event, tc.events.LrPredicted):
                lines["prediction"] = event.lr
                self._lines(spec, new_batch, event.lr, clear=False)
                self.message.value = f"<p>{html.escape(event.text)}</p>"
                return
            if isinstance(event, tc.events.FinalistEnded):
                self.message.value = (f"<p>Finalist lr {event.lr:.3g}, seed {event.seed}: "
                                      f"{html.escape(event.status)}</p>")
                return
            if not isinstance(event, tc.events.TrialEnded):
                return
            state = "pruned" if event.pruned else "complete" if event.status == "ok" else "failed"
            value = event.eval_loss
            xs, ys = points[state]
            xs.append(event.lr)
            ys.append(value if value is not None and math.isfinite(value) else None)
            with self.fig.batch_update():
                for i, key in enumerate(_MARKS):
                    self.fig.data[i].x, self.fig.data[i].y = points[key]
            self._lines(spec, new_batch, lines["prediction"], clear=False)
            self.message.value = f"<p>Trial {event.number}: lr {event.lr:.3g} → {state}</p>"

        self.message.value = f"<p>Retuning the learning rate for batch {new_batch} …</p>"
        self.show_study(None, None, "")
        storage = "store" if self.keep_study.value else None   # a new study each time: the panel never resumes one
        name = f"panel-b{spec.batch_size}-to-b{new_batch}-{time.strftime('%Y%m%d-%H%M%S')}" if storage else None
        self.retune = tc.retune_lr(spec, new_batch_size=new_batch, n_trials=int(self.trials.value),
                                   observer=observer, stop=self._bg.stop_event, optimizer=self.optimizer.value,
                                   budget=self.sample_budget.value, seeds=int(self.seeds.value), storage=storage,
                                   study_name=name)
        self.show_study(storage, self.retune.storage, self.retune.study_name)
        self.table.value = tc.html_table(self.retune.summary(), digits=4)
        r = self.retune
        pred = (f" Predicted from the gradient noise scale: {r.prediction.lr:.3g} ({r.prediction.noise.describe()})."
                if r.prediction is not None else f" No prediction: {r.prediction_note}.")
        if r.prediction is not None:
            self.prediction = r.prediction
            self.advice.value = f"<p><b>Which rule?</b> {html.escape(r.prediction.advice())}</p>"
        self.message.value = (f"<p>{html.escape(r.describe())}{html.escape(pred)} {len(r.trials)} trials, "
                              f"{r.n_pruned} pruned.</p>")

    def show_study(self, storage: str | None, shown: str | None, study_name: str) -> None:
        """Offer optuna-dashboard on a study kept in a database (``storage`` as retune_lr took it, ``shown``: its URL,
        password masked): the button when optuna-dashboard is installed, else how to install it, and the terminal
        command either way. ``shown`` None (a study kept in memory): nothing."""
        self._study = None if storage is None or shown is None else (storage, shown, study_name)
        installed = importlib.util.find_spec("optuna_dashboard") is not None
        self.dashboard_button.layout.display = None if self._study and installed else "none"
        if self._study is None:
            self.dashboard_note.value = ""
            return
        how = ("the button opens it here, or from a terminal:" if installed else
               "to browse it in optuna-dashboard, <code>pip install 'tcbench-workbench[dashboard]'</code>, then:")
        self.dashboard_note.value = (f"<p>Study <b>{html.escape(study_name)}</b> is kept in {html.escape(shown)}; "
                                     f"{how} {self._command()}</p>")

    def _command(self) -> str:
        """``tcbench dashboard --storage <shown URL>`` as HTML (and where the password goes when it is masked)."""
        shown = self._study[1] if self._study else ""
        hint = " (put the password back in place of ***)" if "***" in shown else ""
        return f"<code>tcbench dashboard --storage '{html.escape(shown)}'</code>{hint}"

    def open_dashboard(self) -> str | None:
        """Serve optuna-dashboard on the kept study's storage (on 127.0.0.1, from a thread of this kernel, started
        once per storage) and link to the study's page; returns the link (None: nothing kept, or it failed)."""
        if self._study is None:
            return None
        storage, _shown, name = self._study
        try:
            if self._dashboard is None or self._dashboard_storage != storage:
                self.close_dashboard()
                self._dashboard, self._dashboard_storage = tc.start_dashboard(storage), storage
            url = self._dashboard.study_url(name)
        except Exception as exc:  # not installed, the storage gone: shown, the panel stays usable
            self.dashboard_note.value = f"<p style='color:#b00020'>{html.escape(str(exc), quote=False)}</p>"
            return None
        self.dashboard_note.value = (f"<p><a href='{html.escape(url)}' target='_blank' rel='noopener'>"
                                     f"Open the study in optuna-dashboard</a> ({html.escape(url)}, served by this "
                                     f"kernel), or from a terminal: {self._command()}</p>")
        return url

    def close_dashboard(self) -> None:
        """Stop the optuna-dashboard this tab started (if any)."""
        if self._dashboard is not None:
            self._dashboard.stop()
        self._dashboard = self._dashboard_storage = None

    def use_lr(self) -> None:
        """Copy the retuned learning rate and the new batch into the Run tab."""
        if self.retune is None or self.retune.best_lr is None:
            return
        self.controls.set(lr=float(self.retune.best_lr), batch_size=int(self.retune.new_batch_size))
        self.message.value = (f"<p>Run tab set to batch {self.retune.new_batch_size}, "
                              f"lr {self.retune.best_lr:.3g}.</p>")

    def wait(self, timeout: float | None = None) -> None:
        self._bg.wait(timeout)
