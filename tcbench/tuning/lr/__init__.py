"""The learning rate after a batch-size change: the gradient noise scale and the rate it predicts, and the Optuna
search that retunes it.

- ``noise``: the noise-scale job (``noise_scale``) and the stored measurement (``stored_noise_scale``);
- ``premise``: whether lr0 is near its optimum at its batch, the premise of every prediction (``check_lr``);
- ``prediction``: the formulas (``predict_lr``, ``LrPrediction``) and the linear and square-root rules;
- ``retune``: ``retune_lr`` and its options, where its study is opened (``_open_study``) and run;
- ``study``: one trial (a job, watched for pruning), the pruner and sampler, ``StudyContext``;
- ``result``: ``RetuneResult`` built from the study;
- ``workers``: several processes on one study (``n_workers``, ``tcbench tune-worker``).

The Optuna storages and study names they share with ``compile_search`` are in ``tcbench.tuning.storage``."""

from tcbench.tuning.lr.noise import NoiseScale, noise_scale
from tcbench.tuning.lr.premise import LrPremise, PremiseOptions, check_lr
from tcbench.tuning.lr.prediction import LrPrediction, predict_lr
from tcbench.tuning.lr.retune import RetuneOptions, RetuneResult, retune_lr, rule_lrs

__all__ = ["noise_scale", "NoiseScale", "predict_lr", "LrPrediction", "retune_lr", "RetuneOptions", "RetuneResult",
           "rule_lrs", "check_lr", "LrPremise", "PremiseOptions"]
