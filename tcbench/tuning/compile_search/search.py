"""tune_compile: search the compiled configuration of a job with Optuna, keep what keeps loss parity, confirm the
fastest against the default one.

SageMaker Training Compiler chose its settings for the user. Here the settings are searched and the answer comes
with its reasons:

1. **The native reference**: the job once in eager mode (its losses are what every configuration must match).
2. **The search**: an Optuna study over the configuration space the device supports (``search_space``): Inductor's
   mode (default, max-autotune-no-cudagraphs; reduce-overhead and max-autotune on CUDA), the scope (the whole model,
   its repeated block, or the whole training step), what is compiled beside the model (``optimizer.step``, or a
   fused eager optimizer), the precision (the job's own, and bf16 autocast where the CPU has AVX-512 BF16/AMX or the GPU
   is sm80+) and ``cpp_wrapper``. The default compiled configuration is the first trial. Each trial is one stored job;
   its value is its median steady step (ms). **Constraint**: loss parity with the native job (``loss_parity``: the last
   window within the tolerance, and with dropout off the first losses within a relative tolerance per precision, or
   ``parity_rtol``); a configuration that breaks it is kept in the table with its reason and is never the answer
   (Optuna's samplers read the same constraint: ``Trial.set_constraint``). **Pruning**: from the fifth steady step on,
   the running median step is reported; Optuna's median pruner stops a trial slower than the median of the others at
   that step. A configuration the sampler proposes again is not run again: the trial takes the first one's value
   (``duplicate_of``). A trial is stopped when it runs past what is left of the search's budget (at least
   ``MIN_TRIAL_S``): a configuration that compiles for minutes (max-autotune) fails with that reason. The search ends
   when the budget left for it would be passed by another trial (the mean trial's length so far), when ``n_trials`` ran,
   or when every configuration was tried.
3. **The confirmation**: the fastest configuration that kept parity against the default compiled one and the
   native job, in alternating rounds (``compare_configs``: the same intervals and verdicts as ``compare``), with the
   rest of the budget. A trial's median is one process; only these rounds give an interval.

The study is persistent like ``retune_lr``'s (``storage``: None in memory, ``"store"``, or an Optuna URL) and
resumable: calling again with the same ``study_name`` runs only what is missing (a stored trial is never run again),
and refuses other settings.

Here: ``tune_compile``, its options and argument checks. The space and ``CompileConfig`` are in ``space``, the
study and its trials in ``trials``, ``CompileSearch`` and the confirmation in ``result``; the names other modules use
are re-exported here.
"""

from __future__ import annotations

import dataclasses
import math
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import pandas as pd

from tcbench.core.events import Observer
from tcbench.core.options import merged
from tcbench.core.spec import SEED_MAX, JobSpec, SpecError, check_number
from tcbench.measure.metrics import learned
from tcbench.runner.preflight import check as preflight
from tcbench.runner.preflight import check_blocks
from tcbench.runner.session import comparison_session
from tcbench.store.api import Store
from tcbench.tuning.compile_search.result import NO_TRIAL_IN_BUDGET, CompileSearch, confirm_best
from tcbench.tuning.compile_search.space import (FIELDS, CompileConfig, bf16_supported, first_in, narrow, search_space,
                                          size_of)
from tcbench.tuning.compile_search.trials import (PRUNERS, SAMPLERS, TRIAL_COLUMNS, CompileStudyContext, best_config,
                                           open_study, search, trial_rows)
from tcbench.tuning.storage import check_study_name, open_storage


@dataclass(frozen=True)
class CompileSearchOptions:
    """How ``tune_compile`` searches (every field is also a keyword of ``tune_compile``; see its docstring)."""

    budget_s: float = 600.0                     # the whole call's wall-clock budget
    n_trials: int | None = None                 # at most this many configurations (default: what the budget allows)
    space: Mapping[str, Sequence] | None = None   # some fields' choices instead of what the device supports
    storage: Any = None                         # where the Optuna study lives: None (memory), "store", a URL
    study_name: str | None = None               # default: from the job and this host
    sampler: Any = "tpe"                        # "tpe", "random", "grid" or an Optuna sampler
    pruner: Any = "median"                      # "median", "none" or an Optuna pruner
    seed: int = 0
    confirm: bool = True                        # the fastest confirmed in alternating rounds against the default
    confirm_budget_s: float | None = None       # the confirmation's share of budget_s (default a third)
    resolve: float = 0.05                       # the confirmation's target half-width
    parity_rtol: float | None = None            # loss parity's relative tolerance (default per precision)


def tune_compile(spec: JobSpec, *, options: CompileSearchOptions | None = None, observer: Observer | None = None,
                 stop: threading.Event | None = None, store: Store | None = None, **overrides: Any) -> CompileSearch:
    """Search the fastest compiled configuration of ``spec`` that keeps loss parity (module docstring).

    The settings are ``CompileSearchOptions``' fields: ``options=`` gives them whole, a keyword of the same name
    overrides one (``tune_compile(spec, budget_s=300, sampler="grid")``).

    ``budget_s``: the whole call's wall-clock budget (a trial or round is never started past it); the confirmation
    gets ``confirm_budget_s`` of it (default a third), the search the rest. ``n_trials``: at most this many
    configurations (default: as many as the budget allows). ``space``: the choices of some fields instead of what
    the device supports, e.g. ``{"precision": ["fp32"]}``. ``sampler``: ``"tpe"`` (with the parity constraint),
    ``"random"``, ``"grid"`` (every configuration once, in random order) or an Optuna sampler; ``pruner``:
    ``"median"``, ``"none"`` or an Optuna pruner. ``parity_rtol``: the relative tolerance of the first losses with
    dropout off (default per precision: ``tcbench.measure.metrics.EARLY_RTOL``). ``confirm=False`` skips the
    alternating rounds (the answer then has no interval). Observers get the runner's events and
    ``tc.events.CompileTrialStarted`` / ``CompileTrialEnded`` around each trial.
    """
    o = merged(CompileSearchOptions, options, overrides, "tune_compile")
    _check(spec, o.budget_s, o.n_trials, o.sampler, o.pruner, o.confirm_budget_s, o.parity_rtol, o.resolve)
    check_number("seed", o.seed, 0, SEED_MAX, whole=True)   # Optuna's sampler refuses it only after the native job
    check_study_name(o.study_name)
    if not o.confirm and o.confirm_budget_s is not None:
        raise SpecError("confirm_budget_s", o.confirm_budget_s, "None with confirm=False (no confirmation runs)",
                        f"confirm_budget_s={o.confirm_budget_s!r} is not allowed with confirm=False: no confirmation "
                        "runs; allowed: None, or confirm=True")
    if o.space is not None:
        narrow({}, o.space)   # a bad field or choice is refused before any job starts
        for scope in o.space.get("compile_scope") or ():   # and a scope the model's structure rules out (ALBERT)
            try:
                check_blocks(spec.replace(backend="inductor", compile_scope=scope), spec.model)
            except SpecError as exc:
                why = str(exc).split(": ", 1)[-1]   # what the model's structure rules out, and what it allows
                raise SpecError("space", dict(o.space), f"compile_scope choices among {exc.allowed}",
                                f"space['compile_scope'] contains {scope!r}, which {spec.model} does not allow: "
                                f"{why}") from None
    from tcbench.runner.process import run

    started = time.monotonic()
    native_spec = preflight(dataclasses.replace(spec, backend="eager"))
    store = store or Store()
    backend_storage, url = open_storage(o.storage, store.url())   # a bad URL is a SpecError before any job starts
    confirm_s = (o.budget_s / 3 if o.confirm_budget_s is None else o.confirm_budget_s) if o.confirm else 0.0
    notify = observer or (lambda e: None)
    name = o.study_name or (f"tune-compile-{native_spec.model}-{native_spec.size}-b{native_spec.batch_size}"
                          f"-s{native_spec.seq_len}-{native_spec.precision}-t{native_spec.threads}-{socket.gethostname()}")
    with comparison_session(store, "tune-compile", native_spec, ["eager"], 1,
                            {"study_name": name, "storage": url}, stop, error_status="interrupted") as session:
        native = run(native_spec, notify, session.stop, store, session.comparison_id, 0, "native reference")
        if not native.ok:
            raise RuntimeError(f"the native job ended {native.status}: {native.error.strip()[-300:]} "
                               "(tune_compile needs its losses for the parity check)")
        notes = [] if learned(native.records)[0] else [
            f"the native loss did not fall in {native_spec.steps} steps, so loss parity was judged "
            + ("on the first losses only (dropout off)" if native_spec.dropout == 0.0 else
               "nowhere (with dropout on, not even the first losses): pass dropout=0.0")
            + "; raise steps or lr for the whole check"]
        full = narrow(search_space(native_spec, native.env), o.space)
        study = open_study(native_spec, full, name, backend_storage, o.sampler, o.pruner, o.seed)
        default = CompileConfig.default(native_spec)
        ctx = CompileStudyContext(study=study, observer=notify, stop=session.stop, store=store,
                                  comparison_id=session.comparison_id)
        before_s = time.monotonic() - started
        search_budget = o.budget_s - confirm_s - before_s
        reason = search(study, full, first_in(full, default), native_spec, native, search_budget, o.n_trials,
                        o.parity_rtol, o.seed, o.sampler == "grid", ctx)
        reason = budget_words(reason, study, o, before_s, search_budget)
        trials = pd.DataFrame(trial_rows(study), columns=TRIAL_COLUMNS)
        result = CompileSearch(spec=native_spec, space=full, default=default, trials=trials, best=best_config(trials),
                               stop_reason=reason, study_name=name, storage=url,
                               search_s=time.monotonic() - started, comparison_id=session.comparison_id,
                               notes=notes)
        session.finish_info.update({"answer": result.answer(), "best_label": result.best_label,
                                    "stop_reason": reason, "trials": len(trials)})
    if o.confirm and result.best is not None and not session.stopped:
        # its share, or what is left of the budget when the search ran long (the rounds stop after two at the earliest)
        left = max(o.budget_s - (time.monotonic() - started), 1.0)
        confirm_best(result, min(confirm_s, left), o.resolve, notify, stop, store)
    return result


def budget_words(reason: str, study: Any, o: CompileSearchOptions, before_s: float, search_s: float) -> str:
    """``reason``, or — when the budget ended the search before any trial finished — a sentence that says so, with
    the budget that would fit one trial (and the confirmation's share): the native job's time and the first trial's
    (at least what it ran before it was stopped), a fifth more, rounded up to 10 s."""
    from optuna.trial import TrialState

    ran = [t for t in study.get_trials(deepcopy=False) if "duplicate_of" not in t.user_attrs]
    if not reason.startswith("budget") or not ran or any(t.state == TrialState.COMPLETE for t in ran):
        return reason
    first = ran[0]
    took = first.duration.total_seconds() if first.duration is not None else 0.0
    stopped = "timed out" in first.user_attrs.get("reason", "")
    need = before_s + took
    if o.confirm:
        need = need * 1.5 if o.confirm_budget_s is None else need + o.confirm_budget_s
    fit = math.ceil(need * 1.2 / 10) * 10
    share = (" and the confirmation's share" if o.confirm else "")
    first = f"was stopped after {took:.0f} s (its compile had not ended)" if stopped else f"took {took:.0f} s"
    return (f"{NO_TRIAL_IN_BUDGET} within the {max(search_s, 0):.0f} s that the budget of {o.budget_s:g} s "
            f"left for the search after the native job ({before_s:.0f} s){share}; the first trial {first}. "
            f"A budget of {'more than ' if stopped else ''}{fit} s fits one trial{share}")


def _check(spec: Any, budget_s: Any, n_trials: Any, sampler: Any, pruner: Any, confirm_budget_s: Any,
           parity_rtol: Any, resolve: Any) -> None:
    if not isinstance(spec, JobSpec):
        raise TypeError(f"spec={spec!r} is not a tcbench.JobSpec")
    if spec.script is not None:
        raise SpecError("script", spec.script, "None: tune_compile sets how tcbench's own loop is compiled; a script "
                        "compiles itself")
    check_number("budget_s", budget_s, 0, open_low=True)
    check_number("n_trials", n_trials, 1, whole=True, optional=True)
    check_number("confirm_budget_s", confirm_budget_s, 0, open_low=True, optional=True)
    if confirm_budget_s is not None and confirm_budget_s >= budget_s:
        raise SpecError("confirm_budget_s", confirm_budget_s, f"less than budget_s={budget_s:g}")
    check_number("parity_rtol", parity_rtol, 0, open_low=True, optional=True)
    check_number("resolve", resolve, 0, 1, open_low=True)
    if isinstance(sampler, str) and sampler not in SAMPLERS:
        raise ValueError(f"sampler={sampler!r} is not allowed; use {', '.join(map(repr, SAMPLERS))} "
                         "or an optuna sampler")
    if isinstance(pruner, str) and pruner not in PRUNERS:
        raise ValueError(f"pruner={pruner!r} is not allowed; use {', '.join(map(repr, PRUNERS))} or an optuna pruner")


__all__ = ["CompileConfig", "CompileSearch", "CompileSearchOptions", "tune_compile", "search_space", "bf16_supported",
           "best_config", "narrow", "size_of", "FIELDS", "TRIAL_COLUMNS", "SAMPLERS", "PRUNERS"]
