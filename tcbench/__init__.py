"""tcbench: does compiling my training job make it faster, cheaper or fit a bigger batch — and
after a batch-size change, what learning rate do I need?

Importing tcbench does not import torch: every measured job runs in its own process.

    import tcbench as tc
    spec = tc.JobSpec(model="bert-base-cased", size="tiny", batch_size=16, steps=60)
    cmp = tc.compare(spec, backends=["inductor", "xla"])
    cmp.summary()
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:   # what the names below are, for readers and type checkers; at run time each is imported on first use
    import pandas as pd

    from tcbench.view import plots
    from tcbench.view import report
    from tcbench.core import events
    from tcbench.core.catalog import MODELS, SIZES, models_table  # noqa: F401 (models_table: an attribute)
    from tcbench.comparison import (DEFAULT_BUDGET_S, DEFAULT_RESOLVE, DEFAULT_ROUNDS, PAIRINGS, Comparison, NoiseFloor,
                                    StoredNoiseFloor, compare, compare_configs, compare_script, latest_noise_floor,
                                    load_comparison, noise_floor)
    from tcbench.core.cost import cost, cost_table, savings_pct
    from tcbench.job.diagnostics import table as diagnostics
    from tcbench.host.doctor import doctor
    from tcbench.store.history import comparisons, get_run, runs, steps
    from tcbench.runner.preflight import check as preflight
    from tcbench.core.profiles import Profile, profile, profile_names, profiles
    from tcbench.measure.metrics import VERDICT_KINDS, break_even_steps
    from tcbench.core.extras import JobExtras
    from tcbench.view.format import html_table
    from tcbench.core.results import JobFigures, JobResult, StepRecord
    from tcbench.runner.process import backend_status, run  # noqa: F401 (backend_status: an attribute, not __all__)

    from tcbench.core.spec import (BACKENDS, CACHE_MODES, NATIVE, COMPILE_SCOPES, INDUCTOR_MODES, PADDINGS, PRECISIONS,
                                   JobSpec, SpecError)
    from tcbench.store.api import Store, StoreError, StoreMissing
    from tcbench.job.track import StopTraining, compile_for_backend, device, track
    from tcbench.parallel import (LinkAssumptions, ScalingProjection, ScalingResult, calibrate_link, link_samples,
                                  load_scaling, project_scaling, scaling)
    from tcbench.tuning import (Candidate, CompileConfig, CompileSearch, CompileSearchOptions, LrPrediction,
                                MaxBatchResult, NoiseScale, QualityOptions, QualityResult, RetuneOptions, RetuneResult,
                                find_max_batch, noise_scale, predict_lr, retune_lr, rule_lrs, time_to_quality,
                                load_quality, tune_compile, check_lr, LrPremise, PremiseOptions)
    from tcbench.tuning.dashboard import Dashboard, dashboard, start_dashboard

# Importing tcbench imports none of its layers: a name is imported on first use (PEP 562). A job's process imports
# tcbench.job.worker, and with it this file: it must not pay for pandas, plotly, SQLAlchemy or Optuna it never uses
# (tests/job/test_job_imports.py checks it in a real job).
_LAZY: dict[str, tuple[str, str]] = {   # public name: (module, its name there), imported when first used
    "plots": ("tcbench.view", "plots"),
    "report": ("tcbench.view", "report"),
    "events": ("tcbench.core", "events"),
    "MODELS": ("tcbench.core.catalog", "MODELS"),
    "SIZES": ("tcbench.core.catalog", "SIZES"),
    "models_table": ("tcbench.core.catalog", "models_table"),
    "DEFAULT_BUDGET_S": ("tcbench.comparison", "DEFAULT_BUDGET_S"),
    "DEFAULT_RESOLVE": ("tcbench.comparison", "DEFAULT_RESOLVE"),
    "DEFAULT_ROUNDS": ("tcbench.comparison", "DEFAULT_ROUNDS"),
    "PAIRINGS": ("tcbench.comparison", "PAIRINGS"),
    "Comparison": ("tcbench.comparison", "Comparison"),
    "NoiseFloor": ("tcbench.comparison", "NoiseFloor"),
    "StoredNoiseFloor": ("tcbench.comparison", "StoredNoiseFloor"),
    "compare": ("tcbench.comparison", "compare"),
    "compare_configs": ("tcbench.comparison", "compare_configs"),
    "compare_script": ("tcbench.comparison", "compare_script"),
    "latest_noise_floor": ("tcbench.comparison", "latest_noise_floor"),
    "load_comparison": ("tcbench.comparison", "load_comparison"),
    "noise_floor": ("tcbench.comparison", "noise_floor"),
    "cost": ("tcbench.core.cost", "cost"),
    "cost_table": ("tcbench.core.cost", "cost_table"),
    "savings_pct": ("tcbench.core.cost", "savings_pct"),
    "diagnostics": ("tcbench.job.diagnostics", "table"),
    "doctor": ("tcbench.host.doctor", "doctor"),
    "comparisons": ("tcbench.store.history", "comparisons"),
    "get_run": ("tcbench.store.history", "get_run"),
    "runs": ("tcbench.store.history", "runs"),
    "steps": ("tcbench.store.history", "steps"),
    "preflight": ("tcbench.runner.preflight", "check"),
    "Profile": ("tcbench.core.profiles", "Profile"),
    "profile": ("tcbench.core.profiles", "profile"),
    "profile_names": ("tcbench.core.profiles", "profile_names"),
    "profiles": ("tcbench.core.profiles", "profiles"),
    "VERDICT_KINDS": ("tcbench.measure.metrics", "VERDICT_KINDS"),
    "break_even_steps": ("tcbench.measure.metrics", "break_even_steps"),
    "JobExtras": ("tcbench.core.extras", "JobExtras"),
    "html_table": ("tcbench.view.format", "html_table"),
    "JobFigures": ("tcbench.core.results", "JobFigures"),
    "JobResult": ("tcbench.core.results", "JobResult"),
    "StepRecord": ("tcbench.core.results", "StepRecord"),
    "backend_status": ("tcbench.runner.process", "backend_status"),
    "run": ("tcbench.runner.process", "run"),
    "BACKENDS": ("tcbench.core.spec", "BACKENDS"),
    "CACHE_MODES": ("tcbench.core.spec", "CACHE_MODES"),
    "NATIVE": ("tcbench.core.spec", "NATIVE"),
    "COMPILE_SCOPES": ("tcbench.core.spec", "COMPILE_SCOPES"),
    "INDUCTOR_MODES": ("tcbench.core.spec", "INDUCTOR_MODES"),
    "PADDINGS": ("tcbench.core.spec", "PADDINGS"),
    "PRECISIONS": ("tcbench.core.spec", "PRECISIONS"),
    "JobSpec": ("tcbench.core.spec", "JobSpec"),
    "SpecError": ("tcbench.core.spec", "SpecError"),
    "Store": ("tcbench.store.api", "Store"),
    "StoreError": ("tcbench.store.api", "StoreError"),
    "StoreMissing": ("tcbench.store.api", "StoreMissing"),
    "StopTraining": ("tcbench.job.track", "StopTraining"),
    "compile_for_backend": ("tcbench.job.track", "compile_for_backend"),
    "device": ("tcbench.job.track", "device"),
    "track": ("tcbench.job.track", "track"),
    "LinkAssumptions": ("tcbench.parallel", "LinkAssumptions"),
    "ScalingProjection": ("tcbench.parallel", "ScalingProjection"),
    "ScalingResult": ("tcbench.parallel", "ScalingResult"),
    "calibrate_link": ("tcbench.parallel", "calibrate_link"),
    "link_samples": ("tcbench.parallel", "link_samples"),
    "load_scaling": ("tcbench.parallel", "load_scaling"),
    "project_scaling": ("tcbench.parallel", "project_scaling"),
    "scaling": ("tcbench.parallel", "scaling"),
    "Candidate": ("tcbench.tuning", "Candidate"),
    "CompileConfig": ("tcbench.tuning", "CompileConfig"),
    "CompileSearch": ("tcbench.tuning", "CompileSearch"),
    "CompileSearchOptions": ("tcbench.tuning", "CompileSearchOptions"),
    "LrPrediction": ("tcbench.tuning", "LrPrediction"),
    "MaxBatchResult": ("tcbench.tuning", "MaxBatchResult"),
    "NoiseScale": ("tcbench.tuning", "NoiseScale"),
    "QualityOptions": ("tcbench.tuning", "QualityOptions"),
    "QualityResult": ("tcbench.tuning", "QualityResult"),
    "RetuneOptions": ("tcbench.tuning", "RetuneOptions"),
    "RetuneResult": ("tcbench.tuning", "RetuneResult"),
    "find_max_batch": ("tcbench.tuning", "find_max_batch"),
    "noise_scale": ("tcbench.tuning", "noise_scale"),
    "predict_lr": ("tcbench.tuning", "predict_lr"),
    "retune_lr": ("tcbench.tuning", "retune_lr"),
    "rule_lrs": ("tcbench.tuning", "rule_lrs"),
    "time_to_quality": ("tcbench.tuning", "time_to_quality"),
    "load_quality": ("tcbench.tuning", "load_quality"),
    "tune_compile": ("tcbench.tuning", "tune_compile"),
    "check_lr": ("tcbench.tuning", "check_lr"),
    "LrPremise": ("tcbench.tuning", "LrPremise"),
    "PremiseOptions": ("tcbench.tuning", "PremiseOptions"),
    "Dashboard": ("tcbench.tuning.dashboard", "Dashboard"),
    "dashboard": ("tcbench.tuning.dashboard", "dashboard"),
    "start_dashboard": ("tcbench.tuning.dashboard", "start_dashboard"),
}


def __getattr__(name: str) -> Any:
    where = _LAZY.get(name)
    if where is None:
        if name.startswith("_"):
            raise AttributeError(f"module 'tcbench' has no attribute {name!r}")
        try:   # a layer by its name (tcbench.view, tcbench.comparison, ...)
            return importlib.import_module(f"tcbench.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"tcbench.{name}":
                raise
            raise AttributeError(f"module 'tcbench' has no attribute {name!r}") from None
    module = importlib.import_module(where[0])
    try:
        value = getattr(module, where[1])
    except AttributeError:   # a module its package does not import (tcbench.view.plots, tcbench.core.events)
        value = importlib.import_module(f"{where[0]}.{where[1]}")
    globals()[name] = value   # the next use finds it here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__version__ = "0.1.0"


def models() -> "pd.DataFrame":
    """The model catalog: name, family, task, size preset, layers, hidden, heads, approx. parameters."""
    import pandas as pd

    from tcbench.core.catalog import models_table

    return pd.DataFrame(models_table())


def backends() -> "pd.DataFrame":
    """Each backend with whether it can run here and why (checked without importing torch)."""
    import pandas as pd

    from tcbench.core.spec import BACKENDS
    from tcbench.runner.process import backend_status

    rows = []
    for name in BACKENDS:
        ok, reason = backend_status(name)
        rows.append({"backend": name, "available": ok, "reason": reason})
    return pd.DataFrame(rows)


def build_model(model: str = "bert-base-cased", size: str = "tiny", dropout: float | None = None,
                num_labels: int = 2, seed: int | None = 0):
    """The same torch model a job trains (random init from the architecture config, or a local folder)."""
    from tcbench.job.models import build_model as _build

    return _build(model, size, dropout=dropout, num_labels=num_labels, seed=seed)


__all__ = [
    # run and compare: a job, its spec and result, a comparison and its noise floor
    "JobSpec", "SpecError", "preflight", "run", "events", "JobResult", "JobFigures", "JobExtras", "StepRecord",
    "compare", "compare_configs", "compare_script", "Comparison", "NoiseFloor", "noise_floor", "latest_noise_floor",
    "StoredNoiseFloor", "load_comparison", "PAIRINGS", "DEFAULT_RESOLVE", "DEFAULT_BUDGET_S", "DEFAULT_ROUNDS",
    "VERDICT_KINDS",
    "break_even_steps",
    # your own training script, measured
    "track", "compile_for_backend", "device", "StopTraining",
    # what can run here: models, backends, the machine
    "models", "backends", "doctor", "build_model", "MODELS", "SIZES",
    # tune: the largest batch, the noise scale, the learning rate after a batch change, the compiled configuration
    "find_max_batch", "MaxBatchResult", "noise_scale", "NoiseScale", "check_lr", "LrPremise", "PremiseOptions",
    "predict_lr", "LrPrediction", "retune_lr", "RetuneOptions", "RetuneResult", "rule_lrs",
    "tune_compile", "CompileSearchOptions", "CompileSearch", "CompileConfig", "time_to_quality",
    "load_quality", "Candidate", "QualityOptions", "QualityResult",
    "dashboard", "start_dashboard", "Dashboard",
    # scale: data-parallel scaling measured here and projected to instance profiles, with their costs
    "scaling", "ScalingResult", "load_scaling", "project_scaling", "ScalingProjection", "LinkAssumptions",
    "calibrate_link", "link_samples", "profiles", "profile", "profile_names", "Profile", "cost", "cost_table",
    "savings_pct",
    # history: the store and what it holds
    "Store", "StoreError", "StoreMissing", "runs", "steps", "comparisons", "get_run",
    # report: tables, plots, the HTML report and the compiler's diagnostics
    "html_table", "plots", "report", "diagnostics",
    # the spec's allowed values
    "BACKENDS", "NATIVE", "PRECISIONS", "PADDINGS", "INDUCTOR_MODES", "COMPILE_SCOPES", "CACHE_MODES",
]
