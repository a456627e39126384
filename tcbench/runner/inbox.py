"""What each of the job's messages (``tcbench.job.protocol``) changes in its JobResult, and what the caller's
observer hears of it (``tcbench.core.events``): one handler per message type. The job's own ``End`` is handed back
to the runner, which decides how the job ended (``tcbench.runner.ending``)."""

from __future__ import annotations

from typing import Callable

from tcbench.core.events import CompilerConfigured, JobEvent, LogLine, Observer, PhaseChanged, StepMeasured
from tcbench.core.extras import EvalPoint, RankEnd
from tcbench.core.results import JobResult, StepRecord
from tcbench.job.protocol import (CompileTimes, Compiler, Counters, End, Eval, Log, Message, Meta, Parallel, Phase,
                                  Sched, Step, Turn)
from tcbench.measure.job import standard_error

Tell = Callable[..., None]   # tell(EventClass, **fields): an event for the observer, with the job's names


def handle(msg: Message, result: JobResult, pending: list[StepRecord], notify: Observer, job: str) -> End | None:
    """Apply one message to ``result`` (a new step also goes to ``pending``, the steps on their way to the store);
    returns the job's own ``End``, None for anything else (another rank's ``End`` included)."""

    def tell(kind: type[JobEvent], **fields) -> None:
        notify(kind(job=job, backend=result.spec.backend, label=result.name, run_id=result.run_id, **fields))

    return HANDLERS[type(msg)](msg, result, pending, tell)


def _step(msg: Step, result: JobResult, pending: list, tell: Tell) -> None:
    rec = msg.record()
    if result.records and rec.step <= result.records[-1].step:
        return   # sent again (a job interrupted in its write re-sends on the way out): steps only grow
    result.records.append(rec)
    pending.append(rec)
    if msg.allreduce_bytes is not None:   # data parallel: this step's gradient all-reduce (rank 0's view)
        result.extra.allreduce_steps.append([msg.step, msg.allreduce_bytes, msg.allreduce_s, msg.buckets])
    tell(StepMeasured, record=rec)


def _parallel(msg: Parallel, result: JobResult, pending: list, tell: Tell) -> None:
    result.extra.world_size, result.extra.dist_backend = msg.world_size, msg.backend


def _meta(msg: Meta, result: JobResult, pending: list, tell: Tell) -> None:
    result.device = msg.device
    result.extra.n_params, result.extra.flops_per_step = msg.n_params, msg.flops_per_step
    result.extra.tokenizer = msg.tokenizer or ""
    result.env.update(msg.env or {}, threads=result.env.get("threads") if msg.threads is None else msg.threads)


def _phase(msg: Phase, result: JobResult, pending: list, tell: Tell) -> None:
    result.extra.phase = msg.phase
    tell(PhaseChanged, phase=msg.phase)


def _compiler(msg: Compiler, result: JobResult, pending: list, tell: Tell) -> None:
    result.extra.compiler = msg.settings()
    tell(CompilerConfigured, settings=result.extra.compiler)


def _sched(msg: Sched, result: JobResult, pending: list, tell: Tell) -> None:
    result.extra.sched = msg.times()
    if msg.cpus is not None:
        result.env["cpus"] = list(msg.cpus)   # stored with the run's environment: where its steady steps ran


def _counters(msg: Counters, result: JobResult, pending: list, tell: Tell) -> None:
    result.extra.counters_after_warmup = msg.counters


def _compile_times(msg: CompileTimes, result: JobResult, pending: list, tell: Tell) -> None:
    """Where the compile time went: figures of the job (``CompilePhases``' fields), set with the others at its end."""
    result.extra.compile_phases = msg.phases()


def _eval(msg: Eval, result: JobResult, pending: list, tell: Tell) -> None:
    """The held-out loss per batch; ``initial``: before the first step (did it learn?); ``during``: a point of the
    curve every ``eval_every`` steps (its mean only)."""
    losses = [float(x) for x in msg.losses or [msg.eval_loss]]
    se = standard_error(losses)
    if msg.when == "during":
        result.extra.eval_curve.append(EvalPoint(steps=msg.steps, samples=msg.samples, wall_s=msg.wall_s,
                                                 loss=msg.eval_loss, eval_s=msg.eval_s or 0.0))
        return
    if msg.when == "initial":
        result.extra.eval_loss_initial, result.extra.eval_losses_initial = msg.eval_loss, losses
        result.extra.eval_loss_initial_se = se
    else:
        result.extra.eval_loss, result.extra.eval_losses, result.extra.eval_loss_se = msg.eval_loss, losses, se


def _log(msg: Log, result: JobResult, pending: list, tell: Tell) -> None:
    tell(LogLine, line=msg.line)


def _end(msg: End, result: JobResult, pending: list, tell: Tell) -> End | None:
    if msg.rank:   # another rank of a data-parallel job: kept, not the job's end
        result.extra.rank_ends[str(msg.rank)] = RankEnd(msg.status, msg.error)
        return None
    return msg


def _turn(msg: Turn, result: JobResult, pending: list, tell: Tell) -> None:
    result.extra.turns += msg.waits   # a lock-step job's turns (the runner's ``Turns`` gave them)


HANDLERS: dict[type, Callable[..., End | None]] = {
    Step: _step, Parallel: _parallel, Meta: _meta, Phase: _phase, Compiler: _compiler, Sched: _sched,
    Counters: _counters, CompileTimes: _compile_times, Eval: _eval, Log: _log, Turn: _turn, End: _end}
