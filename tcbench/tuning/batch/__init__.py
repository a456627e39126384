"""The largest batch that fits under a profile's memory, per backend (``find_max_batch``): ``search`` grows the batch
by doubling until a probe job fails, then bisects; the probes are kept as a study, so a search resumes."""

from tcbench.tuning.batch.search import MaxBatchResult, find_max_batch

__all__ = ["find_max_batch", "MaxBatchResult"]
