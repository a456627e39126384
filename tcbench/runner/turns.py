"""Lock-step rounds: the jobs of one round stay alive together and take turns, a block of measured steps each, on the
same CPUs, so that every block of one job is measured next to a block of the other (a fraction of a second apart)
and the speed a shared machine gives both at that moment is common to both.

Randomized multiple interleaved trials (Abedi and Brecht, ICPE 2017) interleave whole trials; here the trials are
blocks of steps in processes that stay alive, as the in-process interleaving measured before was biased by cache
interference (12-16 %: DESIGN's facts) and separate processes keep their caches, compile state and memory apart.
The warmup (compile) runs unpaired: a job that reaches its first turn waits for the others to reach theirs, and the
turns go round in the round's order. A job that ends, whichever way, is skipped from then on.

The job side is ``tcbench.job.process_tools.TurnGate``: before each block it sends a ``Turn`` message and waits for
one byte on a FIFO in its run folder, which the runner holds open for writing. ``Turns`` here is the runner's side,
shared by the threads that wait on the round's jobs (``tcbench.runner.process.run(turns=...)``).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from tcbench.job.process_tools import TURNS_ENV

BLOCK = 5   # measured steps per turn: short enough to pair closely, long enough that the switch is a small part


class Turns:
    """The turns of one lock-step round's jobs, in ``order`` (their names as the runner knows them)."""

    def __init__(self, order: list[str], block: int = BLOCK) -> None:
        if isinstance(block, bool) or not isinstance(block, int) or block < 1:
            raise ValueError(f"block={block!r} is not allowed; it must be a whole number of steps, at least 1")
        self.order, self.block = list(order), block
        self._lock = threading.Lock()
        self._fds: dict[str, int] = {}
        self._waiting: set[str] = set()
        self._done: set[str] = set()
        self._running: str | None = None
        self._started = False
        self._next_index = 0
        self.turns = 0   # turns given so far

    def attach(self, job: str, run_dir: Path) -> dict[str, str]:
        """Make ``job``'s FIFO in its run folder and open it for writing; the job's environment entry for it."""
        path = run_dir / "turns.fifo"
        os.mkfifo(path, 0o600)
        fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)   # read-write: never waits for the job to open it
        with self._lock:
            self._fds[job] = fd
        return {TURNS_ENV: f"{path}:{self.block}"}

    def arrived(self, job: str, waits: bool) -> None:
        """``job`` ended a block (its ``Turn`` message); ``waits``: for its next turn, else it has no more steps."""
        with self._lock:
            if self._running == job:
                self._running = None
            (self._waiting if waits else self._done).add(job)
            self._give()

    def ended(self, job: str, run_dir: Path | None = None) -> None:
        """``job``'s process has ended (however): it takes no more turns; its FIFO is closed and removed."""
        with self._lock:
            self._done.add(job)
            self._waiting.discard(job)
            if self._running == job:
                self._running = None
            fd = self._fds.pop(job, None)
            self._give()
        if fd is not None:
            os.close(fd)
        if run_dir is not None:
            try:
                (run_dir / "turns.fifo").unlink()
            except FileNotFoundError:
                pass

    @property
    def started(self) -> bool:
        """Whether the turns have begun: every live job reached its first turn (its compile done)."""
        with self._lock:
            return self._started

    def waiting(self, job: str) -> bool:
        """Whether ``job`` is waiting for its turn (its silence is then not a stall)."""
        with self._lock:
            return job in self._waiting

    def _give(self) -> None:
        """The next turn, if nobody runs: once every live job has reached its first turn, to the next one in order."""
        if self._running is not None:
            return
        live = [j for j in self.order if j not in self._done]
        if not live or (not self._started and not all(j in self._waiting for j in live)):
            return
        self._started = True
        for i in range(len(self.order)):
            job = self.order[(self._next_index + i) % len(self.order)]
            if job in self._waiting:
                self._next_index = (self.order.index(job) + 1) % len(self.order)
                self._waiting.discard(job)
                self._running = job
                self.turns += 1
                os.write(self._fds[job], b"t")
                return
