"""The job protocol: what a job's process tells the runner, one typed message per kind, one JSON line each.

Senders (``tcbench.job.worker``, ``tcbench.job.track`` and through it ``tcbench.hf``, ``tcbench.job.launch``)
build these dataclasses and write them through a ``Channel``; the runner (``tcbench.runner.process``) reads
lines, ``decode``s them and dispatches on the message's type. On the wire a message is one JSON object with
its kind under ``"type"`` and its fields beside it (``{"type": "phase", "phase": "measuring"}``); a field marked
optional is left out while it is None.

Kinds, in the order a job sends them: ``phase`` (what it is doing: the stall clock's words), ``log`` (a line for
the caller), ``compiler`` (the compiled backend's announcement), ``parallel`` (a data-parallel job's process
group), ``meta`` (after model and data load), ``eval`` (held-out losses, before training and after it), ``step``
(one per optimizer step), ``counters`` and ``compile_times`` (after warmup), ``sched`` (the steady steps' CPU and
run-queue time), ``end`` (how it ended; a data-parallel rank other than the reporting one sends its ``end`` alone,
with ``rank``).

Imports only the standard library and ``tcbench.core``: both sides of the pipe share it. A message that carries a
record the result keeps extends it (``Step``: ``StepRecord``; ``CompileTimes``, ``Compiler``, ``Sched``: the records of
``tcbench.core.extras``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from dataclasses import dataclass
from typing import ClassVar, Union

from tcbench.core.extras import CompilePhases, CompilerSettings, SchedTimes, optional_field
from tcbench.core.results import StepRecord


@dataclass(frozen=True)
class Log:
    """A line for the caller's observer (the job's own stdout goes to its log file)."""

    kind: ClassVar[str] = "log"
    line: str


@dataclass(frozen=True)
class Phase:
    """What the job is doing now: loading, eval, compiling, warmup, measuring, waiting for nodes, ..."""

    kind: ClassVar[str] = "phase"
    phase: str


@dataclass(frozen=True)
class Compiler(CompilerSettings):
    """A compiled backend's configuration (``CompilerSettings``' fields), announced once before training."""

    kind: ClassVar[str] = "compiler"

    def settings(self) -> CompilerSettings:
        return CompilerSettings(**{f.name: getattr(self, f.name) for f in dataclasses.fields(CompilerSettings)})


@dataclass(frozen=True)
class Parallel:
    """A data-parallel job's process group, once joined."""

    kind: ClassVar[str] = "parallel"
    world_size: int
    backend: str
    local_world_size: int


@dataclass(frozen=True)
class Meta:
    """The job's model and device, after model and data are loaded."""

    kind: ClassVar[str] = "meta"
    n_params: int | None
    flops_per_step: float | None
    device: str
    task: str
    threads: int | None
    env: dict
    mem_baseline_bytes: int
    tokenizer: str | None = optional_field()   # where the tokenizer came from (tcbench's worker on text data)


@dataclass(frozen=True)
class Step(StepRecord):
    """One optimizer step: a ``StepRecord`` (its fields, inherited), and on a data-parallel job its gradient
    all-reduce."""

    kind: ClassVar[str] = "step"
    allreduce_bytes: int | None = optional_field()   # rank 0's view of this step's all-reduce
    allreduce_s: float | None = optional_field()
    buckets: int | None = optional_field()

    def record(self) -> StepRecord:
        return StepRecord(**{f.name: getattr(self, f.name) for f in dataclasses.fields(StepRecord)})


@dataclass(frozen=True)
class Counters:
    """The backend's counters (compiles, graph breaks, ...) at a point of the run (``after_warmup``)."""

    kind: ClassVar[str] = "counters"
    when: str
    counters: dict


@dataclass(frozen=True)
class CompileTimes(CompilePhases):
    """Where a compiled job's compile time went by the end of its warmup (``CompilePhases``' fields), once."""

    kind: ClassVar[str] = "compile_times"

    def phases(self) -> CompilePhases:
        return CompilePhases(**{f.name: getattr(self, f.name) for f in dataclasses.fields(CompilePhases)})


@dataclass(frozen=True)
class Eval:
    """The held-out loss, its mean and per batch; ``when``: ``initial`` (before the first step), ``final``, or
    ``during`` (every ``eval_every`` steps: after ``steps`` steps and ``samples`` samples, ``wall_s`` seconds after
    training began (at the first step: compiling included, loading the model and data not), the evaluations' own time
    left out)."""

    kind: ClassVar[str] = "eval"
    eval_loss: float
    losses: list | None = None
    when: str = "final"
    steps: int | None = None
    samples: int | None = None
    wall_s: float | None = None
    eval_s: float | None = None   # ``during``: the evaluations' own seconds so far, this one included


@dataclass(frozen=True)
class Sched(SchedTimes):
    """Over the steady steps: wall, CPU and run-queue wait seconds and the steal share (``SchedTimes``' fields)."""

    kind: ClassVar[str] = "sched"

    def times(self) -> SchedTimes:
        return SchedTimes(**{f.name: getattr(self, f.name) for f in dataclasses.fields(SchedTimes)})


@dataclass(frozen=True)
class Turn:
    """Lock-step rounds (``tcbench.runner.turns``): the job ended a block of measured steps at ``step`` (the next step
    it will run); ``waits``: it now waits for its next turn (False: it has run its last step)."""

    kind: ClassVar[str] = "turn"
    step: int
    waits: bool = True


@dataclass(frozen=True)
class End:
    """How the job ended (its one last message); ``rank``: sent by another rank of a data-parallel job."""

    kind: ClassVar[str] = "end"
    status: str
    error: str = ""
    counters: dict | None = optional_field()
    diagnostics: dict | None = optional_field()   # graph breaks, recompiles, fallbacks, host transfers
    noise: list | None = optional_field()         # per-step micro-batch gradient norms (noise_micro_batches > 1)
    traceback: str | None = optional_field()
    rank: int | None = optional_field()


Message = Union[Log, Phase, Compiler, Parallel, Meta, Step, Counters, CompileTimes, Eval, Sched, Turn, End]
MESSAGES: tuple[type, ...] = (Log, Phase, Compiler, Parallel, Meta, Step, Counters, CompileTimes, Eval, Sched, Turn,
                              End)
KINDS: dict[str, type] = {cls.kind: cls for cls in MESSAGES}


def encode(msg: Message) -> str:
    """One JSON line (newline included): the message's kind under ``"type"``, then its fields."""
    if type(msg) not in MESSAGES:
        raise ValueError(f"not a job message: {msg!r}")
    payload = {f.name: getattr(msg, f.name) for f in dataclasses.fields(msg)
               if not (f.metadata.get("optional") and getattr(msg, f.name) is None)}
    return json.dumps({"type": msg.kind, **payload}) + "\n"


def decode(line: str | bytes) -> Message:
    """The message on one line; a ValueError names what is wrong (not JSON, an unknown kind, a missing or an
    unknown field)."""
    data = json.loads(line)   # json.JSONDecodeError is a ValueError
    if not isinstance(data, dict):
        raise ValueError(f"a job message is a JSON object, not {type(data).__name__}")
    kind = data.pop("type", None)
    cls = KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ValueError(f"unknown job message kind {kind!r} (known: {', '.join(KINDS)})")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ValueError(f"a {kind!r} message has no field {unknown[0]!r} (its fields: {', '.join(fields)})")
    missing = [n for n, f in fields.items() if n not in data and f.default is dataclasses.MISSING]
    if missing:
        raise ValueError(f"a {kind!r} message lacks its field {missing[0]!r}")
    return cls(**data)


class Channel:
    """Messages to the parent, one encoded line each. Step records are sent in small batches (at most FLUSH_S
    late): a wake-up of the parent on every step steals a core from this job's OpenMP threads on a small machine.
    A background thread flushes what waits longer than FLUSH_S, so a job that hangs after a step (a user's
    script in a ``sleep``, a deadlock) has still delivered every step it measured.

    Lines are written whole, in ``write()`` calls of at most PIPE_BUF bytes: the data-parallel processes of one
    job share a FIFO, and the kernel keeps such writes from interleaving. In a data-parallel job only the
    machine's first process (LOCAL_RANK 0; rank 0 on one machine) reports; the other ranks send their ``End``
    alone (with ``rank``), so the parent learns which one failed."""

    FLUSH_S = 0.25
    PIPE_BUF = 4096

    def __init__(self, fd: int, rank: int = 0, reports: bool | None = None) -> None:
        self._fd, self.rank = fd, rank
        self.reports = rank == 0 if reports is None else reports   # this machine's first process reports
        self._lines: list[bytes] = []
        self._last = time.monotonic()
        self._lock = threading.Lock()
        self._closed = False
        self._flusher: threading.Thread | None = None

    def send(self, msg: Message) -> None:
        if not self.reports:
            if not isinstance(msg, End):
                return
            msg = dataclasses.replace(msg, rank=self.rank)
        line = encode(msg).encode()
        with self._lock:
            self._lines.append(line)
            now = time.monotonic()
            if not isinstance(msg, Step) or now - self._last >= self.FLUSH_S:
                self._flush_locked(now)
            elif self._flusher is None:
                self._flusher = threading.Thread(target=self._flush_late, daemon=True, name="tcbench-flush")
                self._flusher.start()

    def flush(self) -> None:
        with self._lock:
            self._flush_locked(time.monotonic())

    def close(self) -> None:
        with self._lock:
            self._flush_locked(time.monotonic())
            self._closed = True
            os.close(self._fd)

    def _flush_locked(self, now: float) -> None:
        """Lines leave ``_lines`` as soon as their write returns: a KeyboardInterrupt (SIGINT) raised between
        two writes neither sends a line twice when the job's ``end`` flushes again nor drops one."""
        self._last = now
        try:
            while self._lines:
                n, size = 1, len(self._lines[0])
                while n < len(self._lines) and size + len(self._lines[n]) <= self.PIPE_BUF:
                    size += len(self._lines[n])
                    n += 1
                chunk = b"".join(self._lines[:n])
                while chunk:   # a pipe takes a write <= PIPE_BUF whole; a longer single line is split
                    chunk = chunk[os.write(self._fd, chunk):]
                del self._lines[:n]
        except OSError:   # the parent is gone, or the channel closed: nobody to tell
            self._lines = []

    def _flush_late(self) -> None:
        while not self._closed:
            time.sleep(self.FLUSH_S)
            with self._lock:
                if self._lines and not self._closed and time.monotonic() - self._last >= self.FLUSH_S:
                    self._flush_locked(time.monotonic())
