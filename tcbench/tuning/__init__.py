"""Tuning around a batch-size change: the largest batch that fits (``find_max_batch``), the gradient noise scale
(``noise_scale``) and the learning rate it predicts (``predict_lr``), the Optuna search from that prediction
(``retune_lr``), and both stages in one call (``two_stage``); the search of the compiled configuration
(``tune_compile``). Every public name is re-exported from ``tcbench``.

Modules: ``maxbatch``, ``noise`` (the estimator), ``prediction`` (the formulas), ``retune`` (the study),
``compile_search`` (tune_compile; its space ``compile_space``, trials ``compile_trials`` and result
``compile_result``), ``storage`` (Optuna storages and heartbeats), ``workers`` (several processes on one study),
``twostage``, ``plots``; the tuning commands live in ``tcbench.cli.tuning``."""

from tcbench.tuning.compile_search import CompileConfig, CompileSearch, tune_compile
from tcbench.tuning.maxbatch import MaxBatchResult, find_max_batch
from tcbench.tuning.noise import NoiseScale, noise_scale
from tcbench.tuning.prediction import LrPrediction, predict_lr
from tcbench.tuning.retune import RetuneResult, retune_lr, rule_lrs
from tcbench.tuning.twostage import TwoStageResult, two_stage

__all__ = ["find_max_batch", "MaxBatchResult", "noise_scale", "NoiseScale", "predict_lr", "LrPrediction",
           "retune_lr", "RetuneResult", "rule_lrs", "two_stage", "TwoStageResult",
           "tune_compile", "CompileSearch", "CompileConfig"]
