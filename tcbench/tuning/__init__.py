"""Tuning around a batch-size change, a room per feature:

- ``batch/``: the largest batch that fits (``find_max_batch``);
- ``lr/``: the gradient noise scale (``noise_scale``), the learning rate it predicts (``predict_lr``) and the
  Optuna search from that prediction (``retune_lr``), and the check of its premise (``check_lr``);
- ``compile_search/``: the search of the compiled configuration (``tune_compile``).

What they share sits here: ``storage`` (Optuna storages, heartbeats, study names), ``dashboard`` (optuna-dashboard
over any study), ``plots`` (their figures). ``quality/`` asks the whole question (``time_to_quality``: compiled, at
a bigger batch with its learning rate, to a held-out target over seeds). Every public name is re-exported from
``tcbench``; the CLI's tuning commands are in ``tcbench.cli.tuning``."""

from tcbench.tuning.batch import MaxBatchResult, find_max_batch
from tcbench.tuning.compile_search import CompileConfig, CompileSearch, CompileSearchOptions, tune_compile
from tcbench.tuning.lr import (LrPrediction, LrPremise, NoiseScale, PremiseOptions, RetuneOptions, RetuneResult,
                               check_lr, noise_scale, predict_lr, retune_lr, rule_lrs)
from tcbench.tuning.quality import Candidate, QualityOptions, QualityResult, load_quality, time_to_quality

__all__ = ["find_max_batch", "MaxBatchResult", "noise_scale", "NoiseScale", "predict_lr", "LrPrediction",
           "retune_lr", "RetuneOptions", "RetuneResult", "rule_lrs",
           "tune_compile", "CompileSearchOptions", "CompileSearch", "CompileConfig", "time_to_quality", "load_quality",
           "Candidate", "QualityOptions", "QualityResult", "check_lr", "LrPremise", "PremiseOptions"]
