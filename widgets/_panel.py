"""The workbench panel: choose a job, run it paired (eager vs compiled) in the background, watch it live.

``Workbench()`` as a cell's last expression shows the panel. Long work runs in a
``threading.Thread`` — never on the kernel's main thread, so the Stop button is heard — and
``tc.compare`` runs each job in its own process. ``panel.comparison`` is the last shown
``tcbench.Comparison`` (its ``summary()`` / ``steps()`` DataFrames are there for the notebook);
``panel.noise_floor`` the last ``tcbench.NoiseFloor`` measured with "Measure noise floor". The "Batch & LR" tab is
``panel.tuning``, the "Data parallel" tab (measured and projected scaling, the lr for the global batch)
``panel.parallel``, the "Compile search" tab (the fastest compiled configuration that keeps loss parity,
``tc.tune_compile``) ``panel.compile``, the "Time to quality" tab (which candidate reaches the held-out target loss
sooner over seeds, ``tc.time_to_quality``) ``panel.quality``.
"""

from __future__ import annotations

import html
import threading
import time
from pathlib import Path
from typing import Any, Callable

import ipywidgets as w

import tcbench as tc

from ._background import Background
from ._compile import CompileTab
from ._controls import Controls, batch_text
from ._history import History
from ._live import JobProgress, LiveFigures
from ._parallel import ParallelTab
from ._quality import QualityTab
from ._report import diagnostics_html, failures_html, noise_floor_text, words_html
from ._tuning import TuningTab

_CSS = w.HTML("<style>.tcb-panel .widget-label{min-width:0}.tcb-status{font-size:13px}"
              ".tcb-log pre{max-height:180px;overflow:auto;font-size:11px}</style>")
_PHASES = {"loading": "loading…", "compiling": "compiling…", "warmup": "warming up…", "measuring": "measuring…",
           "eval": "evaluating…"}


def _html(css_class: str, value: str = "") -> w.HTML:
    out = w.HTML(value)
    out.add_class(css_class)
    return out


class Workbench:
    """The tcbench panel. Keyword arguments preset the controls, e.g.
    ``Workbench(model="distilbert-base-uncased", steps=10, backends=("inductor", "xla"), rounds=1, threads=1)``."""

    def __init__(self, **preset: Any):
        self.comparison: Any = None
        self.noise_floor: Any = None
        self._bg = Background()
        self._jobs: dict[str, tuple[int, Any]] = {}      # job -> (round, JobSpec), from its "start" event
        self._compiler: dict[str, str] = {}              # job -> its configured compiler, from its "compiler" event
        self._rounds, self._feed_figures = 1, True
        self._log: list[str] = []
        self.controls = Controls()
        if preset:
            self.controls.set(**preset)
        self._make_widgets()
        self.controls._on_change = self._controls_changed
        self.controls.on_owner(self._sync_buttons)
        self.history = History(on_load=self.show)
        self.box = self._layout()
        self._sync_buttons()
        self._refresh_noise_floor()

    def _make_widgets(self) -> None:
        self.run_button = w.Button(description="Run paired", button_style="primary", icon="play")
        self.run_button.add_class("tcb-run")
        self.stop_button = w.Button(description="Stop", button_style="danger", icon="stop", disabled=True)
        self.stop_button.add_class("tcb-stop")
        self.run_button.on_click(lambda _b: self.run())
        self.stop_button.on_click(lambda _b: self.stop())
        self.noise_button = w.Button(description="Measure noise floor", icon="balance-scale",
                                     layout=w.Layout(width="auto"),
                                     tooltip="run the job against itself (A/A) to see the smallest speedup this "
                                             "machine can resolve now")
        self.noise_button.add_class("tcb-noise-floor-button")
        self.noise_button.on_click(lambda _b: self.measure_noise_floor())
        self.status, self.summary, self.words = _html("tcb-status"), _html("tcb-summary"), _html("tcb-words")
        self.noise_text, self.failures, self.log = _html("tcb-noise-floor"), _html("tcb-failures"), _html("tcb-log")
        self.progress = JobProgress()
        self.figures = LiveFigures([tc.NATIVE, *self.controls.selected_backends()])
        self.export_path = w.Text(placeholder="report path (default: tcbench-comparison-<id>.html)",
                                  layout=w.Layout(width="360px"))
        self.export_path.add_class("tcb-export-path")
        self.export_button = w.Button(description="Export HTML report", icon="download", disabled=True,
                                      layout=w.Layout(width="auto"))
        self.export_button.add_class("tcb-export")
        self.export_button.on_click(lambda _b: self.export())
        self.export_message = _html("tcb-export-message")

    # -- layout ----------------------------------------------------------------------------------
    def _layout(self) -> w.VBox:
        run_tab = w.VBox([self.controls.box(), w.HBox([self.run_button, self.stop_button]), self.status])
        self.tuning = TuningTab(self.controls)
        self.parallel = ParallelTab(self.controls)
        self.compile = CompileTab(self.controls)
        self.quality = QualityTab(self.controls)
        self.history.on_scaling = self._show_stored_scaling
        # appended: the other tabs keep their indexes (History 1, Data parallel 3)
        self.tabs = w.Tab(children=[run_tab, self.history.box, self.tuning.box, self.parallel.box, self.compile.box,
                                    self.quality.box])
        for i, title in enumerate(("Run", "History", "Batch & LR", "Data parallel", "Compile search",
                                   "Time to quality")):
            self.tabs.set_title(i, title)
        self.tabs.add_class("tcb-tabs")
        self.tabs.observe(self._tab_changed, names="selected_index")
        log = w.Accordion(children=[self.log])
        log.set_title(0, "Job log")
        log.selected_index = None
        noise = w.HBox([self.noise_text, self.noise_button], layout=w.Layout(align_items="center"))
        export = w.HBox([self.export_button, self.export_path, self.export_message])
        box = w.VBox([_CSS, w.HTML("<h3 style='margin:4px 0'>tcbench — does compiling pay off?</h3>"), self.tabs,
                      self.progress.box, self.failures, self.figures.box(), self.words, noise, self.summary, export,
                      log])
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
        return self._bg.busy

    def _sync_buttons(self) -> None:
        running = self.running
        valid = self.controls.spec is not None
        elsewhere = self.controls.owner is not None and not running   # another tab's measurement
        self.run_button.disabled = self.noise_button.disabled = running or elsewhere or not valid
        self.stop_button.disabled = not running
        self.export_button.disabled = running or self.comparison is None
        if not running and not valid:
            self.status.value = (f"<span class='tcb-invalid' style='color:#b00020'>Fix the input marked ⚠ to run: "
                                 f"{html.escape(self.controls.error)}</span>")
        elif not running and "tcb-invalid" in self.status.value:
            self.status.value = ""

    def _controls_changed(self) -> None:
        self._sync_buttons()
        if self.comparison is None and not self.running:
            self._refresh_noise_floor()

    def _noise_spec(self) -> Any:
        """The job the noise floor is for: the shown comparison's, else the one the controls describe."""
        return self.comparison.spec if self.comparison is not None else self.controls.spec

    def _refresh_noise_floor(self) -> None:
        spec = self._noise_spec()
        if spec is None:
            self.noise_text.value = ""
            return
        try:
            info = tc.latest_noise_floor(spec)
        except Exception as exc:  # noqa: BLE001 - an unreadable store is a message, not a broken panel
            self.noise_text.value = (f"<span style='color:#b00020'>could not read the stored noise floor: "
                                     f"{html.escape(str(exc))}</span>")
            return
        self.noise_text.value = html.escape(noise_floor_text(info))

    # -- actions ---------------------------------------------------------------------------------
    def run(self) -> threading.Thread | None:
        """Start the paired comparison in a background thread (what the Run paired button does)."""
        if self.running or self._elsewhere() or not self.controls.validate():
            self._sync_buttons()
            return None
        spec, backends, how = self.controls.spec, self.controls.selected_backends(), self.controls.round_args()
        rounds = how.get("rounds", 0)    # 0: adaptive, the number is known at the end
        # the budget line comes from the engine's checked spec (its "start" event): one rule for API, CLI and panel
        self.figures.reset([tc.NATIVE, *backends], budget_mb=None, rounds=rounds)
        self.summary.value = self.words.value = self.failures.value = ""
        self.comparison = None
        job = (f"{spec.model} ({spec.size}) · {batch_text(spec)} × seq {spec.seq_len}" if spec.script is None
               else f"your script {' '.join([spec.model, *spec.script_args])}")
        text = (f"Running eager vs {', '.join(backends)} · {job} · {spec.steps} steps ({spec.warmup_steps} warmup) · "
                f"{self.controls.rounds_text()} · {spec.threads} thread(s) per job …")
        return self._start(text, rounds, True, lambda stop: tc.compare(spec, backends=backends, **how,
                                                                       observer=self._observe, stop=stop),
                           self.show, "comparison")

    def measure_noise_floor(self) -> threading.Thread | None:
        """Run the shown job (else the controls' job) against itself (A/A) for the controls' rounds, in the
        background with the same Stop button and progress rows as Run paired; then show the noise floor."""
        if self.running or self._elsewhere() or not self.controls.validate():
            self._sync_buttons()
            return None
        spec, rounds = self._noise_spec(), self.controls.rounds.value
        self.noise_text.value = "measuring the noise floor…"
        text = (f"Measuring the noise floor: {spec.model} ({spec.size}) on {spec.backend} against itself, "
                f"{batch_text(spec)} × seq {spec.seq_len}, {rounds} round(s) …")
        return self._start(text, rounds, False, lambda stop: tc.noise_floor(spec, rounds=rounds,
                                                                            observer=self._observe, stop=stop),
                           self._show_noise_floor, "noise-floor run")

    def _elsewhere(self) -> bool:
        """Another tab holds the panel: said in the status line."""
        if self.controls.owner is None:
            return False
        self.status.value = f"<span style='color:#b00020'>{html.escape(self.controls.busy_text())}</span>"
        return True

    def _start(self, text: str, rounds: int, feed_figures: bool, job: Callable[[threading.Event], Any],
               done: Callable[[Any], None], what: str) -> threading.Thread | None:
        """Run ``job(stop_event)`` on a background thread with the controls locked; ``done(result)`` draws it."""
        self.progress.clear()
        self.export_message.value = ""
        self._log, self._jobs, self._compiler, self.log.value = [], {}, {}, ""
        self._rounds, self._feed_figures = rounds, feed_figures

        def claim() -> bool:   # already busy: this panel's own buttons show Stop, not "elsewhere"
            self.controls.claim(what)
            self.status.value = html.escape(text)
            self._sync_buttons()
            return True

        def finish(ending: str | None) -> None:
            self.controls.release()   # syncs every tab's buttons, this one's too
            if ending is not None:
                self.status.value = ending

        return self._bg.start(what, lambda stop: self._work(job, done, what, stop), finish=finish, claim=claim)

    def stop(self) -> None:
        """Stop the running work; what was measured is kept, the running job shows as interrupted."""
        if self._bg.stop():
            self.status.value = "Stopping… (the running job is being ended; its measured steps are kept)"

    def wait(self, timeout: float | None = None) -> Any:
        """Block until the running work ends; returns ``panel.comparison``."""
        self._bg.wait(timeout)
        return self.comparison

    def _work(self, job: Callable[[threading.Event], Any], done: Callable[[Any], None], what: str,
              stop: threading.Event) -> str:
        """Run the job and draw its result; the status line to show once the panel is released."""
        started = time.monotonic()
        result, error = None, ""
        try:
            result = job(stop)
        except Exception as exc:  # noqa: BLE001 - the panel stays usable whatever happens
            error = f"{type(exc).__name__}: {exc}"
        try:
            self.figures.flush(force=True)
            if result is not None:
                done(result)
        except Exception as exc:  # noqa: BLE001
            error = error or f"could not draw the result: {type(exc).__name__}: {exc}"
        took = time.monotonic() - started
        if error:
            return f"<span style='color:#b00020'>The {what} failed: {html.escape(error)}</span>"
        if stop.is_set():
            return f"Stopped after {took:.0f} s; the measured steps are shown and kept in the store."
        return f"<span class='tcb-done'>Done in {took:.0f} s.</span>"

    # -- observer events (on the background thread) -------------------------------------------------
    def _observe(self, event: Any) -> None:
        """The compare observer (``tc.events``); a drawing error never stops the jobs."""
        handlers = {tc.events.JobStarted: self._on_start, tc.events.PhaseChanged: self._on_phase,
                    tc.events.CompilerConfigured: self._on_compiler, tc.events.StepMeasured: self._on_step,
                    tc.events.JobEnded: self._on_end, tc.events.LogLine: self._on_log}
        try:
            handler = handlers.get(type(event))
            if handler is not None:
                handler(event, event.job, event.label or event.backend)
        except Exception as exc:  # noqa: BLE001
            self._add_log("panel", f"could not show event {type(event).__name__}: {type(exc).__name__}: {exc}")

    def _on_start(self, event: Any, job: str, _label: str) -> None:
        self._jobs[job] = (event.round, event.spec)
        budget_gb = event.spec.memory_budget_gb
        self.figures.set_budget(budget_gb * 1024 if budget_gb else None)
        self.progress.start(job, event.spec.steps)

    def _job_status(self, job: str, label: str, words: str) -> None:
        if self._bg.stopping:  # "Stopping…" stays until the work ends
            return
        rnd = self._jobs.get(job, (0, None))[0]
        compiler = self._compiler.get(job)
        of = f" of {self._rounds}" if self._rounds else ""     # 0: adaptive rounds, their number is known at the end
        self.status.value = (f"<b>{html.escape(label)}</b> · round {rnd + 1}{of} · "
                             f"<span class='tcb-phase'>{html.escape(words)}</span>"
                             + (f" · {html.escape(compiler)}" if compiler else ""))

    def _on_phase(self, event: Any, job: str, label: str) -> None:
        self._job_status(job, label, _PHASES.get(event.phase, f"{event.phase}…"))

    def _on_compiler(self, event: Any, job: str, label: str) -> None:
        settings = event.settings
        debug = "; debug report kept" if settings.debug else ""
        self._compiler[job] = (f"compiler {settings.backend} configured (mode {settings.mode}, "
                               f"{settings.precision}{debug})")
        self._job_status(job, label, "configuring…")

    def _on_step(self, event: Any, job: str, label: str) -> None:
        rec = event.record
        self.progress.step(job, rec)
        rnd, spec = self._jobs.get(job, (0, None))
        if self._feed_figures and rnd == 0 and spec is not None:  # the curves show round 1; bars every round
            # a script's own batch; a data-parallel job's samples/s is all its processes' (the global batch)
            batch = round(rec.samples_s * rec.step_s) if rec.samples_s else spec.global_batch
            self.figures.add_step(label, rec, batch, rnd)
            self.figures.flush()

    def _on_end(self, event: Any, job: str, label: str) -> None:
        result = event.result
        self.progress.end(job, result)
        if self._feed_figures:
            self.figures.set_result(label, result, result.spec.global_batch)
            self.figures.flush(force=True)

    def _on_log(self, event: Any, job: str, _label: str) -> None:
        self._add_log(job, event.line)

    def _add_log(self, job: str, line: str) -> None:
        self._log = (self._log + [f"[{job}] {line}" if job else line])[-200:]
        self.log.value = "<pre>" + html.escape("\n".join(self._log)) + "</pre>"

    # -- showing results -----------------------------------------------------------------------------
    def _show_stored_scaling(self, result: Any) -> None:
        self.parallel.show_stored(result)
        self.tabs.selected_index = 3   # the Data parallel tab

    def show(self, cmp: Any) -> None:
        """Draw a finished (or loaded) comparison: figures, summary table, verdicts, noise floor, failures."""
        self.comparison = cmp
        summary = cmp.summary()
        self.figures.load(cmp, budget_gb=cmp.spec.memory_budget_gb)   # the checked spec carries the profile's budget
        self.summary.value = tc.report.summary_table_html(summary) + diagnostics_html(cmp)
        self.words.value = words_html(summary) + (f"<div class='tcb-rounds-note'>{html.escape(cmp.rounds_note)}</div>"
                                                  if len(summary) > 1 else "")
        self.failures.value = failures_html(cmp.results)
        self._refresh_noise_floor()
        self._sync_buttons()

    def _show_noise_floor(self, nf: Any) -> None:
        self.noise_floor = nf
        text = noise_floor_text(tc.StoredNoiseFloor.from_summary(nf.summary(), time.time()))
        if self._bg.stopping:
            text += " — stopped before the end, so not kept as this machine's noise floor"
        self.noise_text.value = html.escape(text)

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
