"""The Optuna study behind ``tune_compile``: its sampler and pruner, opening (or resuming) it, one trial (one stored
job, watched for pruning and judged for loss parity against the native job), the loop of trials until the search's
end, the trials as a table (``trial_rows``, ``TRIAL_COLUMNS``) and the fastest configuration that kept parity
(``best_config``)."""

from __future__ import annotations

import dataclasses
import math
import random
import statistics
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any

import pandas as pd

from tcbench.core.events import CompileTrialEnded, CompileTrialStarted, Event, Observer, StepMeasured
from tcbench.core.spec import JobSpec
from tcbench.measure.metrics import loss_parity
from tcbench.tuning.compile_search.space import FIELDS, CompileConfig, every_config, size_of
from tcbench.runner.session import Either

SAMPLERS = ("tpe", "random", "grid")
PRUNERS = ("median", "none")
PRUNE_AFTER = 5            # steady steps before a trial may be pruned (its running median is reported from here)
MIN_TRIAL_S = 60.0         # a trial may run this long even when the search's budget is nearly spent
DUPLICATE_STREAK = 8       # proposals in a row of configurations tried already: an untried one is enqueued instead
TRIAL_COLUMNS = ["number", "label", *FIELDS, "state", "median_step_ms", "step_iqr_ms", "compile_s", "parity",
                 "loss_diff", "reason", "duplicate_of", "run_id"]


@dataclass(frozen=True)
class CompileStudyContext:
    """What every trial of ``tune_compile``'s search needs besides its configuration: the Optuna study it is a trial
    of, where its job's events go, the user's stop, and the comparison its runs are stored in (as ``StudyContext``
    is for the learning-rate studies)."""

    study: Any                   # the Optuna study (``open_study``)
    observer: Observer
    stop: Any                    # the user's stop event (the session's), or None
    store: Any                   # tcbench's Store
    comparison_id: int | None


def _sampler(sampler: Any, seed: int, space: dict[str, tuple]):
    import optuna

    if not isinstance(sampler, str):
        return sampler
    if sampler in ("random", "grid"):   # grid: every configuration is enqueued (``search``)
        return optuna.samplers.RandomSampler(seed=seed)
    # the parity constraint reaches TPE through each trial's own constraint (``Trial.set_constraint``)
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=min(5, size_of(space)))


def _pruner(pruner: Any, spec: JobSpec):
    import optuna

    if not isinstance(pruner, str):
        return pruner
    if pruner == "none":
        return optuna.pruners.NopPruner()
    return optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=spec.warmup_steps + PRUNE_AFTER - 1)


def open_study(spec: JobSpec, space: dict, name: str, backend_storage: Any, sampler: Any, pruner: Any,
               seed: int) -> Any:
    """The study ``name`` (created, or resumed when it was started with the same spec and space: else a
    ValueError); ``backend_storage`` None keeps it in memory."""
    import optuna

    storage = backend_storage if backend_storage is not None else optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage, study_name=name, direction="minimize", load_if_exists=True,
                                sampler=_sampler(sampler, seed, space), pruner=_pruner(pruner, spec))
    settings = {"kind": "tune-compile", "spec": spec.to_json(), "space": {k: list(v) for k, v in space.items()}}
    stored = {k: study.user_attrs.get(k) for k in settings}
    if all(v is None for v in stored.values()):
        for k, v in settings.items():
            study.set_user_attr(k, v)
    elif stored != settings:
        differ = sorted(k for k in settings if stored[k] != settings[k])
        raise ValueError(f"study {name!r} was started with other settings ({', '.join(differ)} differ); use another "
                         "study_name, or the same spec and space to resume it")
    return study


def trial_rows(study: Any) -> list[dict]:
    """One dict per trial of the study, with the ``TRIAL_COLUMNS``."""
    rows = []
    for t in study.get_trials(deepcopy=False):
        a = t.user_attrs
        rows.append({"number": t.number, "label": a.get("label"), **{k: t.params.get(k) for k in FIELDS},
                     "state": t.state.name,
                     "median_step_ms": t.value if t.value is not None else a.get("median_step_ms"),
                     "step_iqr_ms": a.get("step_iqr_ms"), "compile_s": a.get("compile_s"), "parity": a.get("parity"),
                     "loss_diff": a.get("loss_diff"), "reason": a.get("reason", ""),
                     "duplicate_of": a.get("duplicate_of"), "run_id": a.get("run_id")})
    return rows


def _tried(study: Any) -> dict[CompileConfig, Any]:
    """The configurations a finished trial measured (not a duplicate's copy, not one the user stopped)."""
    from optuna.trial import TrialState

    out = {}
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)):
        if t.user_attrs.get("duplicate_of") is None and t.user_attrs.get("status") != "interrupted" and \
                set(FIELDS) <= set(t.params):
            out.setdefault(CompileConfig(**{k: t.params[k] for k in FIELDS}), t)
    return out


def _watch(trial: Any, spec: JobSpec, notify: Observer, own: threading.Event) -> Observer:
    """The job's observer: from the PRUNE_AFTER-th steady step on, its running median step (ms) is reported and the
    job is stopped when the pruner says so."""
    steps: list[float] = []

    def observe(event: Event) -> None:
        notify(event)
        rec = event.record if isinstance(event, StepMeasured) else None
        if rec is None or rec.warmup or own.is_set():
            return
        steps.append(rec.step_s * 1e3)
        if len(steps) < PRUNE_AFTER:
            return
        trial.report(statistics.median(steps), rec.step)
        if trial.should_prune():
            trial.set_user_attr("reason", f"pruned at step {rec.step}: its median step so far "
                                          f"({statistics.median(steps):.1f} ms) was slower than the other trials' "
                                          "there")
            own.set()

    return observe


def _measure(trial: Any, config: CompileConfig, spec: JobSpec, native: Any, rtol: float | None, ctx: dict,
             timeout_s: float) -> str:
    """Run the trial's job (stopped after ``timeout_s``: what is left of the search's budget) and tell Optuna how it
    went; returns the job's status."""
    import optuna
    from optuna.trial import TrialState

    from tcbench.runner.process import run

    own = threading.Event()
    label = config.label()
    trial.set_user_attr("label", label)
    job = config.apply(spec)
    job = job.replace(timeout_s=min(job.timeout_s or math.inf, timeout_s))
    res = run(job, _watch(trial, spec, ctx.observer, own), Either(own, ctx.stop), ctx.store, ctx.comparison_id,
              trial.number, f"trial#{trial.number} {label}", label=label)
    trial.set_user_attr("run_id", res.run_id)
    if res.compile_latency_s is not None:
        trial.set_user_attr("compile_s", round(float(res.compile_latency_s), 3))
    if res.status == "interrupted" and own.is_set():
        med = res.median_step_s
        if med is not None:
            trial.set_user_attr("median_step_ms", med * 1e3)
        ctx.study.tell(trial, state=TrialState.PRUNED)
        return "pruned"
    if res.status == "interrupted" and ctx.stop is not None and ctx.stop.is_set():
        trial.set_user_attr("status", "interrupted")
        trial.set_user_attr("reason", "stopped by the user; it does not count and runs again on resume")
        ctx.study.tell(trial, state=TrialState.FAIL)
        return "interrupted"
    if not res.ok or res.median_step_s is None:
        why = (res.error or "no steady steps").strip().splitlines()
        trial.set_user_attr("reason", f"{res.status}: {why[-1] if why else ''}"[:400])
        ctx.study.tell(trial, state=TrialState.FAIL)
        return res.status
    ok, diff, note = loss_parity(native.records, res.records, config.precision, spec.dropout == 0.0, early_rtol=rtol)
    trial.set_user_attr("parity", ok)
    trial.set_user_attr("loss_diff", diff)
    trial.set_user_attr("reason", "" if ok is not False else f"rejected: loss parity failed — {note}")
    trial.set_constraint("loss_parity", 1.0 if ok is False else 0.0)   # > 0: infeasible, for Optuna's samplers
    if res.step_iqr_s is not None:
        trial.set_user_attr("step_iqr_ms", res.step_iqr_s * 1e3)
    try:
        ctx.study.tell(trial, res.median_step_s * 1e3)
    except optuna.exceptions.UpdateFinishedTrialError:   # pragma: no cover - only another process finishes it
        pass
    return "ok"


def _stop_reason(study: Any, space: dict, started: float, budget_s: float, n_trials: int | None, durations: list,
                 stop: Any) -> str:
    tried = _tried(study)
    if stop is not None and stop.is_set():
        return "stopped by the user"
    if len(tried) >= size_of(space):
        return f"every configuration of the space ({size_of(space)}) was tried"
    if n_trials is not None and len(tried) >= n_trials:
        return f"n_trials={n_trials} configurations were tried"
    elapsed = time.monotonic() - started
    if durations and elapsed + statistics.fmean(durations) > budget_s:
        return (f"budget: {elapsed:.0f} s of the search's {budget_s:.0f} s spent, and another trial (about "
                f"{statistics.fmean(durations):.0f} s) would end past it")
    return ""


def search(study: Any, space: dict, first: CompileConfig, spec: JobSpec, native: Any, budget_s: float,
            n_trials: int | None, rtol: float | None, seed: int, grid: bool, ctx: CompileStudyContext) -> str:
    """Trials until the search's end; returns why it ended. ``first``: the configuration tried first (the default
    where the space holds it: ``first_in``); ``grid``: every configuration is enqueued, ``first`` first and the rest
    in a random order (seeded)."""
    import optuna
    from optuna.trial import TrialState

    dists = {k: optuna.distributions.CategoricalDistribution(list(v)) for k, v in space.items()}
    rng = random.Random(seed)
    if not study.get_trials(deepcopy=False):
        rest = [c for c in every_config(space) if c != first] if grid else []
        rng.shuffle(rest)
        for config in (first, *rest):
            study.enqueue_trial(dataclasses.asdict(config), user_attrs={"label": config.label()})
    started, durations, streak = time.monotonic(), [], 0
    while True:
        reason = _stop_reason(study, space, started, budget_s, n_trials, durations, ctx.stop)
        if reason:
            return reason
        with warnings.catch_warnings():   # one process asks and tells: no heartbeat thread (Study.optimize's) needed
            warnings.filterwarnings("ignore", "Heartbeat of storage")
            trial = study.ask(dists)
        config = CompileConfig(**{k: trial.params[k] for k in FIELDS})
        earlier = _tried(study).get(config)
        if earlier is not None:   # proposed again: the first measurement answers (no job)
            trial.set_user_attr("duplicate_of", earlier.number)
            trial.set_user_attr("label", config.label())
            for key in ("parity", "reason"):
                if key in earlier.user_attrs:
                    trial.set_user_attr(key, earlier.user_attrs[key])
            if earlier.state == TrialState.COMPLETE:
                trial.set_constraint("loss_parity", 1.0 if earlier.user_attrs.get("parity") is False else 0.0)
                study.tell(trial, earlier.value)
            else:
                study.tell(trial, state=earlier.state)
            streak += 1
            if streak >= DUPLICATE_STREAK:   # the sampler keeps proposing what it knows: try something new
                untried = [c for c in every_config(space) if c not in _tried(study)]
                if untried:
                    study.enqueue_trial(dataclasses.asdict(rng.choice(untried)))
                streak = 0
            continue
        streak = 0
        t0 = time.monotonic()
        ctx.observer(CompileTrialStarted(number=trial.number, label=config.label()))
        left = max(budget_s - (time.monotonic() - started), MIN_TRIAL_S)   # no trial runs far past the budget
        status = _measure(trial, config, spec, native, rtol, ctx, left)
        durations.append(time.monotonic() - t0)
        ctx.observer(CompileTrialEnded(number=trial.number, label=config.label(), status=status))
        if status == "interrupted":
            return "stopped by the user"


def best_config(trials: pd.DataFrame) -> CompileConfig | None:
    """The completed trial with the lowest median step among those that kept parity (or were not judged)."""
    ok = trials[(trials["state"] == "COMPLETE") & (trials["parity"] != False) & trials["duplicate_of"].isna()  # noqa: E712
                & trials["median_step_ms"].notna()]
    if ok.empty:
        return None
    row = ok.sort_values(["median_step_ms", "number"]).iloc[0]
    return CompileConfig(**{k: getattr(row[k], "item", lambda: row[k])() for k in FIELDS})   # numpy's scalars: Python's
