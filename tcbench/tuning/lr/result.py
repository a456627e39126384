"""What a learning-rate retune found (:class:`RetuneResult`), and how it is built from its study: the best trial
(over seeds when finalists were repeated) and, per guess, whether the best beats it beyond noise."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from tcbench.core.spec import JobSpec
from tcbench.tuning.lr.study import counts, lower_beyond_noise, trials_frame
from tcbench.tuning import plots as tp

FINALIST_COLUMNS = ["number", "lr", "rule", "seeds", "mean", "se", "values", "run_ids"]
GUESSES = {"prediction": "noise-scale prediction", "linear": "linear rule (lr·k)", "sqrt": "square-root rule (lr·√k)",
           "original": "original lr"}


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
    premise: Any = None        # tcbench.LrPremise: spec.lr's check at B0 (None: not checked)
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
        from optuna.trial import TrialState

        hit = self.trials[(self.trials["lr"] == lr) & (self.trials["state"] == TrialState.COMPLETE.name)]
        return {} if hit.empty else hit.iloc[0].to_dict()

    def _finalist(self, lr: float | None) -> dict | None:
        hit = self.finalists[self.finalists["lr"] == lr] if not self.finalists.empty else self.finalists
        return None if hit.empty or int(hit["seeds"].iloc[0]) < 2 else hit.iloc[0].to_dict()

    @property
    def premise_text(self) -> str:
        """Whether the starting rate's premise held, in words."""
        if self.premise is None:
            return "Learning-rate premise not checked (check_premise=True or tc.check_lr)."
        text = f"Premise: {self.premise.verdict}."
        if self.premise.held is False:
            text += f" The guesses start from {self.spec.lr:.3g}, not lr0 = {self.premise.lr0:.3g}."
        return text

    def describe(self) -> str:
        """The outcome in words: the budget, the best (or that nothing learned), the guesses it beats, and whether
        the starting rate's premise held."""
        return f"{self._outcome()} {self.premise_text}"

    def _outcome(self) -> str:
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

        return {"history": tp.plot_history(tp.collect_history(self)),
                "lr": tp.plot_lr_objective(tp.collect_lr_objective(self), self.linear_lr, self.sqrt_lr, self.best_lr),
                "intermediate": tp.plot_intermediate(tp.collect_intermediate(self))}

    def __repr__(self) -> str:
        return (f"RetuneResult(batch {self.spec.batch_size}->{self.new_batch_size}, best_lr={self.best_lr}, "
                f"linear_lr={self.linear_lr:.3g}, sqrt_lr={self.sqrt_lr:.3g}, trials={len(self.trials)}, "
                f"pruned={self.n_pruned}, failed={self.n_failed}, budget={self.budget})")


def _rule_value(trials: pd.DataFrame, lr: float) -> float | None:
    from optuna.trial import TrialState

    hit = trials[(trials["lr"] == lr) & (trials["state"] == TrialState.COMPLETE.name)]
    return None if hit.empty else float(hit["value"].iloc[0])


@dataclass(frozen=True)
class RetunePlan:
    """What a ``retune_lr`` call settled before its study runs: the trials' job and settings, and the guesses."""

    spec: JobSpec
    new_batch: int
    steps: int                 # each trial's
    budget: str
    low: float
    high: float
    guesses: dict
    prediction: Any
    note: str
    processes: tuple[int, int] | None
    sampler: str               # the sampler's name, as the result shows it
    premise: Any = None        # tcbench.LrPremise, when check_premise asked for it


def _beats_over_seeds(best: dict, other: dict) -> bool | None:
    """Whether ``best`` is lower than ``other`` beyond noise over the seeds both ran (paired by seed)."""
    common = [s for s in best["values"] if s in other["values"] and best["values"][s] is not None
              and other["values"][s] is not None]
    if len(common) < 2:
        return None
    return lower_beyond_noise([best["values"][s] for s in common], [other["values"][s] for s in common])


def _beats(best: Any, best_fin: dict | None, complete: pd.DataFrame, repeated: pd.DataFrame, guesses: dict,
           losses: dict) -> dict[str, bool | None]:
    """Per guess: whether the best is lower than it beyond noise (over seeds when both were repeated)."""
    beats: dict[str, bool | None] = {}
    if best is None:
        return beats
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
            beats[name] = lower_beyond_noise(mine, theirs)
        else:
            beats[name] = None
    return beats


def build_result(plan: RetunePlan, study: Any, url: str | None, wall_s: float, cid: int | None,
                 finals: pd.DataFrame | None = None) -> RetuneResult:
    """The study's outcome: its trials, the best (over seeds when finalists were repeated), what it beats."""
    from optuna.trial import TrialState

    trials, inter = trials_frame(study)
    finals = finals if finals is not None else pd.DataFrame(columns=FINALIST_COLUMNS)
    counted = [counts(t) for t in study.get_trials(deepcopy=False)]
    done = trials[pd.Series(counted, index=trials.index, dtype=bool)] if counted else trials
    complete = trials[trials["state"] == TrialState.COMPLETE.name]
    # nothing learned: no completed trial's held-out loss fell beyond noise (None: not evaluated before: kept)
    nothing = not complete.empty and bool(complete["learned"].map(lambda v: v is False).all())
    best = complete.loc[complete["value"].idxmin()] if not complete.empty and not nothing else None
    repeated = finals[(finals["seeds"] > 1) & finals["mean"].notna()] if not finals.empty else finals
    best_fin = None
    if best is not None and not repeated.empty:   # the finalist with the lowest mean over seeds
        best_fin = repeated.loc[repeated["mean"].astype(float).idxmin()].to_dict()
        best = complete[complete["number"] == best_fin["number"]].iloc[0]
    losses = {t.number: t.user_attrs.get("eval_losses") for t in study.get_trials(deepcopy=False)}
    beats = _beats(best, best_fin, complete, repeated, plan.guesses, losses)
    if best_fin is not None:
        best_value, best_se = best_fin["mean"], best_fin["se"]
    else:
        best_value = None if best is None else float(best["value"])
        best_se = (None if best is None or best.get("value_se") is None or pd.isna(best.get("value_se"))
                   else float(best["value_se"]))
    spec = plan.spec
    return RetuneResult(
        spec=spec, new_batch_size=plan.new_batch, k=plan.new_batch / spec.batch_size, low=plan.low, high=plan.high,
        steps=plan.steps, budget=plan.budget, study_name=study.study_name, storage=url, guesses=plan.guesses,
        prediction=plan.prediction, prediction_note=plan.note, best_lr=None if best is None else float(best["lr"]),
        best_value=best_value, best_se=best_se, nothing_learned=nothing, beats=beats, trials=trials,
        intermediate=inter, n_pruned=int((trials["state"] == TrialState.PRUNED.name).sum()),
        n_failed=int((trials["state"] == TrialState.FAIL.name).sum()), wall_s=wall_s,
        total_steps=int(done["steps_run"].fillna(0).sum()), grid_steps=len(done) * plan.steps, sampler=plan.sampler,
        comparison_id=cid, processes=plan.processes, finalists=finals, premise=plan.premise, study=study)
