"""Retune the learning rate after a batch-size change, with Optuna.

From ``spec.lr`` at ``spec.batch_size`` and k = new_batch_size / batch_size, the two classic
guesses are enqueued first — the linear rule (lr·k) and the square-root rule (lr·√k) — then the
sampler (TPE by default, seeded) searches lr log-uniformly in
[min(rules) / search_factor, max(rules) · search_factor].

**Objective** (minimised): the mean cross-entropy on ``eval_batches`` batches of the held-out
``eval`` split, computed by the job after its training steps (no grad, eval mode), at the new
batch size. Every trial is a real ``tc.run`` job in its own process and a stored run.

**Pruning**: every ``report_every`` steps the mean training loss of that window is reported
(``trial.report``); when the pruner says so, the job's stop event is set (the job ends
``interrupted``) and the trial is pruned. A trial whose loss became NaN/inf (``diverged``) or that
failed is marked FAIL with its reason in ``user_attrs``; the study goes on.

**Storage**: ``None`` keeps the study in memory; ``"store"`` puts it in tcbench's own SQLite file;
any Optuna storage URL (``"sqlite:///tune.db"``) persists it, and calling again with the same
``study_name`` resumes it: only the missing trials are run, and several processes may work on one
study at once. A URL is checked before any job starts (known dialect, driver installed, for SQLite a
writable file in an existing folder, the database opens); a bad one is a ``SpecError`` naming
``storage``. The URL is only ever stored or shown with its password as ``***``.

**Workers that die**: the process running a study writes its running trial's heartbeat every 10 s
(``HEARTBEAT_INTERVAL_S`` in ``_tuning_storage``). A trial whose heartbeat is older than the 60 s
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
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import pandas as pd

from ._preflight import check as preflight
from ._spec import JobSpec
from ._store import Store
from ._tuning_storage import BEAT_ATTR, fail_stale, heartbeat_on, lost_reasons, open_storage

TRIAL_COLUMNS = ["number", "lr", "value", "state", "rule", "status", "steps_run", "duration_s", "run_id", "reason"]


class _Either:
    """A stop flag that is set when the trial's own event or the user's event is."""

    def __init__(self, own: threading.Event, user: threading.Event | None) -> None:
        self.own, self.user = own, user

    def is_set(self) -> bool:
        return self.own.is_set() or (self.user is not None and self.user.is_set())

    def set(self) -> None:
        self.own.set()


@dataclass
class RetuneResult:
    """What :func:`retune_lr` found (figures over every finished trial of the study)."""

    spec: JobSpec
    new_batch_size: int
    k: float
    low: float
    high: float
    steps: int
    study_name: str
    storage: str | None
    best_lr: float | None
    best_value: float | None
    linear_lr: float
    linear_value: float | None
    sqrt_lr: float
    sqrt_value: float | None
    trials: pd.DataFrame
    intermediate: pd.DataFrame
    n_pruned: int
    n_failed: int
    wall_s: float
    total_steps: int
    grid_steps: int
    comparison_id: int | None = None
    study: Any = field(default=None, repr=False)

    def summary(self) -> pd.DataFrame:
        """The rules and the search side by side: lr, held-out loss, lr ÷ linear-rule lr."""
        rows = [("linear rule (lr·k)", self.linear_lr, self.linear_value),
                ("square-root rule (lr·√k)", self.sqrt_lr, self.sqrt_value),
                ("Optuna best", self.best_lr, self.best_value)]
        return pd.DataFrame([dict(guess=g, lr=lr, eval_loss=v, vs_linear=None if lr is None else lr / self.linear_lr)
                             for g, lr, v in rows])

    def plots(self) -> dict:
        """Plotly figures: ``history``, ``lr`` (objective vs lr, both rules marked), ``intermediate``."""
        from . import _tuning_plots as tp

        return {"history": tp.plot_history(tp.collect_history(self)),
                "lr": tp.plot_lr_objective(tp.collect_lr_objective(self), self.linear_lr, self.sqrt_lr, self.best_lr),
                "intermediate": tp.plot_intermediate(tp.collect_intermediate(self))}

    def __repr__(self) -> str:
        return (f"RetuneResult(batch {self.spec.batch_size}->{self.new_batch_size}, best_lr={self.best_lr}, "
                f"linear_lr={self.linear_lr:.3g}, sqrt_lr={self.sqrt_lr:.3g}, trials={len(self.trials)}, "
                f"pruned={self.n_pruned}, failed={self.n_failed})")


def rule_lrs(lr: float, old_batch: int, new_batch: int) -> tuple[float, float]:
    """(linear rule lr·k, square-root rule lr·√k) with k = new_batch / old_batch."""
    k = new_batch / old_batch
    return lr * k, lr * math.sqrt(k)


def _make_sampler(sampler: Any, seed: int, n_trials: int):
    import optuna

    if not isinstance(sampler, str):
        return sampler
    if sampler == "tpe":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=min(4, max(n_trials - 1, 1)))
    if sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise ValueError(f"sampler={sampler!r} is not allowed; use 'tpe', 'random' or an optuna sampler")


def _make_pruner(pruner: Any, steps: int):
    """'median': after the two rule trials, from half the steps on, stop trials worse than the median."""
    import optuna

    if not isinstance(pruner, str):
        return pruner
    if pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=steps // 2)
    if pruner == "halving":
        return optuna.pruners.SuccessiveHalvingPruner()
    if pruner == "none":
        return optuna.pruners.NopPruner()
    raise ValueError(f"pruner={pruner!r} is not allowed; use 'median', 'halving', 'none' or an optuna pruner")


def _check(spec: JobSpec, new_batch_size: int, n_trials: int, search_factor: float, eval_batches: int,
           steps: int) -> None:
    for name, value, low in (("new_batch_size", new_batch_size, 1), ("n_trials", n_trials, 1),
                             ("eval_batches", eval_batches, 1), ("steps", steps, 2)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name}={value!r} is not allowed; it must be a whole number >= {low}")
    if not (isinstance(search_factor, (int, float)) and search_factor >= 1 and math.isfinite(search_factor)):
        raise ValueError(f"search_factor={search_factor!r} is not allowed; use a finite number >= 1")


def _check_extras(extra_lrs: Sequence[float]) -> list[float]:
    extras = [float(x) for x in extra_lrs]
    if any(not (x > 0 and math.isfinite(x)) for x in extras):
        raise ValueError(f"extra_lrs={list(extra_lrs)!r} is not allowed; use finite learning rates > 0")
    return extras


def _trial_spec(spec: JobSpec, new_batch: int, lr: float, steps: int, eval_batches: int) -> JobSpec:
    return dataclasses.replace(spec, batch_size=new_batch, lr=lr, steps=steps, loss_every=1,
                               warmup_steps=min(spec.warmup_steps, steps - 1), eval_batches=eval_batches)


class _Lost(Exception):
    """This process's trial was failed by another one (its heartbeat looked stale) and retried there."""


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


def _objective(spec: JobSpec, ctx: dict) -> Callable:
    """The Optuna objective: one job per trial, pruned on the streamed training loss."""
    import optuna
    from optuna.exceptions import UpdateFinishedTrialError

    def objective(trial: "optuna.Trial") -> float:
        from ._runner import run

        lr = trial.suggest_float("lr", ctx["low"], ctx["high"], log=True)
        if ctx["heartbeat"]:   # a first beat now (Optuna's thread may not have written yet), then the mark
            ctx["storage"].record_heartbeat(trial._trial_id)
            ctx["storage"].set_trial_system_attr(trial._trial_id, BEAT_ATTR, True)
        job = _trial_spec(spec, ctx["new_batch"], lr, ctx["steps"], ctx["eval_batches"])
        own = threading.Event()
        window: list[float] = []
        state: dict = {"pruned_at": None}

        def observe(event: dict) -> None:
            ctx["observer"](event)
            rec = event.get("record") if event.get("type") == "step" else None
            if rec is None or rec.loss is None or own.is_set():
                return
            window.append(rec.loss)
            if (rec.step + 1) % ctx["report_every"] == 0:
                value = sum(window) / len(window)
                window.clear()
                if math.isfinite(value):
                    try:
                        trial.report(value, rec.step + 1)
                        prune = trial.should_prune()
                    except UpdateFinishedTrialError:   # another process took this trial for dead
                        ctx["lost"] = True
                        own.set()
                        return
                    if prune:
                        state["pruned_at"] = rec.step + 1
                        own.set()

        try:
            res = run(job, observe, _Either(own, ctx["stop"]), ctx["store"], ctx["comparison_id"], trial.number,
                      f"trial#{trial.number}")
        except KeyboardInterrupt:
            _interrupted(trial, lr, "interrupted by KeyboardInterrupt")
            raise
        if ctx["lost"] or (ctx["storage"] is not None
                           and ctx["storage"].get_trial(trial._trial_id).state.is_finished()):
            ctx["lost"] = True
            raise _Lost(f"trial {trial.number} was failed by another process and retried there")
        for key, val in (("run_id", res.run_id), ("status", res.status), ("steps_run", len(res.records)),
                         ("reason", res.error[:300])):
            trial.set_user_attr(key, val)
        ctx["observer"]({"type": "trial", "number": trial.number, "lr": lr, "status": res.status,
                         "pruned": state["pruned_at"] is not None, "eval_loss": res.extra.get("eval_loss")})
        if state["pruned_at"] is not None:
            trial.set_user_attr("status", "pruned")
            reason = f"pruned at step {state['pruned_at']}: training loss above the median"
            if res.status == "ok":   # the job's last steps were already in the pipe when the pruner decided
                reason += f"; the job had already finished its {len(res.records)} steps when the stop arrived"
            trial.set_user_attr("reason", reason)
            raise optuna.TrialPruned(f"pruned at step {state['pruned_at']} (lr={lr:.3g})")
        if res.status == "interrupted" and ctx["stop"] is not None and ctx["stop"].is_set():
            _interrupted(trial, lr, res.error or "stopped by the user")
            return float("nan")
        value = res.extra.get("eval_loss")
        if res.status != "ok" or value is None or not math.isfinite(value):
            if res.status == "ok":
                trial.set_user_attr("reason", f"no finite held-out loss ({value})")
            return float("nan")   # Optuna marks the trial FAIL; the study goes on
        return float(value)

    return objective


def _fixed_lr(t: Any) -> float | None:
    params = t.system_attrs.get("fixed_params") or t.params
    return params.get("lr")


def _counts(t: Any) -> bool:
    """A finished trial that counts toward n_trials: not one whose process died, nor one the user stopped."""
    status = t.user_attrs.get("status")
    return t.state.name in ("COMPLETE", "PRUNED") or (t.state.name == "FAIL" and bool(status)
                                                       and status != "interrupted")


def _prepare_study(study: Any, storage: Any, rules: dict[str, float]) -> None:
    """Fail (and retry) the trials of dead processes; enqueue the rule guesses that are not settled.

    A rule guess is settled by a trial that counts, is waiting, or runs in a live process (with a
    heartbeat; a dead one is retried by the heartbeat callback)."""
    fail_stale(study, storage)
    trials = study.get_trials(deepcopy=False)
    beat = heartbeat_on(storage)
    for name, lr in rules.items():
        if not any(_fixed_lr(t) == lr and (_counts(t) or t.state.name == "WAITING"
                                           or (beat and t.state.name == "RUNNING")) for t in trials):
            study.enqueue_trial({"lr": lr}, user_attrs={"rule": name})


def _optimize(study: Any, objective: Callable, ctx: dict, n_trials: int) -> None:
    """Run trials one at a time until the study holds ``n_trials`` that count (or ``stop`` is set).

    Trials running in other live processes are waited for, not duplicated; a dead one is failed and
    retried once its heartbeat is older than the grace period."""
    storage, stop = ctx["storage"], ctx["stop"]
    while not (stop is not None and stop.is_set()):
        fail_stale(study, storage)
        trials = study.get_trials(deepcopy=False)
        done = sum(_counts(t) for t in trials)
        running = sum(t.state.name == "RUNNING" for t in trials) if ctx["heartbeat"] else 0
        if done >= n_trials:
            return
        if done + running >= n_trials:   # the missing trials run elsewhere (or died there: wait for the grace)
            if stop is not None:
                stop.wait(min(storage.heartbeat_interval, 2))
            else:
                time.sleep(min(storage.heartbeat_interval, 2))
            continue
        ctx["lost"] = False
        try:
            study.optimize(objective, n_trials=1, gc_after_trial=False)
        except (_Lost, ValueError):   # Optuna cannot tell a trial another process failed: ValueError
            if not ctx["lost"]:
                raise


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


def trials_frame(study: Any) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(one row per trial, one row per reported intermediate value) of a study."""
    rows, inter = [], []
    trials = study.get_trials(deepcopy=False)
    lost = lost_reasons(trials)
    for t in trials:
        dur = None
        if t.datetime_start and t.datetime_complete:
            dur = (t.datetime_complete - t.datetime_start).total_seconds()
        rows.append(dict(number=t.number, lr=t.params.get("lr", _fixed_lr(t)), value=t.value, state=t.state.name,
                         rule=t.user_attrs.get("rule", ""), status=t.user_attrs.get("status", ""),
                         steps_run=t.user_attrs.get("steps_run", 0), duration_s=dur,
                         run_id=t.user_attrs.get("run_id"),
                         reason=lost.get(t.number, t.user_attrs.get("reason", ""))))
        inter += [dict(number=t.number, step=s, value=v, state=t.state.name)
                  for s, v in sorted(t.intermediate_values.items())]
    return (pd.DataFrame(rows, columns=TRIAL_COLUMNS),
            pd.DataFrame(inter, columns=["number", "step", "value", "state"]))


def _rule_value(trials: pd.DataFrame, lr: float) -> float | None:
    hit = trials[(trials["lr"] == lr) & (trials["state"] == "COMPLETE")]
    return None if hit.empty else float(hit["value"].iloc[0])


def retune_lr(spec: JobSpec, new_batch_size: int, n_trials: int = 12, storage: Any = None,
              study_name: str | None = None, sampler: Any = "tpe", steps: int | None = None, eval_batches: int = 8,
              search_factor: float = 4.0, observer: Callable[[dict], None] | None = None,
              stop: threading.Event | None = None, store: Store | None = None, seed: int = 0,
              pruner: Any = "median", report_every: int | None = None,
              extra_lrs: Sequence[float] = ()) -> RetuneResult:
    """Find the learning rate for ``new_batch_size``, starting from ``spec.lr`` at ``spec.batch_size``.

    Runs until the study holds ``n_trials`` trials that count (a resumed study only runs the rest;
    trials whose process died or that the user stopped do not count; see the module docstring).
    ``steps`` defaults to ``spec.steps``; the intermediate value is reported every ``report_every``
    steps (default steps // 10). ``extra_lrs``: your own guesses, enqueued after the two rules (the
    search range widens to include them). Observers get the runner's events plus ``{"type": "trial", ...}``.
    """
    import optuna

    steps = spec.steps if steps is None else steps
    _check(spec, new_batch_size, n_trials, search_factor, eval_batches, steps)
    spec = preflight(spec)   # once, before the study is created or any trial starts
    report_every = report_every or max(1, steps // 10)
    store = store or Store()
    linear, sqrt = rule_lrs(spec.lr, spec.batch_size, new_batch_size)
    extras = _check_extras(extra_lrs)
    low = min(min(linear, sqrt) / search_factor, *extras) if extras else min(linear, sqrt) / search_factor
    high = max(max(linear, sqrt) * search_factor, *extras) if extras else max(linear, sqrt) * search_factor
    backend_storage, url = open_storage(storage, store.path)   # a bad URL is a SpecError before any job starts
    name = study_name or (f"retune-{spec.model}-{spec.size}-{spec.backend}-b{spec.batch_size}-lr{spec.lr:g}"
                          f"-to-b{new_batch_size}-s{seed}")
    study = optuna.create_study(storage=backend_storage, study_name=name, direction="minimize", load_if_exists=True,
                                sampler=_make_sampler(sampler, seed, n_trials), pruner=_make_pruner(pruner, steps))
    _check_resume(study, dict(new_batch_size=new_batch_size, low=low, high=high, steps=steps,
                              eval_batches=eval_batches, spec=spec.to_json()))
    guesses = {"linear": linear, "sqrt": sqrt, **{f"extra{i}": lr for i, lr in enumerate(extras)}}
    _prepare_study(study, backend_storage, guesses)
    cid = store.insert_comparison("retune", spec, [spec.backend], n_trials,
                                  dict(study_name=name, storage=url, new_batch_size=new_batch_size, low=low, high=high))
    ctx = dict(low=low, high=high, new_batch=new_batch_size, steps=steps, eval_batches=eval_batches, store=store,
               report_every=report_every, stop=stop, observer=observer or (lambda e: None), comparison_id=cid,
               storage=backend_storage, heartbeat=heartbeat_on(backend_storage), lost=False)
    t0, status = time.monotonic(), "interrupted"   # unless the loop ends on its own
    try:
        _optimize(study, _objective(spec, ctx), ctx, n_trials)
        status = "interrupted" if stop is not None and stop.is_set() else "done"
    finally:
        result = _result(spec, study, new_batch_size, low, high, steps, url, time.monotonic() - t0, cid)
        store.finish_comparison(cid, status, {"study_name": name, "storage": url, "best_lr": result.best_lr,
                                              "best_value": result.best_value, "linear_lr": linear, "sqrt_lr": sqrt,
                                              "n_pruned": result.n_pruned, "total_steps": result.total_steps})
    return result


def _result(spec: JobSpec, study: Any, new_batch: int, low: float, high: float, steps: int, url: str | None,
            wall_s: float, cid: int) -> RetuneResult:
    trials, inter = trials_frame(study)
    linear, sqrt = rule_lrs(spec.lr, spec.batch_size, new_batch)
    counted = [_counts(t) for t in study.get_trials(deepcopy=False)]
    done = trials[pd.Series(counted, index=trials.index, dtype=bool)] if counted else trials
    complete = trials[trials["state"] == "COMPLETE"]
    best = complete.loc[complete["value"].idxmin()] if not complete.empty else None
    return RetuneResult(
        spec=spec, new_batch_size=new_batch, k=new_batch / spec.batch_size, low=low, high=high, steps=steps,
        study_name=study.study_name, storage=url,
        best_lr=None if best is None else float(best["lr"]), best_value=None if best is None else float(best["value"]),
        linear_lr=linear, linear_value=_rule_value(trials, linear), sqrt_lr=sqrt, sqrt_value=_rule_value(trials, sqrt),
        trials=trials, intermediate=inter, n_pruned=int((trials["state"] == "PRUNED").sum()),
        n_failed=int((trials["state"] == "FAIL").sum()), wall_s=wall_s,
        total_steps=int(done["steps_run"].fillna(0).sum()), grid_steps=len(done) * steps, comparison_id=cid,
        study=study)
