"""Retune the learning rate after a batch-size change, with Optuna — starting from a prediction.

From ``spec.lr`` at ``spec.batch_size`` (B0) and k = new_batch_size / B0, four guesses are enqueued first: the
noise-scale prediction (``tcbench.tuning.noise``: the gradient noise scale measured on the native job, stored or
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
``interrupted``) and the trial is pruned. The default (``"halving"``, :class:`BudgetedHalving`) is successive
halving with its budget fixed in advance: one decision, at a third of the steps (``min_resource``; judged earlier,
the ranking follows how fast a rate falls at first, not where it ends: the short-horizon bias of Wu et al. 2018,
which favours small rates, while large ones that fall fast and then stall lead early too): a trial goes on only when
its training loss there is among the best third of the trials that reached that step (the best so far while fewer
than six have: Optuna's rule) and fewer than ``full_trials(n_trials)`` = max(2, ⌈n_trials / 3⌉) trials went on before it. Run one
trial at a time, Optuna's own pruner lets every trial that is best so far at the rung run to the end: on tiny GPT-2
at k = 8 the linear and square-root trials each led there, took a full trial and lost. No trial is pruned after that
step (``prune_until``): a later stop saves less, and the noisy training loss would overrule the held-out loss that
decides a few steps later. A trial whose loss became NaN/inf (``diverged``) or that
failed is marked FAIL with its reason in ``user_attrs``; the study goes on.

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
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import pandas as pd

from tcbench.runner.preflight import check as preflight
from tcbench.core.spec import JobSpec
from tcbench.store.api import Store
from tcbench.tuning.storage import BEAT_ATTR, fail_stale, heartbeat_on, lost_reasons, open_storage
from tcbench.tuning.workers import Claim, check_workers, remember, run_workers

TRIAL_COLUMNS = ["number", "lr", "value", "value_se", "learned", "state", "rule", "status", "steps_run", "duration_s",
                 "run_id", "reason"]
FINALIST_COLUMNS = ["number", "lr", "rule", "seeds", "mean", "se", "values", "run_ids"]
BUDGETS = ("equal_samples", "equal_steps")
GUESSES = {"prediction": "noise-scale prediction", "linear": "linear rule (lr·k)", "sqrt": "square-root rule (lr·√k)",
           "original": "original lr"}


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
    steps: int                 # each trial's training steps
    budget: str                # "equal_samples" (steps = base steps × B0/B1) or "equal_steps"
    study_name: str
    storage: str | None
    guesses: dict              # name ("prediction", "linear", "sqrt", "original", "extraN") -> lr, enqueue order
    prediction: Any            # tcbench.LrPrediction, or None (why: prediction_note)
    prediction_note: str
    best_lr: float | None
    best_value: float | None
    best_se: float | None
    nothing_learned: bool
    beats: dict                # guess name -> True (best is lower beyond noise), False (within noise), None (unknown)
    trials: pd.DataFrame
    intermediate: pd.DataFrame
    n_pruned: int
    n_failed: int
    wall_s: float
    total_steps: int
    grid_steps: int
    sampler: str = "auto"
    comparison_id: int | None = None
    processes: tuple[int, int] | None = None   # (old, new) data-parallel processes: retune_lr(..., nproc=N)
    finalists: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=FINALIST_COLUMNS))
    study: Any = field(default=None, repr=False)

    @property
    def linear_lr(self) -> float:
        return self.guesses["linear"]

    @property
    def sqrt_lr(self) -> float:
        return self.guesses["sqrt"]

    @property
    def linear_value(self) -> float | None:
        return self.value_of("linear")

    @property
    def sqrt_value(self) -> float | None:
        return self.value_of("sqrt")

    def value_of(self, guess: str) -> float | None:
        """The held-out loss of a guess: its mean over seeds when it was a finalist, else its completed trial's
        (None: not run, pruned or failed)."""
        if guess not in self.guesses:
            return None
        fin = self._finalist(self.guesses[guess])
        return fin["mean"] if fin else _rule_value(self.trials, self.guesses[guess])

    def summary(self) -> pd.DataFrame:
        """Each guess and the search side by side: lr, held-out loss ± SE (over seeds for a finalist, else over
        held-out batches), the seeds, lr ÷ original lr, and whether the best is lower than it beyond noise."""
        rows = []
        for name, lr in self.guesses.items():
            hit, fin = self._trial(lr), self._finalist(lr)
            rows.append(dict(guess=GUESSES.get(name, f"your guess {name[5:]}" if name.startswith("extra") else name),
                             lr=lr, eval_loss=self.value_of(name),
                             eval_loss_se=fin["se"] if fin else hit.get("value_se"), seeds=fin["seeds"] if fin else 1,
                             learned=hit.get("learned"), vs_original=lr / self.spec.lr,
                             best_beats_it={True: "yes", False: "no (within noise)"}.get(self.beats.get(name), "—")))
        best = self._trial(self.best_lr) if self.best_lr is not None else {}
        fin = self._finalist(self.best_lr) if self.best_lr is not None else None
        rows.append(dict(guess="Optuna best" if not self.nothing_learned else "Optuna best: none (nothing learned)",
                         lr=self.best_lr, eval_loss=self.best_value, eval_loss_se=self.best_se,
                         seeds=fin["seeds"] if fin else 1, learned=best.get("learned"),
                         vs_original=None if self.best_lr is None else self.best_lr / self.spec.lr, best_beats_it="—"))
        return pd.DataFrame(rows)

    def _trial(self, lr: float | None) -> dict:
        hit = self.trials[(self.trials["lr"] == lr) & (self.trials["state"] == "COMPLETE")]
        return {} if hit.empty else hit.iloc[0].to_dict()

    def _finalist(self, lr: float | None) -> dict | None:
        hit = self.finalists[self.finalists["lr"] == lr] if not self.finalists.empty else self.finalists
        return None if hit.empty or int(hit["seeds"].iloc[0]) < 2 else hit.iloc[0].to_dict()

    def describe(self) -> str:
        """The outcome in words: the budget, the best (or that nothing learned), and the guesses it beats."""
        budget = (f"equal samples ({self.steps} steps at batch {self.new_batch_size} = {self.spec.steps} at "
                  f"{self.spec.batch_size})" if self.budget == "equal_samples" else f"equal steps ({self.steps})")
        if self.processes:
            n0, n1 = self.processes
            budget += (f"; for {n1} processes (global batch {self.new_batch_size}, from {n0}): every trial ran as one "
                       "process at the global batch, the same updates as DDP's averaged gradients")
        if self.nothing_learned:
            return (f"Nothing learned: no trial's held-out loss fell beyond noise ({budget}); no best is named — "
                    "train longer (steps) or widen the range")
        if self.best_lr is None:
            return f"No trial completed ({budget})."
        beaten = [GUESSES.get(n, n) for n, b in self.beats.items() if b]
        tied = [GUESSES.get(n, n) for n, b in self.beats.items() if b is False]
        text = f"Best lr {self.best_lr:.3g}: held-out loss {self.best_value:.4f}"
        text += f" ± {self.best_se:.4f}" if self.best_se is not None else ""
        seeds = int(self.finalists["seeds"].max()) if not self.finalists.empty else 1
        text += (f" (the mean over {seeds} seeds of the {len(self.finalists)} finalists ± its standard error; "
                 f"{budget})." if seeds > 1 else f" ({budget}).")
        if beaten:
            text += f" Beats beyond noise: {', '.join(beaten)}."
        if tied:
            text += f" Within noise of: {', '.join(tied)}."
        return text

    def plots(self) -> dict:
        """Plotly figures: ``history``, ``lr`` (objective vs lr, both rules marked), ``intermediate``."""
        from tcbench.tuning import plots as tp

        return {"history": tp.plot_history(tp.collect_history(self)),
                "lr": tp.plot_lr_objective(tp.collect_lr_objective(self), self.linear_lr, self.sqrt_lr, self.best_lr),
                "intermediate": tp.plot_intermediate(tp.collect_intermediate(self))}

    def __repr__(self) -> str:
        return (f"RetuneResult(batch {self.spec.batch_size}->{self.new_batch_size}, best_lr={self.best_lr}, "
                f"linear_lr={self.linear_lr:.3g}, sqrt_lr={self.sqrt_lr:.3g}, trials={len(self.trials)}, "
                f"pruned={self.n_pruned}, failed={self.n_failed}, budget={self.budget})")


def rule_lrs(lr: float, old_batch: int, new_batch: int) -> tuple[float, float]:
    """(linear rule lr·k, square-root rule lr·√k) with k = new_batch / old_batch."""
    k = new_batch / old_batch
    return lr * k, lr * math.sqrt(k)


SAMPLERS = ("auto", "gp", "tpe", "random")
PRUNERS = ("halving", "median", "none")


def sampler_name(sampler: Any, n_trials: int) -> str:
    """'auto' is Optuna's GPSampler (a Gaussian process: few trials, one dimension) up to 20 trials, else TPE."""
    if sampler == "auto":
        import importlib.util

        return "gp" if n_trials <= 20 and importlib.util.find_spec("scipy") is not None else "tpe"
    return sampler


def _make_sampler(sampler: Any, seed: int, n_trials: int):
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


PROMOTED_ATTR = "tcbench:promoted"      # a trial that went on past the rung (system attr, counted by every worker)
PRUNE_REASON_ATTR = "tcbench:prune_reason"


class BudgetedHalving:
    """Successive halving with its budget fixed in advance (see the module docstring, "Pruning"); an Optuna pruner.

    ``rung``: the step of the one decision; ``n_trials``: the study's size, of which ``full_trials(n_trials)`` may go
    on past the rung. A trial that goes on is marked in the study (``PROMOTED_ATTR``), so workers sharing a study
    count the same promotions; a trial the user stopped or whose process died does not use one up. Workers reaching
    the rung at the same moment may each take the last place (at most one extra full trial per worker)."""

    eta = 3   # the reduction factor: the best third goes on

    def __init__(self, rung: int, n_trials: int) -> None:
        self.rung, self.n_trials, self.cap = rung, n_trials, full_trials(n_trials)

    def prune(self, study: Any, trial: Any) -> bool:
        if trial.last_step != self.rung:
            return False   # one decision, at the rung
        value = trial.intermediate_values[self.rung]
        others = [t for t in study.get_trials(deepcopy=False) if t.number != trial.number
                  and (t.state.name == "RUNNING" or _counts(t))]
        values = sorted([t.intermediate_values[self.rung] for t in others if self.rung in t.intermediate_values]
                        + [value])
        bar = values[max(len(values) // self.eta - 1, 0)]
        went_on = sum(1 for t in others if t.system_attrs.get(PROMOTED_ATTR) or t.state.name == "COMPLETE")
        why = None
        if value > bar:
            why = (f"its training loss there ({value:.4g}) was not among the best third of the {len(values)} trials "
                   f"that reached it (the best so far while fewer than six have: {bar:.4g})")
        elif went_on >= self.cap:
            why = (f"its training loss there ({value:.4g}) ranked high enough, but the {self.cap} of the {self.n_trials} "
                   f"trials that may train past it had gone on already")
        study._storage.set_trial_system_attr(trial._trial_id, PRUNE_REASON_ATTR if why else PROMOTED_ATTR, why or True)
        return why is not None


def _report_now(step: int, report_every: int, first_rung: int) -> bool:
    """Report the window's mean every ``report_every`` steps and at the first rung itself (so halving decides there,
    not at the next multiple of ``report_every``)."""
    return step % report_every == 0 or step == first_rung


def _make_pruner(pruner: Any, steps: int, n_trials: int):
    """'halving': :class:`BudgetedHalving` at a third of the steps; 'median': after two trials, from half the
    steps on, stop trials worse than the median; 'none'."""
    import optuna

    if not isinstance(pruner, str):
        return pruner
    if pruner == "halving":
        return BudgetedHalving(min_resource(steps), n_trials)
    if pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=steps // 2)
    if pruner == "none":
        return optuna.pruners.NopPruner()
    raise ValueError(f"pruner={pruner!r} is not allowed; use {', '.join(map(repr, PRUNERS))} or an optuna pruner")


def _check(spec: JobSpec, new_batch_size: int, n_trials: int, search_factor: float, eval_batches: int,
           steps: int, seeds: int = 1, finalists: int = 1) -> None:
    for name, value, low in (("new_batch_size", new_batch_size, 1), ("n_trials", n_trials, 1),
                             ("eval_batches", eval_batches, 1), ("steps", steps, 2), ("seeds", seeds, 1),
                             ("finalists", finalists, 1)):
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
        from tcbench.runner.process import run

        lr = trial.suggest_float("lr", ctx["low"], ctx["high"], log=True)
        if ctx.get("claim") is not None:   # the trial is RUNNING: other workers may count it and start theirs
            ctx["claim"].release()
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
            if _report_now(rec.step + 1, ctx["report_every"], ctx["first_rung"]):
                value = sum(window) / len(window)
                window.clear()
                if math.isfinite(value):
                    try:
                        trial.report(value, rec.step + 1)
                        prune = rec.step + 1 <= ctx["prune_until"] and trial.should_prune()
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
                         ("reason", res.error[:300]), ("value_se", res.extra.get("eval_loss_se")),
                         ("eval_losses", res.extra.get("eval_losses")), ("learned", learned(res.extra))):
            trial.set_user_attr(key, val)
        ctx["observer"]({"type": "trial", "number": trial.number, "lr": lr, "status": res.status,
                         "pruned": state["pruned_at"] is not None, "eval_loss": res.extra.get("eval_loss")})
        if state["pruned_at"] is not None:
            trial.set_user_attr("status", "pruned")
            why = trial.study._storage.get_trial(trial._trial_id).system_attrs.get(PRUNE_REASON_ATTR)
            reason = f"pruned at step {state['pruned_at']}: " + (why or "its training loss ranked among the worst there")
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


def learned(extra: dict) -> bool | None:
    """Whether the held-out loss fell beyond noise: the mean drop over the same batches (before the first step →
    after the last) exceeds 2 standard errors of the paired differences. None: not evaluated before and after."""
    before, after = extra.get("eval_losses_initial"), extra.get("eval_losses")
    if not before or not after or len(before) != len(after):
        return None
    return _lower_beyond_noise(after, before)


def _lower_beyond_noise(a: Sequence[float], b: Sequence[float]) -> bool:
    """Whether losses ``a`` are lower than ``b`` (the same batches, paired) by more than 2 standard errors."""
    import statistics

    diff = [y - x for x, y in zip(a, b)]
    mean = sum(diff) / len(diff)
    se = statistics.stdev(diff) / math.sqrt(len(diff)) if len(diff) > 1 else 0.0
    return mean > 0 and mean > 2 * se


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
    queued: set[float] = set()
    for name, lr in rules.items():
        if lr not in queued and not any(_fixed_lr(t) == lr and (_counts(t) or t.state.name == "WAITING"
                                                               or (beat and t.state.name == "RUNNING")) for t in trials):
            study.enqueue_trial({"lr": lr}, user_attrs={"rule": name})
        queued.add(lr)


def _optimize(study: Any, objective: Callable, ctx: dict, n_trials: int) -> None:
    """Run trials one at a time until the study holds ``n_trials`` that count (or ``stop`` is set).

    Trials running in other live processes are waited for, not duplicated; a dead one is failed and
    retried once its heartbeat is older than the grace period."""
    storage, stop = ctx["storage"], ctx["stop"]
    while not (stop is not None and stop.is_set()):
        with ctx.get("claim") or Claim():   # workers on one server count and start trials one at a time
            fail_stale(study, storage)
            trials = study.get_trials(deepcopy=False)
            done = sum(_counts(t) for t in trials)
            running = sum(t.state.name == "RUNNING" for t in trials) if ctx["heartbeat"] else 0
            if done >= n_trials:
                return
            wait = done + running >= n_trials   # the missing trials run elsewhere (or died there: wait for the grace)
            if not wait:
                ctx["lost"] = False
                try:   # the objective releases the claim as soon as its trial is RUNNING
                    study.optimize(objective, n_trials=1, gc_after_trial=False)
                except (_Lost, ValueError):   # Optuna cannot tell a trial another process failed: ValueError
                    if not ctx["lost"]:
                        raise
        if wait:
            if stop is not None:
                stop.wait(min(storage.heartbeat_interval, 2))
            else:
                time.sleep(min(storage.heartbeat_interval, 2))


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
        rows.append(dict(number=t.number, lr=t.params.get("lr", _fixed_lr(t)), value=t.value,
                         value_se=t.user_attrs.get("value_se"), learned=t.user_attrs.get("learned"), state=t.state.name,
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


def _seed_stats(values: dict) -> tuple[float | None, float | None]:
    """(mean, standard error) over the seeds' finite held-out losses."""
    import statistics

    xs = [v for v in values.values() if v is not None and math.isfinite(v)]
    if not xs:
        return None, None
    return sum(xs) / len(xs), (statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else None)


def _repeat_finalists(spec: JobSpec, study: Any, ctx: dict, seeds: int, count: int) -> pd.DataFrame:
    """Train the ``count`` best completed trials' learning rates again with seeds spec.seed+1 … (``seeds`` in all).

    Each repeat is a stored run of the study's comparison; its result is kept in the study (user attr
    ``finalists``), so a resumed study does not train it again."""
    from tcbench.runner.process import run

    trials, _ = trials_frame(study)
    complete = trials[(trials["state"] == "COMPLETE") & trials["value"].notna()].sort_values("value")
    kept = dict(study.user_attrs.get("finalists") or {})
    rows = []
    for t in complete.drop_duplicates("lr").head(count).to_dict("records"):
        lr, key = float(t["lr"]), repr(float(t["lr"]))
        values, run_ids = {spec.seed: float(t["value"])}, {spec.seed: t["run_id"]}
        for i in range(1, seeds):
            seed = (spec.seed + i) % 2 ** 32
            hit = kept.get(key, {}).get(str(seed))
            if hit is None:
                if ctx["stop"] is not None and ctx["stop"].is_set():
                    break
                job = _trial_spec(spec.replace(seed=seed), ctx["new_batch"], lr, ctx["steps"], ctx["eval_batches"])
                res = run(job, ctx["observer"], ctx["stop"], ctx["store"], ctx["comparison_id"], int(t["number"]),
                          f"finalist#{int(t['number'])} seed {seed}")
                if res.status == "interrupted" and ctx["stop"] is not None and ctx["stop"].is_set():
                    break   # the user stopped it: not a result, measured again on resume
                value = res.extra.get("eval_loss") if res.status == "ok" else None
                hit = {"value": value, "run_id": res.run_id, "status": res.status}
                kept.setdefault(key, {})[str(seed)] = hit
                study.set_user_attr("finalists", kept)
                ctx["observer"]({"type": "finalist", "number": int(t["number"]), "lr": lr, "seed": seed,
                                 "status": res.status, "eval_loss": value})
            values[seed], run_ids[seed] = hit["value"], hit["run_id"]
        mean, se = _seed_stats(values)
        rows.append(dict(number=int(t["number"]), lr=lr, rule=t["rule"], seeds=len(values), mean=mean, se=se,
                         values=values, run_ids=run_ids))
    return pd.DataFrame(rows, columns=FINALIST_COLUMNS)


def _beats_over_seeds(best: dict, other: dict) -> bool | None:
    """Whether ``best`` is lower than ``other`` beyond noise over the seeds both ran (paired by seed)."""
    common = [s for s in best["values"] if s in other["values"] and best["values"][s] is not None
              and other["values"][s] is not None]
    if len(common) < 2:
        return None
    return _lower_beyond_noise([best["values"][s] for s in common], [other["values"][s] for s in common])


def retune_lr(spec: JobSpec, new_batch_size: int | None = None, n_trials: int = 12, storage: Any = None,
              study_name: str | None = None, sampler: Any = "auto", steps: int | None = None, eval_batches: int = 8,
              search_factor: float = 4.0, observer: Callable[[dict], None] | None = None,
              stop: threading.Event | None = None, store: Store | None = None, seed: int = 0,
              pruner: Any = "halving", report_every: int | None = None,
              extra_lrs: Sequence[float] = (), budget: str = "equal_samples", noise: Any = True,
              optimizer: str = "adam", seeds: int = 1, finalists: int = 3, *,
              nproc: int | None = None, n_workers: int = 1) -> RetuneResult:
    """Find the learning rate for ``new_batch_size``, starting from ``spec.lr`` at ``spec.batch_size``.

    Data parallel: the batches are global ones. ``nproc=N`` instead of ``new_batch_size`` retunes for the same
    per-process batch on N processes (global batch ``spec.batch_size × N``, from ``spec.global_batch``); every
    trial then runs as one process at the global batch (``tcbench.tuning.noise.one_process``: the same updates,
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
    get the runner's events plus ``{"type": "trial" | "prediction" | "finalist", ...}``.

    ``n_workers=N`` runs the trials in N worker processes forked from this one, on one study in a PostgreSQL
    ``storage`` (``tcbench.tuning.workers``; ``tcbench tune-worker`` joins from elsewhere); their events reach
    ``observer`` here, in this process, as they happen, and ``stop`` reaches them within a second.
    """
    import optuna

    from tcbench.tuning.noise import one_process
    from tcbench.tuning.prediction import target_batch

    processes = None if nproc is None else (spec.nproc, nproc)
    new_batch_size = target_batch(spec, new_batch_size, nproc)
    spec = one_process(spec)
    base = spec.steps if steps is None else steps
    _check(spec, new_batch_size, n_trials, search_factor, eval_batches, base, seeds, finalists)
    if budget not in BUDGETS:
        raise ValueError(f"budget={budget!r} is not allowed; allowed: {', '.join(map(repr, BUDGETS))}")
    if sampler_name(sampler, n_trials) not in SAMPLERS and isinstance(sampler, str):
        raise ValueError(f"sampler={sampler!r} is not allowed; use {', '.join(map(repr, SAMPLERS))} or an optuna sampler")
    if isinstance(pruner, str) and pruner not in PRUNERS:
        raise ValueError(f"pruner={pruner!r} is not allowed; use {', '.join(map(repr, PRUNERS))} or an optuna pruner")
    from tcbench.tuning.prediction import OPTIMIZERS

    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer={optimizer!r} is not allowed; allowed: {', '.join(map(repr, OPTIMIZERS))}")
    trial_steps = base if budget == "equal_steps" else max(2, round(base * spec.batch_size / new_batch_size))
    spec = preflight(spec)   # once, before the study is created or any trial starts
    report_every = report_every or max(1, trial_steps // 10)
    store = store or Store()
    extras = _check_extras(extra_lrs)
    backend_storage, url = open_storage(storage, store.url())   # a bad URL is a SpecError before any job starts
    check_workers(n_workers, storage, backend_storage, url)
    notify = observer or (lambda e: None)
    prediction, note = _predict(spec, new_batch_size, noise, optimizer, store, notify, stop, processes)
    linear, sqrt = rule_lrs(spec.lr, spec.batch_size, new_batch_size)
    guesses: dict[str, float] = {}
    for name, lr in ((("prediction", prediction.lr),) if prediction else ()) + (
            ("linear", linear), ("sqrt", sqrt), ("original", spec.lr), *((f"extra{i}", x) for i, x in enumerate(extras))):
        guesses[name] = lr   # a guess equal to an earlier one shares its trial (_prepare_study enqueues it once)
    low, high = min(guesses.values()) / search_factor, max(guesses.values()) * search_factor
    name = study_name or (f"retune-{spec.model}-{spec.size}-{spec.backend}-b{spec.batch_size}-lr{spec.lr:g}"
                          f"-to-b{new_batch_size}-s{seed}")
    study = optuna.create_study(storage=backend_storage, study_name=name, direction="minimize", load_if_exists=True,
                                sampler=_make_sampler(sampler, seed, n_trials),
                                pruner=_make_pruner(pruner, trial_steps, n_trials))
    _check_resume(study, dict(new_batch_size=new_batch_size, low=low, high=high, steps=trial_steps, budget=budget,
                              eval_batches=eval_batches, spec=spec.to_json()))
    remember(study, n_trials=n_trials, seed=seed, report_every=report_every,
             sampler=sampler if isinstance(sampler, str) else None, pruner=pruner if isinstance(pruner, str) else None)
    claim = Claim(backend_storage, study._study_id)   # PostgreSQL: one process at a time enqueues or starts trials
    with claim:
        _prepare_study(study, backend_storage, guesses)
    cid = store.insert_comparison("retune", spec, [spec.backend], n_trials,
                                  dict(study_name=name, storage=url, new_batch_size=new_batch_size, low=low, high=high,
                                       budget=budget, steps=trial_steps, guesses=guesses))
    ctx = dict(low=low, high=high, new_batch=new_batch_size, steps=trial_steps, eval_batches=eval_batches, store=store,
               report_every=report_every, stop=stop, observer=notify, comparison_id=cid,
               first_rung=min_resource(trial_steps), prune_until=prune_until(pruner, trial_steps),
               storage=backend_storage, heartbeat=heartbeat_on(backend_storage), lost=False, claim=claim)
    t0, status, finals = time.monotonic(), "interrupted", None   # interrupted unless the loop ends on its own
    try:
        run_workers(study, ctx, n_trials, n_workers, storage, lambda c: _objective(spec, c))
        if seeds > 1 and not (stop is not None and stop.is_set()):
            finals = _repeat_finalists(spec, study, ctx, seeds, finalists)
        status = "interrupted" if stop is not None and stop.is_set() else "done"
    finally:
        result = _result(spec, study, new_batch_size, low, high, trial_steps, url, time.monotonic() - t0, cid,
                         budget=budget, guesses=guesses, prediction=prediction, note=note,
                         sampler=sampler_name(sampler, n_trials) if isinstance(sampler, str) else type(sampler).__name__,
                         finals=finals, processes=processes)
        store.finish_comparison(cid, status, {"study_name": name, "storage": url, "best_lr": result.best_lr,
                                              "best_value": result.best_value, "linear_lr": linear, "sqrt_lr": sqrt,
                                              "predicted_lr": prediction.lr if prediction else None,
                                              "nothing_learned": result.nothing_learned, "budget": budget,
                                              "n_pruned": result.n_pruned, "total_steps": result.total_steps})
        claim.close()
    return result


def _predict(spec: JobSpec, new_batch: int, noise: Any, optimizer: str, store: Store, notify: Callable,
             stop: Any, processes: tuple[int, int] | None = None) -> tuple[Any, str]:
    """(the noise-scale prediction or None, why not); measuring the noise scale is one native job when needed."""
    from tcbench.tuning.noise import NoiseScale, noise_scale, stored_noise_scale
    from tcbench.tuning.prediction import predict

    if noise is False or noise is None:
        return None, "no prediction asked for (noise=False)"
    if not isinstance(noise, (NoiseScale, bool)):
        raise ValueError(f"noise={noise!r} is not allowed; use True (stored or measured), False or a tcbench.NoiseScale")
    if noise is True:
        noise = stored_noise_scale(spec, store)
    if noise is None:
        if spec.backend != "eager" or spec.precision != "fp32" or spec.batch_size % 2:
            return None, (f"the noise scale is measured on an eager fp32 job with an even batch; this one is "
                          f"{spec.backend} {spec.precision} at batch {spec.batch_size}")
        try:
            noise = noise_scale(spec, 2, notify, stop, store)
        except RuntimeError as exc:
            return None, str(exc)
    p = predict(noise, spec.lr, spec.batch_size, new_batch, optimizer, processes)
    notify({"type": "prediction", "lr": p.lr, "low": p.low, "high": p.high, "b_noise": noise.b_simple,
            "text": p.describe()})
    return p, ""


def _result(spec: JobSpec, study: Any, new_batch: int, low: float, high: float, steps: int, url: str | None,
            wall_s: float, cid: int, budget: str, guesses: dict, prediction: Any, note: str,
            sampler: str, finals: pd.DataFrame | None = None,
            processes: tuple[int, int] | None = None) -> RetuneResult:
    trials, inter = trials_frame(study)
    finals = finals if finals is not None else pd.DataFrame(columns=FINALIST_COLUMNS)
    counted = [_counts(t) for t in study.get_trials(deepcopy=False)]
    done = trials[pd.Series(counted, index=trials.index, dtype=bool)] if counted else trials
    complete = trials[trials["state"] == "COMPLETE"]
    # nothing learned: no completed trial's held-out loss fell beyond noise (None: not evaluated before: kept)
    nothing = not complete.empty and bool(complete["learned"].map(lambda v: v is False).all())
    best = complete.loc[complete["value"].idxmin()] if not complete.empty and not nothing else None
    repeated = finals[(finals["seeds"] > 1) & finals["mean"].notna()] if not finals.empty else finals
    best_fin = None
    if best is not None and not repeated.empty:   # the finalist with the lowest mean over seeds
        best_fin = repeated.loc[repeated["mean"].astype(float).idxmin()].to_dict()
        best = complete[complete["number"] == best_fin["number"]].iloc[0]
    losses = {t.number: t.user_attrs.get("eval_losses") for t in study.get_trials(deepcopy=False)}
    beats: dict[str, bool | None] = {}
    if best is not None:
        mine = losses.get(int(best["number"]))
        for name, lr in guesses.items():
            hit = complete[complete["lr"] == lr]
            fin = repeated[repeated["lr"] == lr] if not repeated.empty else repeated
            theirs = losses.get(int(hit["number"].iloc[0])) if not hit.empty else None
            if hit.empty or float(hit["lr"].iloc[0]) == float(best["lr"]):
                beats[name] = None
            elif best_fin is not None and not fin.empty:   # both repeated: over the seeds
                beats[name] = _beats_over_seeds(best_fin, fin.iloc[0].to_dict())
            elif mine and theirs and len(mine) == len(theirs):
                beats[name] = _lower_beyond_noise(mine, theirs)
            else:
                beats[name] = None
    if best_fin is not None:
        best_value, best_se = best_fin["mean"], best_fin["se"]
    else:
        best_value = None if best is None else float(best["value"])
        best_se = (None if best is None or best.get("value_se") is None or pd.isna(best.get("value_se"))
                   else float(best["value_se"]))
    return RetuneResult(
        spec=spec, new_batch_size=new_batch, k=new_batch / spec.batch_size, low=low, high=high, steps=steps,
        budget=budget, study_name=study.study_name, storage=url, guesses=guesses, prediction=prediction,
        prediction_note=note, best_lr=None if best is None else float(best["lr"]), best_value=best_value,
        best_se=best_se, nothing_learned=nothing, beats=beats, trials=trials, intermediate=inter,
        n_pruned=int((trials["state"] == "PRUNED").sum()), n_failed=int((trials["state"] == "FAIL").sum()),
        wall_s=wall_s, total_steps=int(done["steps_run"].fillna(0).sum()), grid_steps=len(done) * steps,
        sampler=sampler, comparison_id=cid, processes=processes, finalists=finals, study=study)
