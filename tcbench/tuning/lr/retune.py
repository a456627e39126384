"""Retune the learning rate after a batch-size change, with Optuna — starting from a prediction.

From ``spec.lr`` at ``spec.batch_size`` (B0) and k = new_batch_size / B0, four guesses are enqueued first: the
noise-scale prediction (``tcbench.tuning.lr.noise``: the gradient noise scale measured on the native job, stored or
measured now, and the surge form for Adam), the linear rule (lr·k), the square-root rule (lr·√k) and the original
lr. Then the sampler (Optuna's GPSampler for up to 20 trials, else TPE; seeded) searches lr log-uniformly in
[min(guesses) / search_factor, max(guesses) · search_factor].

**Budget**: by default every trial trains on as many samples as the baseline (``budget="equal_samples"``:
steps × B0 / B1 steps), the comparison every scaling rule assumes; ``budget="equal_steps"`` trains every trial
``steps`` steps (k× the samples).

**Objective** (minimised): the mean cross-entropy on ``eval_batches`` batches of the held-out
``eval`` split, computed by the job after its training steps (no grad, eval mode), at the new
batch size, with its standard error over those batches. The job also evaluates the same batches before its
first step: a trial whose held-out loss did not fall beyond noise (paired over the batches: mean drop > 2 SE)
"learned nothing" (``learned`` False); a study in which no trial learned names no best. The best is
compared with each guess on the same batches: it beats a guess only beyond noise. Every trial is a real
``tc.run`` job in its own process and a stored run.

**Pruning**: every ``report_every`` steps the mean training loss of that window is reported
(``trial.report``); when the pruner says so, the job's stop event is set (the job ends
``interrupted``) and the trial is pruned. The default (``"halving"``, :class:`tcbench.tuning.lr.study.BudgetedHalving`)
is successive halving with its budget fixed in advance: one decision, at a third of the steps (``min_resource``;
judged earlier, the ranking follows how fast a rate falls at first, not where it ends: the short-horizon bias of Wu et
al. 2018, which favours small rates, while large ones that fall fast and then stall lead early too): a trial goes on
only when its training loss there is among the best third of the trials that reached that step (the best so far while
fewer than six have: Optuna's rule) and fewer than ``full_trials(n_trials)`` = max(2, ⌈n_trials / 3⌉) trials went on
before it. Run one trial at a time, Optuna's own pruner lets every trial that is best so far at the rung run to the end:
on tiny GPT-2 at k = 8 the linear and square-root trials each led there, took a full trial and lost. No trial is pruned
after that step (``prune_until``): a later stop saves less, and the noisy training loss would overrule the held-out loss
that decides a few steps later. A trial whose loss became NaN/inf (``diverged``) or that failed is marked FAIL with its
reason in ``user_attrs``; the study goes on.

**Storage**: ``None`` keeps the study in memory; ``"store"`` puts it in tcbench's own SQLite file;
any Optuna storage URL (``"sqlite:///tune.db"``) persists it, and calling again with the same
``study_name`` resumes it: only the missing trials are run, and several processes may work on one
study at once. A URL is checked before any job starts (known dialect, driver installed, for SQLite a
writable file in an existing folder, the database opens); a bad one is a ``SpecError`` naming
``storage``. The URL is only ever stored or shown with its password as ``***``.

**Workers that die**: the process running a study writes its running trial's heartbeat every 10 s
(``HEARTBEAT_INTERVAL_S`` in ``tcbench.tuning.storage``). A trial whose heartbeat is older than the 60 s
grace period (``GRACE_PERIOD_S``) belongs to a process that is gone (SIGKILL, lost machine): the next
trial start on the study marks it FAIL and enqueues it again, same lr and rule (at most 3 times);
its job died with its process. A RUNNING trial with a fresh heartbeat belongs to a live process and
is never touched; when the trials still missing are all running elsewhere, this call waits for them
(a dead one is retried here once its grace period has passed). A trial stopped by ``stop`` or a
KeyboardInterrupt is FAIL with status ``interrupted``: it does not count toward ``n_trials``, and an
interrupted rule guess is enqueued again.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import pandas as pd

from tcbench.core.events import FinalistEnded, LrPredicted, Observer
from tcbench.core.options import merged
from tcbench.runner.preflight import check as preflight
from tcbench.runner.session import comparison_session
from tcbench.core.spec import JobSpec, SpecError
from tcbench.store.api import Store
from tcbench.tuning.lr.premise import check_lr
from tcbench.tuning.lr.result import FINALIST_COLUMNS, RetunePlan, RetuneResult, build_result
from tcbench.tuning.storage import check_study_name, heartbeat_on, open_storage
from tcbench.tuning.lr.study import (PRUNERS, SAMPLERS, StudyContext, make_pruner, make_sampler,
                                  min_resource, objective, prepare_study, prune_until, sampler_name, study_id,
                                  trial_spec, trials_frame)
from tcbench.tuning.lr.workers import Claim, check_fork, check_workers, remember, run_workers
from tcbench.tuning.lr.prediction import OPTIMIZERS, predict, target_batch
from tcbench.tuning.lr.noise import NoiseScale, noise_scale, one_process, stored_noise_scale

BUDGETS = ("equal_samples", "equal_steps")


def rule_lrs(lr: float, old_batch: int, new_batch: int) -> tuple[float, float]:
    """(linear rule lr·k, square-root rule lr·√k) with k = new_batch / old_batch."""
    k = new_batch / old_batch
    return lr * k, lr * math.sqrt(k)


def _check(spec: JobSpec, new_batch_size: int, n_trials: int, search_factor: float, eval_batches: int,
           steps: int, seeds: int = 1, finalists: int = 1) -> None:
    for name, value, low in (("new_batch_size", new_batch_size, 1), ("n_trials", n_trials, 1),
                             ("eval_batches", eval_batches, 1), ("steps", steps, 2), ("seeds", seeds, 1),
                             ("finalists", finalists, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name}={value!r} is not allowed; it must be a whole number >= {low}")
    if not (isinstance(search_factor, (int, float)) and search_factor >= 1 and math.isfinite(search_factor)):
        raise ValueError(f"search_factor={search_factor!r} is not allowed; use a finite number >= 1")


def _check_choices(budget: str, sampler: Any, n_trials: int, pruner: Any, optimizer: str) -> None:
    if budget not in BUDGETS:
        raise ValueError(f"budget={budget!r} is not allowed; allowed: {', '.join(map(repr, BUDGETS))}")
    if sampler_name(sampler, n_trials) not in SAMPLERS and isinstance(sampler, str):
        raise ValueError(f"sampler={sampler!r} is not allowed; use {', '.join(map(repr, SAMPLERS))} "
                         "or an optuna sampler")
    if isinstance(pruner, str) and pruner not in PRUNERS:
        raise ValueError(f"pruner={pruner!r} is not allowed; use {', '.join(map(repr, PRUNERS))} or an optuna pruner")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer={optimizer!r} is not allowed; allowed: {', '.join(map(repr, OPTIMIZERS))}")


def _check_extras(extra_lrs: Sequence[float]) -> list[float]:
    extras = [float(x) for x in extra_lrs]
    if any(not (x > 0 and math.isfinite(x)) for x in extras):
        raise ValueError(f"extra_lrs={list(extra_lrs)!r} is not allowed; use finite learning rates > 0")
    return extras


def _check_resume(study: Any, config: dict) -> None:
    old = {k: study.user_attrs.get(k) for k in config}
    if all(v is None for v in old.values()):
        for k, v in config.items():
            study.set_user_attr(k, v)
        return
    differ = {k: (old[k], v) for k, v in config.items() if old[k] != v}
    if differ:
        raise ValueError(f"study {study.study_name!r} was started with other settings {differ} (stored, given); "
                         "use another study_name or the same settings to resume it")


def _seed_stats(values: dict) -> tuple[float | None, float | None]:
    """(mean, standard error) over the seeds' finite held-out losses."""
    import statistics

    xs = [v for v in values.values() if v is not None and math.isfinite(v)]
    if not xs:
        return None, None
    return sum(xs) / len(xs), (statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else None)


def _repeat_finalists(spec: JobSpec, study: Any, ctx: StudyContext, seeds: int, count: int) -> pd.DataFrame:
    """Train the ``count`` best completed trials' learning rates again with seeds spec.seed+1 … (``seeds`` in all).

    Each repeat is a stored run of the study's comparison; its result is kept in the study (user attr
    ``finalists``), so a resumed study does not train it again."""
    from optuna.trial import TrialState

    trials, _ = trials_frame(study)
    complete = trials[(trials["state"] == TrialState.COMPLETE.name) & trials["value"].notna()].sort_values("value")
    kept = dict(study.user_attrs.get("finalists") or {})
    rows = []
    for t in complete.drop_duplicates("lr").head(count).to_dict("records"):
        lr, number = float(t["lr"]), int(t["number"])
        values, run_ids = {spec.seed: float(t["value"])}, {spec.seed: t["run_id"]}
        for i in range(1, seeds):
            seed = (spec.seed + i) % 2 ** 32
            hit = kept.get(repr(lr), {}).get(str(seed))
            if hit is None:
                if ctx.stop is not None and ctx.stop.is_set():
                    break
                hit = _repeat(spec, study, ctx, kept, number, lr, seed)
                if hit is None:
                    break   # the user stopped it: not a result, measured again on resume
            values[seed], run_ids[seed] = hit["value"], hit["run_id"]
        mean, se = _seed_stats(values)
        rows.append(dict(number=number, lr=lr, rule=t["rule"], seeds=len(values), mean=mean, se=se,
                         values=values, run_ids=run_ids))
    return pd.DataFrame(rows, columns=FINALIST_COLUMNS)


def _repeat(spec: JobSpec, study: Any, ctx: StudyContext, kept: dict, number: int, lr: float,
            seed: int) -> dict | None:
    """One finalist's run at ``seed``, kept in the study (None: the user stopped it)."""
    from tcbench.runner.process import run

    job = trial_spec(spec.replace(seed=seed), ctx.new_batch, lr, ctx.steps, ctx.eval_batches)
    res = run(job, ctx.observer, ctx.stop, ctx.store, ctx.comparison_id, number, f"finalist#{number} seed {seed}")
    if res.status == "interrupted" and ctx.stop is not None and ctx.stop.is_set():
        return None
    value = res.extra.eval_loss if res.status == "ok" else None
    hit = {"value": value, "run_id": res.run_id, "status": res.status}
    kept.setdefault(repr(lr), {})[str(seed)] = hit
    study.set_user_attr("finalists", kept)
    ctx.observer(FinalistEnded(number=number, lr=lr, seed=seed, status=res.status, eval_loss=value))
    return hit


@dataclass(frozen=True)
class RetuneOptions:
    """How ``retune_lr`` searches (every field is also a keyword of ``retune_lr``; see its docstring)."""

    n_trials: int = 12                  # trials that count (a resumed study runs only the rest)
    storage: Any = None                 # where the Optuna study lives: None (memory), "store", a URL or a storage
    study_name: str | None = None       # default: from the job, the batches and the seed
    sampler: Any = "auto"               # "auto", "tpe", "gp", "random", "grid" or an Optuna sampler
    steps: int | None = None            # the baseline's steps (default spec.steps)
    eval_batches: int = 8               # held-out batches each trial is judged on
    search_factor: float = 4.0          # the range searched: the guesses' span widened by this factor both ways
    seed: int = 0                       # the sampler's seed
    pruner: Any = "halving"             # "halving", "median", "none" or an Optuna pruner
    report_every: int | None = None     # the intermediate value's interval in steps (default steps // 10)
    extra_lrs: Sequence[float] = ()     # your own guesses, enqueued after the others
    budget: str = "equal_samples"       # each trial's steps: "equal_samples" (steps x B0 / B1) or "equal_steps"
    noise: Any = True                   # True: stored or measured noise scale; a NoiseScale; False: no prediction
    optimizer: str = "adam"             # the prediction's form: "adam" or "sgd"
    seeds: int = 1                      # > 1: the finalists are trained again with more seeds
    finalists: int = 3                  # how many of the best learning rates are trained again
    nproc: int | None = None            # data parallel: retune for N processes instead of new_batch_size
    n_workers: int = 1                  # worker processes forked here on one PostgreSQL study
    check_premise: bool = False         # check spec.lr at B0 first (tc.check_lr) and re-centre when it is off


def retune_lr(spec: JobSpec, new_batch_size: int | None = None, *, options: RetuneOptions | None = None,
              observer: Observer | None = None, stop: threading.Event | None = None, store: Store | None = None,
              **overrides: Any) -> RetuneResult:
    """Find the learning rate for ``new_batch_size``, starting from ``spec.lr`` at ``spec.batch_size``.

    The settings are ``RetuneOptions``' fields: ``options=`` gives them whole, a keyword of the same name overrides
    one (``retune_lr(spec, 64, n_trials=8, seeds=3)``).

    Data parallel: the batches are global ones. ``nproc=N`` instead of ``new_batch_size`` retunes for the same
    per-process batch on N processes (global batch ``spec.batch_size × N``, from ``spec.global_batch``); every
    trial then runs as one process at the global batch (``tcbench.tuning.lr.noise.one_process``: the same updates,
    without N processes per trial).

    Runs until the study holds ``n_trials`` trials that count (a resumed study only runs the rest;
    trials whose process died or that the user stopped do not count; see the module docstring).
    ``steps``: the baseline's steps (default ``spec.steps``); each trial trains ``steps × B0 / B1`` of them
    (``budget="equal_samples"``) or ``steps`` (``"equal_steps"``). ``noise``: True uses the noise scale stored
    for this job or measures it (one native job), a ``NoiseScale`` is used as given, False skips the prediction.
    ``optimizer``: the prediction's form ("adam": tcbench's jobs train with AdamW; "sgd"). The intermediate value
    is reported every ``report_every`` steps (default steps // 10). ``extra_lrs``: your own guesses, enqueued after
    the others (the range widens to include them). ``seeds`` > 1: once the trials are done, the ``finalists``
    best learning rates are trained again with seeds spec.seed+1 … (``seeds`` in all, equal budget); the best is
    then the lowest mean over seeds, its SE and "beats" are over seeds (``RetuneResult.finalists``). Observers
    get the runner's events plus ``tc.events.TrialEnded``, ``LrPredicted`` and ``FinalistEnded``.

    ``n_workers=N`` runs the trials in N worker processes forked from this one, on one study in a PostgreSQL
    ``storage`` (``tcbench.tuning.lr.workers``; ``tcbench tune-worker`` joins from elsewhere); their events reach
    ``observer`` here, in this process, as they happen, and ``stop`` reaches them within a second.

    ``check_premise=True``: before the study, ``check_lr`` checks that ``spec.lr`` is near its optimum at B0 (runs
    at lr × ½, 1, 2 over 3 seeds of ``steps`` steps, judged on ``eval_batches`` held-out batches); when it is off,
    every guess (the prediction, both rules, "original") starts from the check's re-centred rate, so the search is
    centred on the re-centred prediction. ``RetuneResult.premise`` holds the check (None: not checked).
    """

    o = merged(RetuneOptions, options, overrides, "retune_lr")
    processes = None if o.nproc is None else (spec.nproc, o.nproc)
    new_batch_size = target_batch(spec, new_batch_size, o.nproc)
    spec = one_process(spec)
    base = spec.steps if o.steps is None else o.steps
    _check(spec, new_batch_size, o.n_trials, o.search_factor, o.eval_batches, base, o.seeds, o.finalists)
    check_study_name(o.study_name)
    _check_choices(o.budget, o.sampler, o.n_trials, o.pruner, o.optimizer)
    if not isinstance(o.check_premise, bool):
        raise SpecError("check_premise", o.check_premise, "True or False")
    trial_steps = base if o.budget == "equal_steps" else max(2, round(base * spec.batch_size / new_batch_size))
    spec = preflight(spec)   # once, before the study is created or any trial starts
    try:   # the new batch must fit too
        preflight(dataclasses.replace(spec, batch_size=new_batch_size, steps=trial_steps,
                                      warmup_steps=min(spec.warmup_steps, trial_steps - 1)))
    except SpecError as exc:
        if exc.field != "batch_size":
            raise
        raise SpecError("new_batch_size", new_batch_size, exc.allowed,
                        str(exc).replace(f"batch_size={new_batch_size}", f"new_batch_size={new_batch_size}")) from None
    report_every = o.report_every or max(1, trial_steps // 10)
    store = store or Store()
    extras = _check_extras(o.extra_lrs)
    backend_storage, url = open_storage(o.storage, store.url())   # a bad URL is a SpecError before any job starts
    check_workers(o.n_workers, o.storage, backend_storage, url)
    check_fork(sampler_name(o.sampler, o.n_trials) if isinstance(o.sampler, str) else o.sampler, o.n_workers)
    notify = observer or (lambda e: None)
    premise = None
    if o.check_premise:   # its own comparison (kind lr-premise), before the study is opened
        premise = check_lr(spec, steps=base, eval_batches=o.eval_batches, observer=notify, stop=stop, store=store)
        if premise.held is False:
            spec = spec.replace(lr=premise.recentred_lr)
    prediction, note = _predict(spec, new_batch_size, o.noise, o.optimizer, store, notify, stop, processes)
    guesses = _guesses(spec, new_batch_size, prediction, extras)
    low, high = min(guesses.values()) / o.search_factor, max(guesses.values()) * o.search_factor
    name = o.study_name or (f"retune-{spec.model}-{spec.size}-{spec.backend}-b{spec.batch_size}-lr{spec.lr:g}"
                            f"-to-b{new_batch_size}-s{o.seed}")
    plan = RetunePlan(spec, new_batch_size, trial_steps, o.budget, low, high, guesses, prediction, note, processes,
                      sampler_name(o.sampler, o.n_trials) if isinstance(o.sampler, str) else type(o.sampler).__name__,
                      premise)
    study, optuna_storage = _open_study(plan, name, backend_storage, o, report_every)
    ctx = StudyContext(low=low, high=high, new_batch=new_batch_size, steps=trial_steps, eval_batches=o.eval_batches,
                       report_every=report_every, first_rung=min_resource(trial_steps),
                       last_prune_step=prune_until(o.pruner, trial_steps), store=store, comparison_id=None,
                       observer=notify, storage=optuna_storage, heartbeat=heartbeat_on(optuna_storage), stop=stop,
                       claim=Claim(optuna_storage, study_id(optuna_storage, study)))
    return _run(plan, study, ctx, url, o)


def _open_study(plan: RetunePlan, name: str, backend_storage: Any, o: RetuneOptions,
                report_every: int) -> tuple[Any, Any]:
    """(the study, created or resumed when its settings match; the Optuna storage it lives in)."""
    import optuna

    # in memory: a storage of our own, so trials are reached through it (Optuna's own is private to the study)
    storage = backend_storage if backend_storage is not None else optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage, study_name=name, direction="minimize", load_if_exists=True,
                                sampler=make_sampler(o.sampler, o.seed, o.n_trials),
                                pruner=make_pruner(o.pruner, plan.steps, o.n_trials, storage))
    # PostgreSQL: one process at a time writes or checks the settings, so a process starting the same new study at
    # the same moment never reads them half written
    claim = Claim(storage, study_id(storage, study))
    try:
        with claim:
            _check_resume(study, dict(new_batch_size=plan.new_batch, low=plan.low, high=plan.high, steps=plan.steps,
                                      budget=plan.budget, eval_batches=o.eval_batches, spec=plan.spec.to_json()))
            remember(study, n_trials=o.n_trials, seed=o.seed, report_every=report_every,
                     sampler=o.sampler if isinstance(o.sampler, str) else None,
                     pruner=o.pruner if isinstance(o.pruner, str) else None)
    finally:
        claim.close()
    return study, storage


def _guesses(spec: JobSpec, new_batch: int, prediction: Any, extras: list[float]) -> dict[str, float]:
    """The guesses in the order they are enqueued: the prediction, both rules, the original lr, the user's."""
    linear, sqrt = rule_lrs(spec.lr, spec.batch_size, new_batch)
    guesses: dict[str, float] = {}
    for name, lr in ((("prediction", prediction.lr),) if prediction else ()) + (
            ("linear", linear), ("sqrt", sqrt), ("original", spec.lr),
            *((f"extra{i}", x) for i, x in enumerate(extras))):
        guesses[name] = lr   # a guess equal to an earlier one shares its trial (prepare_study enqueues it once)
    return guesses


def _run(plan: RetunePlan, study: Any, ctx: StudyContext, url: str | None, o: RetuneOptions) -> RetuneResult:
    """Enqueue the guesses, run the study (and the finalists) as the comparison ``retune``; the result.

    The row ends ``interrupted`` when ``stop`` is set or anything (a KeyboardInterrupt, an error) ends it early,
    with the figures of the study as it stands."""
    spec, stop = plan.spec, ctx.stop
    try:
        with ctx.claim:   # PostgreSQL: one process at a time enqueues or starts trials
            prepare_study(study, ctx.storage, plan.guesses)
        info = dict(study_name=study.study_name, storage=url, new_batch_size=plan.new_batch, low=plan.low,
                    high=plan.high, budget=plan.budget, steps=plan.steps, guesses=plan.guesses)
        with comparison_session(ctx.store, "retune", spec, [spec.backend], o.n_trials, info, stop,
                                error_status="interrupted") as session:
            ctx = dataclasses.replace(ctx, comparison_id=session.comparison_id)
            t0, finals = time.monotonic(), None
            try:
                run_workers(study, ctx, o.n_trials, o.n_workers, o.storage, lambda c: objective(spec, c))
                if o.seeds > 1 and not session.stopped:
                    finals = _repeat_finalists(spec, study, ctx, o.seeds, o.finalists)
            finally:
                result = build_result(plan, study, url, time.monotonic() - t0, session.comparison_id, finals)
                session.finish_info.update(_finish_info(result))
    finally:
        ctx.claim.close()
    return result


def _finish_info(result: RetuneResult) -> dict:
    """The retune row's info once the study ends."""
    return {"study_name": result.study_name, "storage": result.storage, "best_lr": result.best_lr,
            "best_value": result.best_value, "linear_lr": result.linear_lr, "sqrt_lr": result.sqrt_lr,
            "predicted_lr": result.prediction.lr if result.prediction else None,
            "nothing_learned": result.nothing_learned, "budget": result.budget, "n_pruned": result.n_pruned,
            "total_steps": result.total_steps}


def _predict(spec: JobSpec, new_batch: int, noise: Any, optimizer: str, store: Store, notify: Callable,
             stop: Any, processes: tuple[int, int] | None = None) -> tuple[Any, str]:
    """(the noise-scale prediction or None, why not); measuring the noise scale is one native job when needed."""

    if noise is False or noise is None:
        return None, "no prediction asked for (noise=False)"
    if not isinstance(noise, (NoiseScale, bool)):
        raise ValueError(f"noise={noise!r} is not allowed; use True (stored or measured), False or a "
                         "tcbench.NoiseScale")
    if noise is True:
        noise = stored_noise_scale(spec, store)
    if noise is None:
        if spec.batch_size % 2:   # measured on the native job (any precision) in two micro-batches
            return None, (f"the noise scale is measured in two micro-batches of an even batch; this job's batch is "
                          f"{spec.batch_size}")
        try:
            noise = noise_scale(spec, 2, notify, stop, store)
        except RuntimeError as exc:
            return None, str(exc)
    p = predict(noise, spec.lr, spec.batch_size, new_batch, optimizer, processes)
    notify(LrPredicted(lr=p.lr, low=p.low, high=p.high, b_noise=noise.b_simple, text=p.describe()))
    return p, ""


