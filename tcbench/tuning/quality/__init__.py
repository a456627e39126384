"""Time to quality: does a candidate (compiled, at a bigger batch, with its learning rate) reach a held-out target
loss sooner than the native reference, over several seeds? ``study`` runs the candidates (``time_to_quality``),
``scoring`` scores their runs (MLPerf's olympic mean, paired ratios over seeds). Issue 38 builds the rest on it:
the default candidates at the largest batch, the learning rate's premise check, the CLI, the panel tab, resuming."""

from tcbench.tuning.quality.candidates import Candidate
from tcbench.tuning.quality.study import QualityOptions, QualityResult, QualityRun, time_to_quality

__all__ = ["time_to_quality", "Candidate", "QualityOptions", "QualityResult", "QualityRun"]
