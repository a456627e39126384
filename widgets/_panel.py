"""The workbench panel: choose a job, run it paired (eager vs compiled) in the background, watch it live.

``Workbench()`` as a cell's last expression shows the panel. Long work runs in a
``threading.Thread`` — never on the kernel's main thread, so the Stop button is heard — and
``tc.compare`` runs each job in its own process. ``panel.comparison`` is the last shown
``tcbench.Comparison`` (its ``summary()`` / ``steps()`` DataFrames are there for the notebook).
"""

from __future__ import annotations

import html
import threading
import time
from pathlib import Path
from typing import Any

import ipywidgets as w

import tcbench as tc

from ._controls import Controls
from ._history import History
from ._live import JobProgress, LiveFigures
from ._tuning import TuningTab
from ._report import failures_html, summary_table_html, words_html

_CSS = w.HTML("<style>.tcb-panel .widget-label{min-width:0}.tcb-status{font-size:13px}"
              ".tcb-log pre{max-height:180px;overflow:auto;font-size:11px}</style>")


class Workbench:
    """The tcbench panel. Keyword arguments preset the controls, e.g.
    ``Workbench(model="distilbert-base-uncased", steps=10, backends=("inductor", "xla"))``."""

    def __init__(self, **preset: Any):
        self.comparison: Any = None
        self._thread: threading.Thread | None = None
        self._busy = False
        self._stop = threading.Event()
        self._job_round: dict[str, int] = {}
        self._log: list[str] = []
        self.controls = Controls(on_change=self._sync_buttons)
        self.controls._on_change = None  # until the buttons exist
        if preset:
            self.controls.set(**preset)
        self.controls._on_change = self._sync_buttons
        self.run_button = w.Button(description="Run paired", button_style="primary", icon="play")
        self.run_button.add_class("tcb-run")
        self.stop_button = w.Button(description="Stop", button_style="danger", icon="stop", disabled=True)
        self.stop_button.add_class("tcb-stop")
        self.run_button.on_click(lambda _b: self.run())
        self.stop_button.on_click(lambda _b: self.stop())
        self.status = w.HTML("")
        self.status.add_class("tcb-status")
        self.progress = JobProgress()
        self.figures = LiveFigures(["eager", *self.controls.selected_backends()])
        self.summary = w.HTML("")
        self.summary.add_class("tcb-summary")
        self.words = w.HTML("")
        self.words.add_class("tcb-words")
        self.failures = w.HTML("")
        self.failures.add_class("tcb-failures")
        self.log = w.HTML("")
        self.log.add_class("tcb-log")
        self.export_path = w.Text(placeholder="report path (default: tcbench-comparison-<id>.html)",
                                  layout=w.Layout(width="360px"))
        self.export_path.add_class("tcb-export-path")
        self.export_button = w.Button(description="Export HTML report", icon="download", disabled=True,
                                      layout=w.Layout(width="auto"))
        self.export_button.add_class("tcb-export")
        self.export_button.on_click(lambda _b: self.export())
        self.export_message = w.HTML("")
        self.export_message.add_class("tcb-export-message")
        self.history = History(on_load=self.show)
        self.box = self._layout()
        self._sync_buttons()

    # -- layout ----------------------------------------------------------------------------------
    def _layout(self) -> w.VBox:
        run_tab = w.VBox([self.controls.box(), w.HBox([self.run_button, self.stop_button]), self.status])
        self.tuning = TuningTab(self.controls)
        tuning = self.tuning.box
        self.tabs = w.Tab(children=[run_tab, self.history.box, tuning])
        for i, title in enumerate(("Run", "History", "Batch & LR")):
            self.tabs.set_title(i, title)
        self.tabs.add_class("tcb-tabs")
        self.tabs.observe(self._tab_changed, names="selected_index")
        log = w.Accordion(children=[self.log])
        log.set_title(0, "Job log")
        log.selected_index = None
        export = w.HBox([self.export_button, self.export_path, self.export_message])
        box = w.VBox([_CSS, w.HTML("<h3 style='margin:4px 0'>tcbench — does compiling pay off?</h3>"), self.tabs,
                      self.progress.box, self.failures, self.figures.box(), self.summary, self.words, export, log])
        box.add_class("tcb-panel")
        return box

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.box._repr_mimebundle_(**kwargs)

    def display(self) -> None:
        """Show the panel (the same as leaving ``panel`` as a cell's last expression)."""
        from IPython.display import display
        display(self.box)

    def _tab_changed(self, change: dict) -> None:
        if change["new"] == 1:
            self.history.refresh()

    # -- state -----------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._busy

    def _sync_buttons(self) -> None:
        running = self.running
        valid = self.controls.spec is not None
        self.run_button.disabled = running or not valid
        self.stop_button.disabled = not running
        self.export_button.disabled = running or self.comparison is None
        if not running and not valid:
            self.status.value = (f"<span class='tcb-invalid' style='color:#b00020'>Fix the input marked ⚠ to run: "
                                 f"{html.escape(self.controls.error)}</span>")
        elif not running and "tcb-invalid" in self.status.value:
            self.status.value = ""

    # -- actions ---------------------------------------------------------------------------------
    def run(self) -> threading.Thread | None:
        """Start the paired comparison in a background thread (what the Run paired button does)."""
        if self.running or not self.controls.validate():
            self._sync_buttons()
            return None
        spec, backends, rounds = self.controls.spec, self.controls.selected_backends(), self.controls.rounds.value
        budget = spec.memory_budget_gb * 1024 if spec.memory_budget_gb else None
        self.figures.reset(["eager", *backends], budget_mb=budget)
        self.progress.clear()
        self.summary.value = self.words.value = self.failures.value = self.export_message.value = ""
        self._log, self._job_round, self.log.value = [], {}, ""
        self.comparison = None
        self._stop = threading.Event()
        self.controls.set_disabled(True)
        self.status.value = (f"Running eager vs {', '.join(backends)} · {spec.model} ({spec.size}) · batch "
                             f"{spec.batch_size} × seq {spec.seq_len} · {spec.steps} steps ({spec.warmup_steps} warmup)"
                             f"{f' · {rounds} rounds' if rounds > 1 else ''} …")
        self._busy = True
        self._thread = threading.Thread(target=self._work, args=(spec, backends, rounds), daemon=True,
                                        name="tcbench-compare")
        self._sync_buttons()
        self._thread.start()
        return self._thread

    def stop(self) -> None:
        """Stop the running comparison; what was measured is kept, the running job shows as interrupted."""
        if self.running:
            self._stop.set()
            self.status.value = "Stopping… (the running job is being ended; its measured steps are kept)"

    def wait(self, timeout: float | None = None) -> Any:
        """Block until the running comparison ends; returns ``panel.comparison``."""
        if self._thread is not None:
            self._thread.join(timeout)
        return self.comparison

    def _work(self, spec: Any, backends: tuple[str, ...], rounds: int) -> None:
        started = time.monotonic()
        cmp, error = None, ""
        try:
            cmp = tc.compare(spec, backends=backends, rounds=rounds, observer=self._observe, stop=self._stop)
        except Exception as exc:  # noqa: BLE001 - the panel stays usable whatever happens
            error = f"{type(exc).__name__}: {exc}"
        try:
            self.figures.flush(force=True)
            if cmp is not None:
                self.show(cmp)
        except Exception as exc:  # noqa: BLE001
            error = error or f"could not draw the result: {type(exc).__name__}: {exc}"
        finally:
            self.controls.set_disabled(False)
            self._busy = False
            self._sync_buttons()
        took = time.monotonic() - started
        if error:
            self.status.value = f"<span style='color:#b00020'>The comparison failed: {html.escape(error)}</span>"
        elif self._stop.is_set():
            self.status.value = f"Stopped after {took:.0f} s; the measured steps are shown and kept in the store."
        else:
            self.status.value = f"<span class='tcb-done'>Done in {took:.0f} s.</span>"

    def _observe(self, event: dict) -> None:
        """The compare observer (runs on the background thread); a drawing error never stops the jobs."""
        try:
            kind, job = event.get("type"), event.get("job", "")
            if kind == "start":
                self._job_round[job] = int(event.get("round", 0) or 0)
                self.progress.start(job, event["spec"].steps)
            elif kind == "step":
                rec, steps = event["record"], self.controls.spec.steps if self.controls.spec else 0
                self.progress.step(job, rec, steps or rec.step)
                if self._job_round.get(job, 0) == 0:
                    self.figures.add_step(event["backend"], rec, self._batch())
                    self.figures.flush()
            elif kind == "end":
                result = event["result"]
                self.progress.end(job, result)
                if self._job_round.get(job, 0) == 0:
                    self.figures.set_result(event["backend"], result)
                    self.figures.flush(force=True)
            elif kind == "log":
                self._add_log(job, str(event.get("line", "")))
        except Exception as exc:  # noqa: BLE001
            self._add_log("panel", f"could not show event {event.get('type')}: {type(exc).__name__}: {exc}")

    def _batch(self) -> int:
        return self.controls.spec.batch_size if self.controls.spec else 0

    def _add_log(self, job: str, line: str) -> None:
        self._log = (self._log + [f"[{job}] {line}" if job else line])[-200:]
        self.log.value = "<pre>" + html.escape("\n".join(self._log)) + "</pre>"
        if "Found configuration" in line:
            self.status.value = html.escape(line)

    # -- showing a comparison ------------------------------------------------------------------------
    def show(self, cmp: Any) -> None:
        """Draw a finished (or loaded) comparison: figures, summary table, words, failures."""
        self.comparison = cmp
        summary = cmp.summary()
        budget_gb = getattr(cmp.spec, "memory_budget_gb", None)
        if budget_gb is None:
            try:
                budget_gb = tc.profile(cmp.spec.profile).memory_budget_gb
            except Exception:  # noqa: BLE001
                budget_gb = None
        self.figures.load(cmp, budget_gb=budget_gb)
        self.summary.value = summary_table_html(summary)
        self.words.value = words_html(summary)
        self.failures.value = failures_html(cmp.results)
        self._sync_buttons()

    def export(self, path: str | Path | None = None) -> Path | None:
        """Write the shown comparison's HTML report; returns its path."""
        if self.comparison is None:
            self.export_message.value = "<i>Nothing to export yet: run or load a comparison.</i>"
            return None
        target = Path(path or self.export_path.value.strip()
                      or f"tcbench-comparison-{self.comparison.comparison_id}.html").expanduser()
        try:
            self.comparison.to_html(str(target))
        except Exception as exc:  # noqa: BLE001
            self.export_message.value = f"<span style='color:#b00020'>Export failed: {html.escape(str(exc))}</span>"
            return None
        self.export_message.value = f"Report written to <code>{html.escape(str(target.resolve()))}</code>"
        return target
