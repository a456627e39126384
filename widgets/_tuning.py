"""The "Batch & LR" tab: find the largest batch per backend, then retune the learning rate for it.

Both actions call tcbench's public API (``tc.find_max_batch``, ``tc.retune_lr``) in a background
thread; probes and trials appear in the live figure as they finish (pruned trials marked).
"Use this learning rate" copies the best lr (and the new batch) into the Run tab's controls.
"""

from __future__ import annotations

import html
import math
import threading
from typing import Any, Callable

import ipywidgets as w
import plotly.graph_objects as go

import tcbench as tc

_MARKS = {"complete": ("circle", "#1f77b4"), "pruned": ("x", "#ff7f0e"), "failed": ("diamond", "#d62728")}


def _figure() -> go.FigureWidget:
    """Trials: held-out loss vs learning rate; the two rules as vertical lines (updated, never re-added)."""
    fig = go.FigureWidget(layout=dict(template="plotly_white", height=320, margin=dict(l=60, r=20, t=40, b=40),
                                      title="Retune LR: held-out loss per trial (× pruned, ◆ failed)",
                                      xaxis=dict(title="learning rate", type="log"), yaxis_title="eval loss"))
    for state, (symbol, color) in _MARKS.items():
        fig.add_scatter(x=[], y=[], mode="markers", name=state, marker=dict(symbol=symbol, color=color, size=10))
    for name, dash in (("linear rule", "dash"), ("square-root rule", "dot")):
        fig.add_scatter(x=[], y=[], mode="lines", name=name, line=dict(dash=dash, color="grey"))
    return fig


class TuningTab:
    """Find max batch + Retune LR, driven by the Run tab's controls (``controls.spec``)."""

    def __init__(self, controls: Any):
        self.controls = controls
        self.max_batch: Any = None
        self.retune: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.budget = w.FloatText(value=0.0, description="Budget GiB", style={"description_width": "initial"},
                                  layout=w.Layout(width="200px"))
        self.include_compiled = w.Checkbox(value=True, description="also probe the Run tab's compiled backends",
                                           indent=False, layout=w.Layout(width="auto"))
        self.find_button = w.Button(description="Find max batch", icon="search")
        self.find_button.add_class("tcb-find-max-batch")
        self.new_batch = w.BoundedIntText(value=32, min=1, max=1 << 16, description="New batch",
                                          layout=w.Layout(width="200px"))
        self.trials = w.BoundedIntText(value=8, min=1, max=200, description="Trials", layout=w.Layout(width="160px"))
        self.retune_button = w.Button(description="Retune LR", icon="sliders")
        self.retune_button.add_class("tcb-retune")
        self.use_button = w.Button(description="Use this learning rate", icon="check", disabled=True)
        self.use_button.add_class("tcb-use-lr")
        self.stop_button = w.Button(description="Stop", icon="stop", button_style="danger", disabled=True)
        self.message = w.HTML("<p>Budget 0 = the chosen profile's memory per device.</p>")
        self.message.add_class("tcb-tuning-message")
        self.table = w.HTML("")
        self.table.add_class("tcb-tuning-table")
        self.fig = _figure()
        self.find_button.on_click(lambda _b: self.find())
        self.retune_button.on_click(lambda _b: self.run_retune())
        self.use_button.on_click(lambda _b: self.use_lr())
        self.stop_button.on_click(lambda _b: self._stop.set())
        self.box = w.VBox([w.HBox([self.budget, self.include_compiled, self.find_button]),
                           w.HBox([self.new_batch, self.trials, self.retune_button, self.use_button, self.stop_button]),
                           self.message, self.table, self.fig])
        self.box.add_class("tcb-tuning")

    # -- actions ---------------------------------------------------------------------------------
    def _start(self, target: Callable[[Any], None]) -> threading.Thread | None:
        spec = self.controls.spec
        if spec is None:
            self.message.value = f"<p style='color:#b00020'>Fix the Run tab first: {html.escape(self.controls.error)}</p>"
            return None
        if self._thread is not None and self._thread.is_alive():
            return None
        self._stop.clear()
        self._busy(True)

        def work() -> None:
            try:
                target(spec)
            except Exception as exc:  # bad input or an engine error: shown, the panel stays usable
                self.message.value = f"<p style='color:#b00020'>{html.escape(type(exc).__name__)}: {html.escape(str(exc))}</p>"
            finally:
                self._busy(False)

        self._thread = threading.Thread(target=work, name="tcbench-tuning", daemon=True)
        self._thread.start()
        return self._thread

    def _busy(self, busy: bool) -> None:
        self.find_button.disabled = self.retune_button.disabled = busy
        self.stop_button.disabled = not busy
        self.use_button.disabled = busy or self.retune is None or self.retune.best_lr is None

    def find(self) -> threading.Thread | None:
        """Grow-then-bisect the batch per backend (eager + the checked compiled backends)."""
        return self._start(self._find)

    def _find(self, spec: Any) -> None:
        backends = ("eager", *(self.controls.selected_backends() if self.include_compiled.value else ()))
        self.message.value = f"<p>Probing batch sizes for {', '.join(backends)} …</p>"
        probes: list[str] = []

        def observer(event: dict) -> None:
            if event["type"] == "probe":
                probes.append(f"{event['backend']} batch {event['batch_size']}: {'fits' if event['fits'] else event['status']}")
                self.message.value = "<p>" + html.escape("; ".join(probes[-6:])) + "</p>"

        budget = self.budget.value if self.budget.value and self.budget.value > 0 else None
        mb = tc.find_max_batch(spec, profile=spec.profile, backends=backends, observer=observer, stop=self._stop,
                               memory_budget_gb=budget, probe_steps=3)
        self.max_batch = mb
        table = mb.table()
        self.table.value = table.to_html(index=False, float_format=lambda v: f"{v:.3g}", na_rep="–")
        compiled = [b for b in backends if b != "eager" and mb.max_batch.get(b)]
        best = mb.max_batch.get(compiled[0]) if compiled else mb.max_batch.get("eager")
        if best:
            self.new_batch.value = int(best)
        self.message.value = (f"<p>Largest batch that fits: " + html.escape(
            ", ".join(f"{b} {mb.max_batch.get(b) or 'none'}" for b in backends)) + ". Retune LR for the new batch next.</p>")

    def run_retune(self) -> threading.Thread | None:
        """Optuna search at the new batch, starting with the linear and square-root rules."""
        return self._start(self._retune)

    def _retune(self, spec: Any) -> None:
        new_batch = int(self.new_batch.value)
        linear, sqrt = spec.lr * new_batch / spec.batch_size, spec.lr * math.sqrt(new_batch / spec.batch_size)
        with self.fig.batch_update():
            for trace in self.fig.data[:3]:
                trace.x, trace.y = [], []
            self.fig.data[3].x, self.fig.data[3].y = [linear, linear], [0, 1]
            self.fig.data[4].x, self.fig.data[4].y = [sqrt, sqrt], [0, 1]
        points: dict[str, tuple[list, list]] = {k: ([], []) for k in _MARKS}

        def observer(event: dict) -> None:
            if event["type"] != "trial":
                return
            state = "pruned" if event["pruned"] else "complete" if event["status"] == "ok" else "failed"
            value = event.get("eval_loss")
            xs, ys = points[state]
            xs.append(event["lr"])
            ys.append(value if value is not None and math.isfinite(value) else None)
            finite = [y for _, yy in points.values() for y in yy if y is not None]
            with self.fig.batch_update():
                for i, key in enumerate(_MARKS):
                    self.fig.data[i].x, self.fig.data[i].y = points[key]
                if finite:
                    lo, hi = min(finite), max(finite)
                    self.fig.data[3].y = self.fig.data[4].y = [lo, hi]
            self.message.value = f"<p>Trial {event['number']}: lr {event['lr']:.3g} → {state}</p>"

        self.message.value = f"<p>Retuning the learning rate for batch {new_batch} …</p>"
        self.retune = tc.retune_lr(spec, new_batch_size=new_batch, n_trials=int(self.trials.value),
                                   observer=observer, stop=self._stop)
        self.table.value = self.retune.summary().to_html(index=False, float_format=lambda v: f"{v:.4g}", na_rep="–")
        r = self.retune
        pred = (f" Predicted from the gradient noise scale: {r.prediction.lr:.3g} ({r.prediction.noise.describe()})."
                if r.prediction is not None else f" No prediction: {r.prediction_note}.")
        self.message.value = (f"<p>{html.escape(r.describe())}{html.escape(pred)} {len(r.trials)} trials, "
                              f"{r.n_pruned} pruned.</p>")

    def use_lr(self) -> None:
        """Copy the retuned learning rate and the new batch into the Run tab."""
        if self.retune is None or self.retune.best_lr is None:
            return
        self.controls.set(lr=float(self.retune.best_lr), batch_size=int(self.retune.new_batch_size))
        self.message.value = (f"<p>Run tab set to batch {self.retune.new_batch_size}, "
                              f"lr {self.retune.best_lr:.3g}.</p>")

    def wait(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)
