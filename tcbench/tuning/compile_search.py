"""tune_compile: search the compiled configuration of a job with Optuna, keep what keeps loss parity, confirm the
fastest against the default one.

SageMaker Training Compiler chose its settings for the user. Here the settings are searched and the answer comes
with its reasons:

1. **The native reference**: the job once in eager mode (its losses are what every configuration must match).
2. **The search**: an Optuna study over the configuration space the device supports (``search_space``): Inductor's
   mode (default, max-autotune-no-cudagraphs; reduce-overhead and max-autotune on CUDA), the scope (the whole model,
   its repeated block, or the whole training step), what is compiled beside the model (``optimizer.step``, or a fused eager optimizer),
   the precision (the job's own, and bf16 autocast where the CPU has AVX-512 BF16/AMX or the GPU is sm80+) and
   ``cpp_wrapper``. The default compiled configuration is the first trial. Each trial is one stored job; its
   value is its median steady step (ms). **Constraint**: loss parity with the native job (``loss_parity``: the
   last window within the tolerance, and with dropout off the first losses within a relative tolerance per
   precision, or ``parity_rtol``); a configuration that breaks it is kept in the table with its reason and is
   never the answer (Optuna's samplers read the same constraint: ``Trial.set_constraint``). **Pruning**: from the
   fifth steady step on, the running median step is reported; Optuna's median pruner stops a trial slower than the
   median of the others at that step. A configuration the sampler proposes again is not run again: the trial
   takes the first one's value (``duplicate_of``). A trial is stopped when it runs past what is left of the search's
   budget (at least ``MIN_TRIAL_S``): a configuration that compiles for minutes (max-autotune) fails with that
   reason. The search ends when the budget left for it would be passed by another trial (the mean trial's length so
   far), when ``n_trials`` ran, or when every configuration was tried.
3. **The confirmation**: the fastest configuration that kept parity against the default compiled one and the
   native job, in alternating rounds (``compare_configs``: the same intervals and verdicts as ``compare``), with the
   rest of the budget. A trial's median is one process; only these rounds give an interval.

The study is persistent like ``retune_lr``'s (``storage``: None in memory, ``"store"``, or an Optuna URL) and
resumable: calling again with the same ``study_name`` runs only what is missing (a stored trial is never run again),
and refuses other settings.
"""

from __future__ import annotations

import dataclasses
import math
import random
import socket
import statistics
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import pandas as pd

from tcbench.core.catalog import MODELS
from tcbench.core.spec import INDUCTOR_MODES, JobSpec, SpecError, check_number
from tcbench.measure.interval import ratio_interval
from tcbench.measure.metrics import learned, loss_parity, steady, verdict
from tcbench.runner.preflight import check as preflight
from tcbench.runner.session import comparison_session
from tcbench.store.api import Store
from tcbench.tuning.storage import open_storage
from tcbench.tuning.study import Either

FIELDS = ("compile_mode", "compile_scope", "compile_optimizer", "precision", "cpp_wrapper")
SAMPLERS = ("tpe", "random", "grid")
PRUNERS = ("median", "none")
PRUNE_AFTER = 5            # steady steps before a trial may be pruned (its running median is reported from here)
MIN_TRIAL_S = 60.0         # a trial may run this long even when the search's budget is nearly spent
DUPLICATE_STREAK = 8       # proposals in a row of configurations tried already: an untried one is enqueued instead
TRIAL_COLUMNS = ["number", "label", *FIELDS, "state", "median_step_ms", "step_iqr_ms", "compile_s", "parity",
                 "loss_diff", "reason", "duplicate_of", "run_id"]


@dataclass(frozen=True)
class CompileConfig:
    """One compiled configuration: the JobSpec fields the search sets."""

    compile_mode: str = "default"
    compile_scope: str = "model"
    compile_optimizer: bool = True
    precision: str = "fp32"
    cpp_wrapper: bool = False

    @classmethod
    def default(cls, spec: JobSpec) -> "CompileConfig":
        """torch.compile as ``compare`` runs it: mode default, the whole model and ``optimizer.step``, the job's
        precision, Python wrapper."""
        return cls(precision=spec.precision)

    @classmethod
    def of(cls, spec: JobSpec) -> "CompileConfig":
        return cls(**{name: getattr(spec, name) for name in FIELDS})

    def apply(self, spec: JobSpec) -> JobSpec:
        return dataclasses.replace(spec, backend="inductor", **dataclasses.asdict(self))

    def label(self) -> str:
        """``"inductor · default"``, or what differs from the default: ``"inductor · max-autotune-no-cudagraphs ·
        blocks · eager optimizer · bf16 · cpp_wrapper"`` (a job label: no commas)."""
        parts = [self.compile_mode if self.compile_mode != "default" else "",
                 self.compile_scope if self.compile_scope != "model" else "",
                 "" if self.compile_optimizer else "eager optimizer",
                 self.precision if self.precision != "fp32" else "", "cpp_wrapper" if self.cpp_wrapper else ""]
        return " · ".join(["inductor", *[p for p in parts if p]] if any(parts) else ["inductor", "default"])


def bf16_supported(env: Mapping[str, Any]) -> tuple[bool, str]:
    """(bf16 autocast runs at speed on the job's device, why): a GPU of compute capability 8.0 or more, or a CPU
    with AVX-512 BF16 or AMX (without them bf16 matmuls are emulated: ~100× slower). ``env``: a job's environment
    (its ``gpu`` and ``gpu_capability``); the CPU's flags are this machine's."""
    from tcbench.host.env import cpu_flags

    if env.get("gpu"):
        cap = str(env.get("gpu_capability") or "")
        ok = bool(cap) and float(cap) >= 8.0
        return ok, f"{env['gpu']} (compute capability {cap or 'unknown'})"
    flags = cpu_flags() & {"avx512_bf16", "amx_bf16"}
    return bool(flags), f"the CPU has {', '.join(sorted(flags))}" if flags else "the CPU has neither AVX-512 BF16 nor AMX"


def search_space(spec: JobSpec, env: Mapping[str, Any]) -> dict[str, tuple]:
    """The choices of each field the device supports (``env``: the native job's environment). Blocks only for
    catalog models with a repeated block (ALBERT shares one layer); a user's model may name it in ``space``."""
    cuda = bool(env.get("gpu"))
    modes = ("default", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune") if cuda else (
        "default", "max-autotune-no-cudagraphs")
    info = MODELS.get(spec.model) if spec.script is None else None
    scopes = ("model", "blocks", "step") if info is not None and info.family != "albert" else ("model", "step")
    precisions = tuple(dict.fromkeys((spec.precision, *(("bf16",) if bf16_supported(env)[0] else ()))))
    return {"compile_mode": modes, "compile_scope": scopes, "compile_optimizer": (True, False),
            "precision": precisions, "cpp_wrapper": (False, True)}


def narrow(space: dict[str, tuple], wanted: Mapping[str, Sequence] | None) -> dict[str, tuple]:
    """``space`` with the user's own choices for some fields (``space=`` of tune_compile); a field or a choice it
    does not know is a ValueError naming it. A choice outside what the device supports is allowed when it is a
    valid value (the user asked for it: ``{"compile_scope": ["model", "blocks"]}`` for their own model)."""
    from tcbench.core.spec import COMPILE_SCOPES, PRECISIONS

    valid = {"compile_mode": INDUCTOR_MODES, "compile_scope": COMPILE_SCOPES, "compile_optimizer": (True, False),
             "precision": PRECISIONS, "cpp_wrapper": (False, True)}
    out = dict(space)
    for name, choices in (wanted or {}).items():
        if name not in valid:
            raise ValueError(f"space has the field {name!r}; allowed: {', '.join(map(repr, FIELDS))}")
        if isinstance(choices, (str, bool)) or not isinstance(choices, Sequence) or not choices:
            raise ValueError(f"space[{name!r}]={choices!r} is not allowed; it must be a non-empty list of "
                             f"{', '.join(map(repr, valid[name]))}")
        for c in choices:
            if c not in valid[name] or type(c) is not type(valid[name][0]):
                raise ValueError(f"space[{name!r}] contains {c!r}; allowed: {', '.join(map(repr, valid[name]))}")
        out[name] = tuple(dict.fromkeys(choices))
    return out


def size_of(space: Mapping[str, tuple]) -> int:
    return math.prod(len(v) for v in space.values())


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
        return t.assign(_o=order).sort_values(["_o", "median_step_ms", "number"]).drop(columns="_o").reset_index(drop=True)

    def answer(self) -> str:
        """The result in one sentence, with its intervals."""
        if self.best is None:
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


# -- checks --------------------------------------------------------------------------------------------------------
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
        raise ValueError(f"sampler={sampler!r} is not allowed; use {', '.join(map(repr, SAMPLERS))} or an optuna sampler")
    if isinstance(pruner, str) and pruner not in PRUNERS:
        raise ValueError(f"pruner={pruner!r} is not allowed; use {', '.join(map(repr, PRUNERS))} or an optuna pruner")


def _sampler(sampler: Any, seed: int, space: dict[str, tuple]):
    import optuna

    if not isinstance(sampler, str):
        return sampler
    if sampler in ("random", "grid"):   # grid: every configuration is enqueued (``_search``)
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


def _open(spec: JobSpec, space: dict, name: str, backend_storage: Any, sampler: Any, pruner: Any, seed: int) -> Any:
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


# -- the search --------------------------------------------------------------------------------------------------
def _trial_rows(study: Any) -> list[dict]:
    rows = []
    for t in study.get_trials(deepcopy=False):
        a = t.user_attrs
        rows.append({"number": t.number, "label": a.get("label"), **{k: t.params.get(k) for k in FIELDS},
                     "state": t.state.name, "median_step_ms": t.value if t.value is not None else a.get("median_step_ms"),
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


def _watch(trial: Any, spec: JobSpec, notify: Callable, own: threading.Event) -> Callable[[dict], None]:
    """The job's observer: from the PRUNE_AFTER-th steady step on, its running median step (ms) is reported and the
    job is stopped when the pruner says so."""
    steps: list[float] = []

    def observe(event: dict) -> None:
        notify(event)
        rec = event.get("record") if event.get("type") == "step" else None
        if rec is None or rec.warmup or own.is_set():
            return
        steps.append(rec.step_s * 1e3)
        if len(steps) < PRUNE_AFTER:
            return
        trial.report(statistics.median(steps), rec.step)
        if trial.should_prune():
            trial.set_user_attr("reason", f"pruned at step {rec.step}: its median step so far "
                                          f"({statistics.median(steps):.1f} ms) was slower than the other trials' there")
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
    res = run(job, _watch(trial, spec, ctx["notify"], own), Either(own, ctx["stop"]), ctx["store"],
              ctx["comparison_id"], trial.number, f"trial#{trial.number} {label}", label=label)
    trial.set_user_attr("run_id", res.run_id)
    if res.compile_latency_s is not None:
        trial.set_user_attr("compile_s", round(float(res.compile_latency_s), 3))
    if res.status == "interrupted" and own.is_set():
        med = res.median_step_s
        if med is not None:
            trial.set_user_attr("median_step_ms", med * 1e3)
        ctx["study"].tell(trial, state=TrialState.PRUNED)
        return "pruned"
    if res.status == "interrupted" and ctx["stop"] is not None and ctx["stop"].is_set():
        trial.set_user_attr("status", "interrupted")
        trial.set_user_attr("reason", "stopped by the user; it does not count and runs again on resume")
        ctx["study"].tell(trial, state=TrialState.FAIL)
        return "interrupted"
    if not res.ok or res.median_step_s is None:
        why = (res.error or "no steady steps").strip().splitlines()
        trial.set_user_attr("reason", f"{res.status}: {why[-1] if why else ''}"[:400])
        ctx["study"].tell(trial, state=TrialState.FAIL)
        return res.status
    ok, diff, note = loss_parity(native.records, res.records, config.precision, spec.dropout == 0.0, early_rtol=rtol)
    trial.set_user_attr("parity", ok)
    trial.set_user_attr("loss_diff", diff)
    trial.set_user_attr("reason", "" if ok is not False else f"rejected: loss parity failed — {note}")
    trial.set_constraint("loss_parity", 1.0 if ok is False else 0.0)   # > 0: infeasible, for Optuna's samplers
    if res.step_iqr_s is not None:
        trial.set_user_attr("step_iqr_ms", res.step_iqr_s * 1e3)
    try:
        ctx["study"].tell(trial, res.median_step_s * 1e3)
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


def _search(study: Any, space: dict, default: CompileConfig, spec: JobSpec, native: Any, budget_s: float,
            n_trials: int | None, rtol: float | None, seed: int, grid: bool, ctx: dict) -> str:
    """Trials until the search's end; returns why it ended. ``grid``: every configuration is enqueued, the default
    first and the rest in a random order (seeded)."""
    import optuna
    from optuna.trial import TrialState

    dists = {k: optuna.distributions.CategoricalDistribution(list(v)) for k, v in space.items()}
    rng = random.Random(seed)
    if not study.get_trials(deepcopy=False):
        rest = [c for c in _configs(space) if c != default] if grid else []
        rng.shuffle(rest)
        for config in (default, *rest):
            study.enqueue_trial(dataclasses.asdict(config), user_attrs={"label": config.label()})
    started, durations, streak = time.monotonic(), [], 0
    while True:
        reason = _stop_reason(study, space, started, budget_s, n_trials, durations, ctx["stop"])
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
                untried = [c for c in _configs(space) if c not in _tried(study)]
                if untried:
                    study.enqueue_trial(dataclasses.asdict(rng.choice(untried)))
                streak = 0
            continue
        streak = 0
        t0 = time.monotonic()
        ctx["notify"]({"type": "compile-trial", "number": trial.number, "label": config.label(), "status": "start"})
        left = max(budget_s - (time.monotonic() - started), MIN_TRIAL_S)   # no trial runs far past the budget
        status = _measure(trial, config, spec, native, rtol, ctx, left)
        durations.append(time.monotonic() - t0)
        ctx["notify"]({"type": "compile-trial", "number": trial.number, "label": config.label(), "status": status})
        if status == "interrupted":
            return "stopped by the user"


def _configs(space: Mapping[str, tuple]) -> list[CompileConfig]:
    import itertools

    return [CompileConfig(**dict(zip(FIELDS, values))) for values in itertools.product(*(space[k] for k in FIELDS))]


def best_config(trials: pd.DataFrame) -> CompileConfig | None:
    """The completed trial with the lowest median step among those that kept parity (or were not judged)."""
    ok = trials[(trials["state"] == "COMPLETE") & (trials["parity"] != False) & trials["duplicate_of"].isna()  # noqa: E712
                & trials["median_step_ms"].notna()]
    if ok.empty:
        return None
    row = ok.sort_values(["median_step_ms", "number"]).iloc[0]
    return CompileConfig(**{k: (bool(row[k]) if k in ("compile_optimizer", "cpp_wrapper") else row[k]) for k in FIELDS})


def _vs_default(cmp: Any, default: str, best: str) -> tuple[tuple, str]:
    """The best configuration's speedup over the default one, from the rounds where both ran ok: (interval, verdict)."""
    a = {r.round: r for r in cmp.by_backend(default) if r.ok and steady(r.records)}
    b = {r.round: r for r in cmp.by_backend(best) if r.ok and steady(r.records)}
    rounds = sorted(a.keys() & b.keys())
    pairs = [([s.step_s for s in steady(a[n].records)], [s.step_s for s in steady(b[n].records)]) for n in rounds]
    if not pairs:
        return (None, None, None), "inconclusive: no round ran both configurations"
    sp, lo, hi = ratio_interval(pairs, pilot=cmp.rule.pilot if cmp.rule else None)
    noisy = sorted({f"{r.name} round {r.round}: {r.noise_reason}" for n in rounds for r in (a[n], b[n]) if r.noisy})
    _, text = verdict(sp, lo, hi, noisy, [], len(pairs), "give the confirmation more time (confirm_budget_s)")
    return (sp, lo, hi), text


def tune_compile(spec: JobSpec, budget_s: float = 600.0, n_trials: int | None = None,
                 space: Mapping[str, Sequence] | None = None, storage: Any = None, study_name: str | None = None,
                 sampler: Any = "tpe", pruner: Any = "median", seed: int = 0, confirm: bool = True,
                 confirm_budget_s: float | None = None, resolve: float = 0.05, parity_rtol: float | None = None,
                 observer: Callable[[dict], None] | None = None, stop: threading.Event | None = None,
                 store: Store | None = None) -> CompileSearch:
    """Search the fastest compiled configuration of ``spec`` that keeps loss parity (module docstring).

    ``budget_s``: the whole call's wall-clock budget (a trial or round is never started past it); the confirmation
    gets ``confirm_budget_s`` of it (default a third), the search the rest. ``n_trials``: at most this many
    configurations (default: as many as the budget allows). ``space``: the choices of some fields instead of what
    the device supports, e.g. ``{"precision": ["fp32"]}``. ``sampler``: ``"tpe"`` (with the parity constraint),
    ``"random"``, ``"grid"`` (every configuration once, in random order) or an Optuna sampler; ``pruner``:
    ``"median"``, ``"none"`` or an Optuna pruner. ``parity_rtol``: the relative tolerance of the first losses with
    dropout off (default per precision: ``tcbench.measure.metrics.EARLY_RTOL``). ``confirm=False`` skips the
    alternating rounds (the answer then has no interval). Observers get the runner's events and
    ``{"type": "compile-trial", "number", "label", "status"}``.
    """
    _check(spec, budget_s, n_trials, sampler, pruner, confirm_budget_s, parity_rtol, resolve)
    from tcbench.runner.process import run

    started = time.monotonic()
    native_spec = preflight(dataclasses.replace(spec, backend="eager"))
    store = store or Store()
    backend_storage, url = open_storage(storage, store.url())   # a bad URL is a SpecError before any job starts
    if space is not None:
        narrow({}, space)   # a bad field or choice is refused before any job starts
    confirm_s = (budget_s / 3 if confirm_budget_s is None else confirm_budget_s) if confirm else 0.0
    notify = observer or (lambda e: None)
    name = study_name or (f"tune-compile-{native_spec.model}-{native_spec.size}-b{native_spec.batch_size}"
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
        full = narrow(search_space(native_spec, native.env), space)
        study = _open(native_spec, full, name, backend_storage, sampler, pruner, seed)
        default = CompileConfig.default(native_spec)
        ctx = {"notify": notify, "stop": session.stop, "store": store, "comparison_id": session.comparison_id,
               "study": study}
        search_budget = budget_s - confirm_s - (time.monotonic() - started)
        reason = _search(study, full, default, native_spec, native, search_budget, n_trials, parity_rtol, seed,
                         sampler == "grid", ctx)
        trials = pd.DataFrame(_trial_rows(study), columns=TRIAL_COLUMNS)
        result = CompileSearch(spec=native_spec, space=full, default=default, trials=trials, best=best_config(trials),
                               stop_reason=reason, study_name=name, storage=url,
                               search_s=time.monotonic() - started, comparison_id=session.comparison_id,
                               notes=notes)
        session.finish_info.update({"answer": result.answer(), "best_label": result.best_label,
                                    "stop_reason": reason, "trials": len(trials)})
    if confirm and result.best is not None and not session.stopped:
        # its share, or what is left of the budget when the search ran long (the rounds stop after two at the earliest)
        left = max(budget_s - (time.monotonic() - started), 1.0)
        _confirm(result, min(confirm_s, left), resolve, notify, stop, store)
    return result


def _confirm(result: CompileSearch, budget_s: float, resolve: float, notify: Callable, stop: Any,
             store: Store) -> None:
    """Native, the default and the best configuration in alternating rounds (the best only when it differs)."""
    from tcbench.comparison import compare_configs

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


__all__ = ["CompileConfig", "CompileSearch", "tune_compile", "search_space", "bf16_supported", "best_config"]
