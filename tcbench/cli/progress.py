"""The terminal's view of running jobs: a tqdm bar per job on stderr, one summary line when it ends.

Used as the observer of ``tc.run`` / ``tc.compare`` / ``tc.noise_floor`` by ``tcbench run``, ``compare`` and
``noise-floor``. When stderr is not a terminal (CI, pipes) it prints a plain line per phase change and a
heartbeat during long phases instead (a 60 s compile is one step: without it nothing would move).
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from typing import Any, TextIO

from tqdm import tqdm

from tcbench.core.events import Event, JobEnded, JobEvent, JobStarted, LogLine, PhaseChanged, StepMeasured

HEARTBEAT_S = 30.0   # plain mode: a line when a job has said nothing for this long
_REFRESH_S = 1.0     # terminal mode: the bars' elapsed time ticks even while one step takes a minute


def _size(file: TextIO) -> dict[str, Any]:
    """tqdm's size arguments: follow the terminal, or a fixed size where it reports 0 columns or rows (a bare
    pty: tqdm would hide every bar there)."""
    try:
        size = os.get_terminal_size(file.fileno())
    except (OSError, ValueError, AttributeError):
        size = os.terminal_size((0, 0))
    if size.columns and size.lines:
        return {"dynamic_ncols": True}
    fallback = shutil.get_terminal_size()
    return {"ncols": size.columns or fallback.columns, "nrows": size.lines or fallback.lines}


def _last_line(text: str, limit: int = 200) -> str:
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1][:limit] if lines else ""


def end_line(result: Any) -> str:
    """One line for a finished job: status, median step ± IQR, throughput, why it is noisy or failed."""
    parts = [result.status]
    if result.median_step_s is not None:
        iqr = "" if result.step_iqr_s is None else f" ± {result.step_iqr_s * 1e3:.1f} ms IQR"
        parts.append(f"median step {result.median_step_s * 1e3:.1f} ms{iqr}, {result.samples_s:,.1f} samples/s")
    if result.noisy:
        parts.append(f"noisy: {result.noise_reason}")
    if result.error:
        parts.append(_last_line(result.error))
    return " — ".join(parts)


class Progress:
    """Observer: one bar per job (phase in its description, steps done / total, ETA), closed with a summary line.

    Use it as a context manager around the call it observes (it runs a small ticker thread)."""

    def __init__(self, rounds: int = 1, file: TextIO | None = None, tty: bool | None = None) -> None:
        self.rounds = rounds
        self.file = file or sys.stderr
        self.tty = bool(getattr(self.file, "isatty", lambda: False)()) if tty is None else tty
        self.jobs: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, name="tcbench-progress", daemon=True)

    def __enter__(self) -> "Progress":
        self._ticker.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._ticker.join()
        with self._lock:
            for job in self.jobs.values():
                if job["bar"] is not None:
                    job["bar"].close()

    def __call__(self, event: Event) -> None:
        handler = self._handlers.get(type(event))
        if handler is not None:
            with self._lock:
                handler(self, event)

    # -- events ----------------------------------------------------------------------------------------
    def _on_start(self, event: JobEvent, rnd: int | None = 0, total: int | None = None) -> None:
        """A job's bar; ``rnd`` and ``total`` from its JobStarted (another event before its start is still
        shown, without them; ``rnd`` None: a job of no comparison, never "round 1/3")."""
        name = event.label or event.backend
        if rnd is not None and self.rounds > 1 and rnd < self.rounds:
            name += f" round {rnd + 1}/{self.rounds}"
        elif rnd is not None and (self.rounds == 0 or rnd >= max(self.rounds, 1)):
            # adaptive rounds (their number is known at the end), or a job numbered past the total this progress
            # was given (a study's searches number their own trials): never "round 5/3"
            name += f" round {rnd + 1}"
        now = time.monotonic()
        job = dict(name=name, total=total, done=0, phase="starting", phase_t=now, phase_done=0, said_t=now, bar=None)
        self.jobs[event.job] = job
        if self.tty:
            job["bar"] = tqdm(total=total, desc=f"{name}: starting", unit="step", file=self.file, leave=False,
                              **_size(self.file))
        else:
            self._say(job, f"starting (run {event.run_id}, {total} steps)")

    def _on_started(self, event: JobStarted) -> None:
        self._on_start(event, None if event.alone else event.round, event.spec.steps)

    def _on_phase(self, event: PhaseChanged) -> None:
        job = self._job(event)
        job.update(phase=event.phase, phase_t=time.monotonic(), phase_done=job["done"])
        if job["bar"] is not None:
            job["bar"].set_description_str(f"{job['name']}: {event.phase}")
        else:
            self._say(job, f"{event.phase} (step {job['done']}/{job['total']})")

    def _on_step(self, event: StepMeasured) -> None:
        job, rec = self._job(event), event.record
        job["done"] = rec.step + 1
        if job["bar"] is not None:
            job["bar"].set_postfix_str(f"{rec.step_s * 1e3:,.1f} ms/step", refresh=False)
            job["bar"].update(job["done"] - job["bar"].n)

    def _on_log(self, event: LogLine) -> None:
        tqdm.write(str(event.line), file=sys.stdout)

    def _on_end(self, event: JobEnded) -> None:
        job = self._job(event)
        if job["bar"] is not None:
            job["bar"].close()
            job["bar"] = None
        job["phase"] = "ended"
        self._say(job, end_line(event.result))

    _handlers = {JobStarted: _on_started, PhaseChanged: _on_phase, StepMeasured: _on_step, LogLine: _on_log,
                 JobEnded: _on_end}

    # -- helpers ---------------------------------------------------------------------------------------
    def _job(self, event: JobEvent) -> dict[str, Any]:
        if event.job not in self.jobs:   # an event before its start: still shown
            self._on_start(event)
        return self.jobs[event.job]

    def _say(self, job: dict[str, Any], text: str) -> None:
        job["said_t"] = time.monotonic()
        tqdm.write(f"[tcbench] {job['name']}: {text}", file=self.file)

    def _eta(self, job: dict[str, Any], now: float) -> str:
        steps = job["done"] - job["phase_done"]
        if not steps or not job["total"]:
            return ""
        return f", ETA {(job['total'] - job['done']) * (now - job['phase_t']) / steps:.0f} s"

    def _tick(self) -> None:
        while not self._stop.wait(_REFRESH_S):
            with self._lock:
                now = time.monotonic()
                for job in self.jobs.values():
                    if job["bar"] is not None:
                        job["bar"].refresh()
                    elif not self.tty and job["phase"] != "ended" and now - job["said_t"] >= HEARTBEAT_S:
                        self._heartbeat(job, now)

    def _heartbeat(self, job: dict[str, Any], now: float) -> None:
        self._say(job, f"still {job['phase']}: {now - job['phase_t']:.0f} s in this phase, "
                       f"step {job['done']}/{job['total']}{self._eta(job, now)}")
