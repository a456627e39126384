"""tcbench: does compiling my training job make it faster, cheaper or fit a bigger batch — and
after a batch-size change, what learning rate do I need?

Importing tcbench does not import torch: every measured job runs in its own process.

    import tcbench as tc
    spec = tc.JobSpec(model="bert-base-cased", size="tiny", batch_size=16, steps=60)
    cmp = tc.compare(spec, backends=["inductor", "xla"])
    cmp.summary()
"""

from __future__ import annotations

import pandas as pd

from tcbench.view import plots
from tcbench.view import report
from tcbench.core import events
from tcbench.core.catalog import MODELS, SIZES, models_table
from tcbench.comparison import (DEFAULT_BUDGET_S, DEFAULT_RESOLVE, DEFAULT_ROUNDS, Comparison, NoiseFloor,
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
from tcbench.runner.process import backend_status, run

from tcbench.core.spec import (BACKENDS, CACHE_MODES, NATIVE, COMPILE_SCOPES, INDUCTOR_MODES, PADDINGS, PRECISIONS,
                               JobSpec, SpecError)
from tcbench.store.api import Store, StoreError, StoreMissing
from tcbench.job.track import StopTraining, compile_for_backend, device, track
from tcbench.parallel import (LinkAssumptions, ScalingProjection, ScalingResult, calibrate_link, link_samples,
                              load_scaling, project_scaling, scaling)
from tcbench.tuning import (Candidate, CompileConfig, CompileSearch, CompileSearchOptions, LrPrediction, MaxBatchResult,
                            NoiseScale, QualityOptions, QualityResult, RetuneOptions, RetuneResult,
                            find_max_batch, noise_scale, predict_lr, retune_lr, rule_lrs, time_to_quality, load_quality,
                            tune_compile, check_lr, LrPremise, PremiseOptions)
from tcbench.tuning.dashboard import Dashboard, dashboard, start_dashboard

__version__ = "0.1.0"


def models() -> pd.DataFrame:
    """The model catalog: name, family, task, size preset, layers, hidden, heads, approx. parameters."""
    return pd.DataFrame(models_table())


def backends() -> pd.DataFrame:
    """Each backend with whether it can run here and why (checked without importing torch)."""
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
    "StoredNoiseFloor", "load_comparison", "DEFAULT_RESOLVE", "DEFAULT_BUDGET_S", "DEFAULT_ROUNDS", "VERDICT_KINDS",
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
