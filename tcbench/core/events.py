"""What an observer hears: one frozen dataclass per kind of event, dispatched on its type (``isinstance``, or a dict
keyed by the class), never on a string.

Every job run by ``tc.run``, ``tc.compare`` and the studies built on them tells its observer, in order:
``JobStarted``, then ``PhaseChanged``, ``CompilerConfigured``, ``StepMeasured`` and ``LogLine`` as its process
sends them (``tcbench.job.protocol``'s messages, turned into events by ``tcbench.runner.inbox``), and
``JobEnded`` with its ``JobResult``, however it ended. Each carries the job's names (``JobEvent``).

The studies add their own, between their jobs' events: ``BatchProbed`` (``find_max_batch``), ``LrPredicted``,
``TrialEnded`` and ``FinalistEnded`` (``predict_lr``, ``retune_lr``), ``CompileTrialStarted`` and
``CompileTrialEnded`` (``tune_compile``). Workers in other processes send theirs back pickled: every event is plain
data.

    def observer(event):
        if isinstance(event, tc.events.PhaseChanged):
            print(event.job, event.phase)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Union

from tcbench.core.extras import CompilerSettings
from tcbench.core.results import JobResult, StepRecord
from tcbench.core.spec import JobSpec


# -- a job's events (the runner's) ------------------------------------------------------------------------------
@dataclass(frozen=True)
class JobEvent:
    """Which job an event is about: ``job`` its name in the comparison ("inductor#0": label or backend, round),
    ``label`` its label (the backend's name where it has none), ``run_id`` its row in the store."""

    job: str
    backend: str
    label: str
    run_id: int | None


@dataclass(frozen=True)
class JobStarted(JobEvent):
    """The job's run is stored and its process is about to start: ``round`` of its comparison, its ``spec``;
    ``alone``: a job of no comparison (``tc.run``, a noise-scale job), which has no round."""

    round: int
    spec: JobSpec
    alone: bool = False


@dataclass(frozen=True)
class PhaseChanged(JobEvent):
    """The job entered a phase: "loading", "compiling", "warmup", "measuring", "evaluating", ..."""

    phase: str


@dataclass(frozen=True)
class CompilerConfigured(JobEvent):
    """The job's compiler is set up (what SageMaker Training Compiler's "Found configuration" line said)."""

    settings: CompilerSettings


@dataclass(frozen=True)
class StepMeasured(JobEvent):
    """One training step as the job measured it."""

    record: StepRecord


@dataclass(frozen=True)
class LogLine(JobEvent):
    """A line the job wrote (its own output, or tcbench's ``[tcbench] ...`` notes)."""

    line: str


@dataclass(frozen=True)
class JobEnded(JobEvent):
    """The job ended, whichever way (``result.status``): its result is stored."""

    result: JobResult


# -- the studies' events -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BatchProbed:
    """``find_max_batch`` tried ``batch_size`` on ``backend``: it ``fits`` or not (``status``, ``reason``), with the
    probe job's figures; ``reused``: answered from the study's earlier probe, no job run."""

    backend: str
    batch_size: int
    status: str
    fits: bool
    peak_mem_mb: float | None
    samples_s: float | None
    wall_s: float | None
    run_id: int | None
    reason: str
    reused: bool


@dataclass(frozen=True)
class LrPredicted:
    """The noise-scale prediction of the learning rate at the new batch: ``lr`` in [``low``, ``high``], the noise
    scale ``b_noise`` it came from, and ``text``, the prediction described."""

    lr: float
    low: float
    high: float
    b_noise: float
    text: str


@dataclass(frozen=True)
class TrialEnded:
    """A learning-rate trial ended: its job's ``status``, ``pruned`` by the pruner or not, its held-out loss."""

    number: int
    lr: float
    status: str
    pruned: bool
    eval_loss: float | None


@dataclass(frozen=True)
class FinalistEnded:
    """One seed of a finalist learning rate ended (``retune_lr``'s confirmation of its best trials)."""

    number: int
    lr: float
    seed: int
    status: str
    eval_loss: float | None


@dataclass(frozen=True)
class CompileTrialStarted:
    """``tune_compile`` starts trial ``number``, a compile configuration (``label``)."""

    number: int
    label: str


@dataclass(frozen=True)
class CompileTrialEnded:
    """``tune_compile``'s trial ``number`` ended: ``status`` "ok", "pruned", "failed", "interrupted", ..."""

    number: int
    label: str
    status: str


Event = Union[JobStarted, PhaseChanged, CompilerConfigured, StepMeasured, LogLine, JobEnded, BatchProbed,
              LrPredicted, TrialEnded, FinalistEnded, CompileTrialStarted, CompileTrialEnded]
Observer = Callable[[Event], None]
