"""Result dataclasses: StepRecord (one optimizer step) and JobResult (one job, summarised)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from ._spec import JobSpec

STATUSES = ("ok", "failed", "oom", "diverged", "interrupted", "unavailable", "running")


@dataclass(frozen=True)
class StepRecord:
    """One optimizer step, measured after the device was synchronised.

    ``loss`` is None on steps where the loss tensor was not read on the host (see
    ``JobSpec.loss_every``); ``mem_bytes`` is the peak memory so far above the post-load baseline.
    """

    step: int
    step_s: float
    samples_s: float
    tokens_s: float
    mem_bytes: int
    loss: float | None = None
    warmup: bool = False
    seq_len: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class JobResult:
    """What one job measured. Figures are None when the job ended before they existed."""

    spec: JobSpec
    status: str
    run_id: int | None = None
    error: str = ""
    records: list[StepRecord] = field(default_factory=list)
    median_step_s: float | None = None
    samples_s: float | None = None
    tokens_s: float | None = None
    warmup_s: float | None = None
    compile_latency_s: float | None = None
    cache_state: str = ""            # "cold" (the compile cache was filled by this job) / "warm" / "" (eager)
    peak_mem_bytes: int | None = None
    mfu: float | None = None
    flops_per_step: float | None = None
    peak_flops: float | None = None
    n_params: int | None = None
    final_loss: float | None = None
    recompiles_after_warmup: int | None = None
    graph_breaks: int | None = None
    device: str = ""
    wall_s: float | None = None
    artifacts: str = ""
    log_tail: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def steps(self) -> pd.DataFrame:
        """Every recorded step of this job as a DataFrame."""
        cols = [f.name for f in dataclasses.fields(StepRecord)]
        df = pd.DataFrame([r.to_dict() for r in self.records], columns=cols)
        df.insert(0, "backend", self.spec.backend)
        df.insert(0, "run_id", self.run_id)
        return df

    def losses(self) -> list[tuple[int, float]]:
        return [(r.step, r.loss) for r in self.records if r.loss is not None and math.isfinite(r.loss)]

    def summary_row(self) -> dict[str, Any]:
        s = self.spec
        return dict(run_id=self.run_id, model=s.model, size=s.size, backend=s.backend, batch_size=s.batch_size,
                    seq_len=s.seq_len, precision=s.precision, status=self.status,
                    median_step_ms=None if self.median_step_s is None else self.median_step_s * 1e3,
                    samples_s=self.samples_s, tokens_s=self.tokens_s,
                    compile_latency_s=self.compile_latency_s, cache=self.cache_state,
                    peak_mem_mb=None if self.peak_mem_bytes is None else self.peak_mem_bytes / 2**20,
                    mfu=self.mfu, final_loss=self.final_loss, recompiles=self.recompiles_after_warmup,
                    error=self.error)

    def __repr__(self) -> str:
        fig = "" if self.median_step_s is None else f", median_step_ms={self.median_step_s * 1e3:.1f}"
        err = f", error={self.error[:80]!r}" if self.error else ""
        return f"JobResult(run_id={self.run_id}, backend={self.spec.backend!r}, status={self.status!r}{fig}{err})"
