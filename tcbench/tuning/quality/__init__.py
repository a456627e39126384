"""Time to quality: does a candidate (compiled, at a bigger batch, with its learning rate) reach a held-out target
loss sooner than the native reference, over several seeds? ``study`` runs the candidates (``time_to_quality``),
``candidates`` makes the default ones (compiled, at a bigger batch with its predicted learning rate), ``scoring``
scores their runs (MLPerf's olympic mean, paired ratios over seeds), ``view`` draws and reports them."""

from tcbench.tuning.quality.candidates import Candidate
from tcbench.tuning.quality.study import QualityOptions, QualityResult, QualityRun, load_quality, time_to_quality

__all__ = ["time_to_quality", "load_quality", "Candidate", "QualityOptions", "QualityResult", "QualityRun"]
