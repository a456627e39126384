"""The Optuna study behind ``retune_lr``: sampler and pruner, the objective (one job per trial), the loop that runs
trials until enough count, and the trials as a table. Shared by ``retune`` (the call that creates or resumes a study)
and ``workers`` (processes that join one); it imports neither.

Optuna is only ever reached through its public API: a trial's storage id comes from the storage the caller opened
(``trial_id``), never from ``trial._trial_id`` or ``study._storage``.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import pandas as pd

from tcbench.core.events import Event, Observer, StepMeasured, TrialEnded
from tcbench.core.extras import JobExtras
from tcbench.core.spec import JobSpec
from tcbench.runner.session import Either
from tcbench.tuning.storage import BEAT_ATTR, fail_stale, heartbeat_on, lost_reasons

TRIAL_COLUMNS = ["number", "lr", "value", "value_se", "learned", "state", "rule", "status", "steps_run", "duration_s",
                 "run_id", "reason"]
SAMPLERS = ("auto", "gp", "tpe", "random")
PRUNERS = ("halving", "median", "none")
PROMOTED_ATTR = "tcbench:promoted"      # a trial that went on past the rung (system attr, counted by every worker)
PRUNE_REASON_ATTR = "tcbench:prune_reason"


@dataclass(frozen=True)
class StudyContext:
    """What every trial of a study needs: its job's batch, steps and lr range, when it reports and may be pruned,
    where its runs are stored and its events go, and the storage the study lives in."""

    low: float                            # the lr range searched (log-uniform)
    high: float
    new_batch: int                        # each trial's batch
    steps: int                            # each trial's training steps
    eval_batches: int
    report_every: int                     # the training loss is reported every this many steps
    first_rung: int                       # ... and at this step (successive halving's one decision)
    last_prune_step: int                  # no trial is pruned after this step (``prune_until``)
    store: Any                            # tcbench's Store: every trial is a run of the comparison below
    comparison_id: int | None
    observer: Observer
    storage: Any                          # the Optuna storage the study lives in, as the caller opened it
    heartbeat: bool                       # the storage records heartbeats (``storage.heartbeat_on``)
    stop: Any = None                      # the user's stop event
    claim: Any = None                     # ``workers.Claim`` shared by the processes on the study, or None
    lost: threading.Event = field(default_factory=threading.Event)   # set: another process failed our trial


def study_id(storage: Any, study: Any) -> int:
    """The storage's id of ``study``."""
    return storage.get_study_id_from_name(study.study_name)


def trial_id(storage: Any, study_name: str, number: int) -> int:
    """The storage's id of trial ``number`` of the study ``study_name``."""
    return storage.get_trial_id_from_study_id_trial_number(storage.get_study_id_from_name(study_name), number)


# -- sampler and pruner -----------------------------------------------------------------------------------
def sampler_name(sampler: Any, n_trials: int) -> str:
    """'auto' is Optuna's GPSampler (a Gaussian process: few trials, one dimension) up to 20 trials, else TPE."""
    if sampler == "auto":
        import importlib.util

        return "gp" if n_trials <= 20 and importlib.util.find_spec("scipy") is not None else "tpe"
    return sampler


def make_sampler(sampler: Any, seed: int, n_trials: int):
    import optuna

    if not isinstance(sampler, str):
        return sampler
    name = sampler_name(sampler, n_trials)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=min(4, max(n_trials - 1, 1)))
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=min(4, max(n_trials - 1, 1)))
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise ValueError(f"sampler={sampler!r} is not allowed; use {', '.join(map(repr, SAMPLERS))} or an optuna sampler")


def min_resource(steps: int) -> int:
    """The first rung of successive halving: a third of the trial's steps (at least 2). Judged earlier, the ranking
    follows how fast a rate falls at first rather than where it ends (the short-horizon bias, Wu et al. 2018)."""
    return max(2, steps // 3)


def prune_until(pruner: Any, steps: int) -> int:
    """The last step at which a trial may be pruned: successive halving's one rung (its next, three times the
    first, would fall at the end), all of the steps for any other pruner."""
    return min_resource(steps) if pruner == "halving" else steps


def full_trials(n_trials: int) -> int:
    """How many of ``n_trials`` may train past successive halving's rung: a third (reduction factor 3), at least
    two (the first trial — the prediction — and one challenger)."""
    return max(2, -(-n_trials // 3))


class BudgetedHalving:
    """Successive halving with its budget fixed in advance (see ``retune``'s docstring, "Pruning"); an Optuna pruner.

    ``rung``: the step of the one decision; ``n_trials``: the study's size, of which ``full_trials(n_trials)`` may go
    on past the rung; ``storage``: the Optuna storage the study lives in (``retune_lr`` sets it when None). A trial
    that goes on is marked in the study (``PROMOTED_ATTR``), so workers sharing a study count the same promotions; a
    trial the user stopped or whose process died does not use one up. Workers reaching the rung at the same moment
    may each take the last place (at most one extra full trial per worker)."""

    eta = 3   # the reduction factor: the best third goes on

    def __init__(self, rung: int, n_trials: int, storage: Any = None) -> None:
        self.rung, self.n_trials, self.cap, self.storage = rung, n_trials, full_trials(n_trials), storage

    def prune(self, study: Any, trial: Any) -> bool:
        from optuna.trial import TrialState

        if trial.last_step != self.rung:
            return False   # one decision, at the rung
        value = trial.intermediate_values[self.rung]
        others = [t for t in study.get_trials(deepcopy=False) if t.number != trial.number
                  and (t.state == TrialState.RUNNING or counts(t))]
        values = sorted([t.intermediate_values[self.rung] for t in others if self.rung in t.intermediate_values]
                        + [value])
        bar = values[max(len(values) // self.eta - 1, 0)]
        went_on = sum(1 for t in others if t.system_attrs.get(PROMOTED_ATTR) or t.state == TrialState.COMPLETE)
        why = None
        if value > bar:
            why = (f"its training loss there ({value:.4g}) was not among the best third of the {len(values)} trials "
                   f"that reached it (the best so far while fewer than six have: {bar:.4g})")
        elif went_on >= self.cap:
            why = (f"its training loss there ({value:.4g}) ranked high enough, but the {self.cap} of the "
                   f"{self.n_trials} trials that may train past it had gone on already")
        self.storage.set_trial_system_attr(trial_id(self.storage, study.study_name, trial.number),
                                           PRUNE_REASON_ATTR if why else PROMOTED_ATTR, why or True)
        return why is not None


def make_pruner(pruner: Any, steps: int, n_trials: int, storage: Any):
    """'halving': :class:`BudgetedHalving` at a third of the steps; 'median': after two trials, from half the
    steps on, stop trials worse than the median; 'none'. ``storage``: the one the study lives in."""
    import optuna

    if isinstance(pruner, BudgetedHalving) and pruner.storage is None:
        pruner.storage = storage
    if not isinstance(pruner, str):
        return pruner
    if pruner == "halving":
        return BudgetedHalving(min_resource(steps), n_trials, storage)
    if pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=steps // 2)
    if pruner == "none":
        return optuna.pruners.NopPruner()
    raise ValueError(f"pruner={pruner!r} is not allowed; use {', '.join(map(repr, PRUNERS))} or an optuna pruner")


# -- the objective: one job per trial ---------------------------------------------------------------------
class Lost(Exception):
    """This process's trial was failed by another one (its heartbeat looked stale) and retried there."""


def trial_spec(spec: JobSpec, new_batch: int, lr: float, steps: int, eval_batches: int) -> JobSpec:
    return dataclasses.replace(spec, batch_size=new_batch, lr=lr, steps=steps, loss_every=1,
                               warmup_steps=min(spec.warmup_steps, steps - 1), eval_batches=eval_batches)


def _report_now(step: int, report_every: int, first_rung: int) -> bool:
    """Report the window's mean every ``report_every`` steps and at the first rung itself (so halving decides there,
    not at the next multiple of ``report_every``)."""
    return step % report_every == 0 or step == first_rung


def _interrupted(trial: Any, lr: float, why: str) -> None:
    """Mark a trial the user stopped: it does not count toward n_trials; a rule guess is enqueued again."""
    from optuna.exceptions import UpdateFinishedTrialError

    try:
        trial.set_user_attr("status", "interrupted")
        trial.set_user_attr("reason", f"{why}; it does not count toward n_trials"[:400])
    except UpdateFinishedTrialError:   # another process took it for dead and retried it already
        return
    rule = trial.user_attrs.get("rule")
    if rule:
        trial.study.enqueue_trial({"lr": lr}, user_attrs={"rule": rule})


def objective(spec: JobSpec, ctx: StudyContext) -> Callable:
    """The Optuna objective: one job per trial, pruned on the streamed training loss."""

    def run_trial(trial: Any) -> float:
        from tcbench.runner.process import run

        lr = trial.suggest_float("lr", ctx.low, ctx.high, log=True)
        if ctx.claim is not None:   # the trial is RUNNING: other workers may count it and start theirs
            ctx.claim.release()
        tid = trial_id(ctx.storage, trial.study.study_name, trial.number)
        if ctx.heartbeat:   # a first beat now (Optuna's thread may not have written yet), then the mark
            ctx.storage.record_heartbeat(tid)
            ctx.storage.set_trial_system_attr(tid, BEAT_ATTR, True)
        job = trial_spec(spec, ctx.new_batch, lr, ctx.steps, ctx.eval_batches)
        own = threading.Event()
        observe, pruned = _watch(trial, ctx, own)
        try:
            res = run(job, observe, Either(own, ctx.stop), ctx.store, ctx.comparison_id, trial.number,
                      f"trial#{trial.number}")
        except KeyboardInterrupt:
            _interrupted(trial, lr, "interrupted by KeyboardInterrupt")
            raise
        if ctx.lost.is_set() or ctx.storage.get_trial(tid).state.is_finished():
            ctx.lost.set()
            raise Lost(f"trial {trial.number} was failed by another process and retried there")
        return _outcome(trial, tid, lr, res, pruned["at"], ctx)

    return run_trial


def _watch(trial: Any, ctx: StudyContext, own: threading.Event) -> tuple[Observer, dict]:
    """The job's observer: every ``report_every`` steps the window's mean training loss is reported, and the job
    is stopped (``own``) when the pruner says so; the step it was pruned at lands in the returned dict (``at``)."""
    from optuna.exceptions import UpdateFinishedTrialError

    window: list[float] = []
    pruned: dict = {"at": None}

    def observe(event: Event) -> None:
        ctx.observer(event)
        rec = event.record if isinstance(event, StepMeasured) else None
        if rec is None or rec.loss is None or own.is_set():
            return
        window.append(rec.loss)
        if not _report_now(rec.step + 1, ctx.report_every, ctx.first_rung):
            return
        value = sum(window) / len(window)
        window.clear()
        if not math.isfinite(value):
            return
        try:
            trial.report(value, rec.step + 1)
            prune = rec.step + 1 <= ctx.last_prune_step and trial.should_prune()
        except UpdateFinishedTrialError:   # another process took this trial for dead
            ctx.lost.set()
            own.set()
            return
        if prune:
            pruned["at"] = rec.step + 1
            own.set()

    return observe, pruned


def _outcome(trial: Any, tid: int, lr: float, res: Any, pruned_at: int | None, ctx: StudyContext) -> float:
    """The trial's value from its job (NaN: Optuna marks it FAIL); raises TrialPruned for a pruned one."""
    import optuna

    for key, val in (("run_id", res.run_id), ("status", res.status), ("steps_run", len(res.records)),
                     ("reason", res.error[:300]), ("value_se", res.extra.eval_loss_se),
                     ("eval_losses", res.extra.eval_losses or None), ("learned", learned(res.extra))):
        trial.set_user_attr(key, val)
    ctx.observer(TrialEnded(number=trial.number, lr=lr, status=res.status, pruned=pruned_at is not None,
                            eval_loss=res.extra.eval_loss))
    if pruned_at is not None:
        trial.set_user_attr("status", "pruned")
        why = ctx.storage.get_trial(tid).system_attrs.get(PRUNE_REASON_ATTR)
        reason = f"pruned at step {pruned_at}: " + (why or "its training loss ranked among the worst there")
        if res.status == "ok":   # the job's last steps were already in the pipe when the pruner decided
            reason += f"; the job had already finished its {len(res.records)} steps when the stop arrived"
        trial.set_user_attr("reason", reason)
        raise optuna.TrialPruned(f"pruned at step {pruned_at} (lr={lr:.3g})")
    if res.status == "interrupted" and ctx.stop is not None and ctx.stop.is_set():
        _interrupted(trial, lr, res.error or "stopped by the user")
        return float("nan")
    value = res.extra.eval_loss
    if res.status != "ok" or value is None or not math.isfinite(value):
        if res.status == "ok":
            trial.set_user_attr("reason", f"no finite held-out loss ({value})")
        return float("nan")   # Optuna marks the trial FAIL; the study goes on
    return float(value)


def learned(extra: JobExtras) -> bool | None:
    """Whether the held-out loss fell beyond noise: the mean drop over the same batches (before the first step →
    after the last) exceeds 2 standard errors of the paired differences. None: not evaluated before and after."""
    before, after = extra.eval_losses_initial, extra.eval_losses
    if not before or not after or len(before) != len(after):
        return None
    return lower_beyond_noise(after, before)


def lower_beyond_noise(a: Sequence[float], b: Sequence[float]) -> bool:
    """Whether losses ``a`` are lower than ``b`` (the same batches, paired) by more than 2 standard errors."""
    import statistics

    diff = [y - x for x, y in zip(a, b)]
    mean = sum(diff) / len(diff)
    se = statistics.stdev(diff) / math.sqrt(len(diff)) if len(diff) > 1 else 0.0
    return mean > 0 and mean > 2 * se


# -- the trials that count, and the loop --------------------------------------------------------------------
def fixed_lr(t: Any) -> float | None:
    params = t.system_attrs.get("fixed_params") or t.params
    return params.get("lr")


def counts(t: Any) -> bool:
    """A finished trial that counts toward n_trials: not one whose process died, nor one the user stopped."""
    from optuna.trial import TrialState

    status = t.user_attrs.get("status")
    return t.state in (TrialState.COMPLETE, TrialState.PRUNED) or (t.state == TrialState.FAIL and bool(status)
                                                                  and status != "interrupted")


def prepare_study(study: Any, storage: Any, rules: dict[str, float]) -> None:
    """Fail (and retry) the trials of dead processes; enqueue the rule guesses that are not settled.

    A rule guess is settled by a trial that counts, is waiting, or runs in a live process (with a
    heartbeat; a dead one is retried by the heartbeat callback)."""
    from optuna.trial import TrialState

    fail_stale(study, storage)
    trials = study.get_trials(deepcopy=False)
    beat = heartbeat_on(storage)
    queued: set[float] = set()
    for name, lr in rules.items():
        if lr not in queued and not any(fixed_lr(t) == lr and (counts(t) or t.state == TrialState.WAITING
                                                              or (beat and t.state == TrialState.RUNNING))
                                        for t in trials):
            study.enqueue_trial({"lr": lr}, user_attrs={"rule": name})
        queued.add(lr)


def optimize(study: Any, objective: Callable, ctx: StudyContext, n_trials: int) -> None:
    """Run trials one at a time until the study holds ``n_trials`` that count (or ``stop`` is set).

    Trials running in other live processes are waited for, not duplicated; a dead one is failed and
    retried once its heartbeat is older than the grace period."""
    from optuna.trial import TrialState

    storage, stop = ctx.storage, ctx.stop
    while not (stop is not None and stop.is_set()):
        with ctx.claim or nullcontext():   # workers on one server count and start trials one at a time
            fail_stale(study, storage)
            trials = study.get_trials(deepcopy=False)
            done = sum(counts(t) for t in trials)
            running = sum(t.state == TrialState.RUNNING for t in trials) if ctx.heartbeat else 0
            if done >= n_trials:
                return
            wait = done + running >= n_trials   # the missing trials run elsewhere (or died there: wait for the grace)
            if not wait:
                ctx.lost.clear()
                try:   # the objective releases the claim as soon as its trial is RUNNING
                    study.optimize(objective, n_trials=1, gc_after_trial=False)
                except (Lost, ValueError):   # Optuna cannot tell a trial another process failed: ValueError
                    if not ctx.lost.is_set():
                        raise
        if wait:
            if stop is not None:
                stop.wait(min(storage.heartbeat_interval, 2))
            else:
                time.sleep(min(storage.heartbeat_interval, 2))


def trials_frame(study: Any) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(one row per trial, one row per reported intermediate value) of a study; ``state`` holds the name of the
    trial's ``optuna.trial.TrialState`` ("COMPLETE", "PRUNED", ...)."""
    rows, inter = [], []
    trials = study.get_trials(deepcopy=False)
    lost = lost_reasons(trials)
    for t in trials:
        dur = None
        if t.datetime_start and t.datetime_complete:
            dur = (t.datetime_complete - t.datetime_start).total_seconds()
        rows.append(dict(number=t.number, lr=t.params.get("lr", fixed_lr(t)), value=t.value,
                         value_se=t.user_attrs.get("value_se"), learned=t.user_attrs.get("learned"), state=t.state.name,
                         rule=t.user_attrs.get("rule", ""), status=t.user_attrs.get("status", ""),
                         steps_run=t.user_attrs.get("steps_run", 0), duration_s=dur,
                         run_id=t.user_attrs.get("run_id"),
                         reason=lost.get(t.number, t.user_attrs.get("reason", ""))))
        inter += [dict(number=t.number, step=s, value=v, state=t.state.name)
                  for s, v in sorted(t.intermediate_values.items())]
    return (pd.DataFrame(rows, columns=TRIAL_COLUMNS),
            pd.DataFrame(inter, columns=["number", "step", "value", "state"]))
