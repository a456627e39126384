"""Plain data that every layer shares: the job spec, results and figures, the model catalog, instance
profiles and cost. Nothing here imports torch or starts a process."""
