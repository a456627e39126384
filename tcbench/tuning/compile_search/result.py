"""What ``tune_compile`` found (``CompileSearch``: the trials, the fastest configuration that kept loss parity and
the answer in one sentence), and its confirmation: native, the default and the best configuration in alternating
rounds (``compare_configs``), read as the best one's speedup over native and over the default, with intervals."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

import pandas as pd

from tcbench.core.spec import JobSpec
from tcbench.measure.interval import EQUIVALENCE_CONFIDENCE, ratio_interval
from tcbench.measure.metrics import EQUIVALENCE, steady, verdict
from tcbench.store.api import Store
from tcbench.tuning.compile_search.space import CompileConfig, size_of
from tcbench.comparison import compare_configs

NO_TRIAL_IN_BUDGET = "budget: no trial finished"   # how ``budget_words`` begins (search.py)


@dataclass
class CompileSearch:
    """What ``tune_compile`` found: every configuration tried (``trials``), the fastest that kept loss parity
    (``best``), and — from the confirmation's alternating rounds — its speedup over native and over the default
    compiled configuration, each with its 95 % interval and verdict."""

    spec: JobSpec                                   # the native job (eager)
    space: dict[str, tuple]
    default: CompileConfig
    trials: pd.DataFrame
    best: CompileConfig | None
    stop_reason: str                                # why the search ended
    study_name: str
    storage: str | None                             # the study's URL, password masked (None: in memory)
    search_s: float
    comparison_id: int | None                       # the search's stored comparison (kind "tune-compile")
    confirmation: Any = None                        # the Comparison of native, default and best (or None)
    vs_default: tuple[float | None, float | None, float | None] = (None, None, None)
    vs_default_verdict: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def best_label(self) -> str | None:
        return None if self.best is None else self.best.label()

    @property
    def vs_native(self) -> tuple[float | None, float | None, float | None]:
        """The best configuration's speedup over native (point, low, high) from the confirmation."""
        row = self._row(self.best_label)
        return (None, None, None) if row is None else (row.speedup, row.speedup_ci_low, row.speedup_ci_high)

    @property
    def vs_native_verdict(self) -> str:
        row = self._row(self.best_label)
        return "" if row is None else row.verdict

    def _row(self, label: str | None) -> Any:
        if self.confirmation is None or label is None or label not in self.confirmation.backends:
            return None
        return self.confirmation.row(label)

    def table(self) -> pd.DataFrame:
        """Every configuration tried, the fastest first (completed and within parity, then the rest); a trial that
        only repeated an earlier configuration's measurement (``duplicate_of``) is left out (``trials`` has it)."""
        t = self.trials[self.trials["duplicate_of"].isna()].copy()
        order = t["state"].map({"COMPLETE": 0}).fillna(1) + (t["parity"] == False).astype(int)  # noqa: E712
        return (t.assign(_o=order).sort_values(["_o", "median_step_ms", "number"]).drop(columns="_o")
                .reset_index(drop=True))

    def answer(self) -> str:
        """The result in one sentence, with its intervals."""
        if self.best is None:
            if self.stop_reason.startswith(NO_TRIAL_IN_BUDGET):
                return f"no configuration was measured: {self.stop_reason.removeprefix('budget: ')}"
            return f"no configuration kept loss parity and finished ({len(self.trials)} tried): see table()"
        if self.best == self.default:
            head = f"the default compiled configuration ({self.default.label()}) was the fastest of {self._tried()}"
        else:
            head = f"fastest configuration that keeps loss parity: {self.best.label()} (of {self._tried()})"
        if self.confirmation is None:
            return head + "; not confirmed in alternating rounds (confirm=False): a trial's median is one process"
        out = [head, f"against native: {self.vs_native_verdict}"]
        if self.best != self.default:
            out.append(f"against the default compiled configuration: {self.vs_default_verdict}")
        return "; ".join(out)

    def _tried(self) -> str:
        ran = int((self.trials["duplicate_of"].isna()).sum()) if len(self.trials) else 0
        return f"{ran} tried in {self.search_s:.0f} s, {size_of(self.space)} possible"

    def to_dict(self) -> dict[str, Any]:
        return {"spec": dataclasses.asdict(self.spec), "space": {k: list(v) for k, v in self.space.items()},
                "default": dataclasses.asdict(self.default),
                "best": None if self.best is None else dataclasses.asdict(self.best), "best_label": self.best_label,
                "vs_native": list(self.vs_native), "vs_native_verdict": self.vs_native_verdict,
                "vs_default": list(self.vs_default), "vs_default_verdict": self.vs_default_verdict,
                "answer": self.answer(), "stop_reason": self.stop_reason, "study_name": self.study_name,
                "storage": self.storage, "search_s": self.search_s, "comparison_id": self.comparison_id,
                "confirmation_id": None if self.confirmation is None else self.confirmation.comparison_id,
                "notes": list(self.notes), "trials": self.trials.to_dict(orient="records")}

    def __repr__(self) -> str:
        return f"CompileSearch({self.answer()})"


def confirm_best(result: CompileSearch, budget_s: float, resolve: float, notify: Callable, stop: Any,
                 store: Store) -> None:
    """Native, the default and the best configuration in alternating rounds (the best only when it differs)."""

    spec, default, best = result.spec, result.default, result.best
    variants = {default.label(): default.apply(spec)}
    if best != default:
        variants[best.label()] = best.apply(spec)
    cmp = compare_configs(spec, variants, observer=notify, stop=stop, store=store, kind="tune-compile-confirm",
                          resolve=resolve, budget_s=budget_s)
    result.confirmation = cmp
    if best != default:
        result.vs_default, result.vs_default_verdict = _vs_default(cmp, default.label(), best.label())
    else:
        result.notes.append("the default configuration was the fastest: its speedup over native is the answer")
    result.notes.append(f"confirmation: {cmp.stop_reason}")


def _vs_default(cmp: Any, default: str, best: str) -> tuple[tuple, str]:
    """The best configuration's speedup over the default one, from the rounds where both ran ok: (interval, verdict)."""
    a = {r.round: r for r in cmp.by_backend(default) if r.ok and steady(r.records)}
    b = {r.round: r for r in cmp.by_backend(best) if r.ok and steady(r.records)}
    rounds = sorted(a.keys() & b.keys())
    pairs = [([s.step_s for s in steady(a[n].records)], [s.step_s for s in steady(b[n].records)]) for n in rounds]
    if not pairs:
        return (None, None, None), "inconclusive: no round ran both configurations"
    sp, lo, hi = ratio_interval(pairs, pilot=cmp.rule.pilot if cmp.rule else None)
    _, eq_lo, eq_hi = ratio_interval(pairs, pilot=cmp.rule.pilot if cmp.rule else None,
                                     confidence=EQUIVALENCE_CONFIDENCE)
    noisy = sorted({f"{r.name} round {r.round}: {r.noise_reason}" for n in rounds for r in (a[n], b[n]) if r.noisy})
    what_to_do = "stop other work on this machine" if noisy else "give the confirmation more time (confirm_budget_s)"
    _, text = verdict(sp, lo, hi, noisy, [], len(pairs), what_to_do, cmp.rule.resolve if cmp.rule else EQUIVALENCE,
                      equivalence=(eq_lo, eq_hi))
    return (sp, lo, hi), text
