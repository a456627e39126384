"""History: everything in the store as DataFrames, and stored runs rebuilt as JobResults."""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd

from ._results import JobResult, StepRecord
from ._spec import JobSpec
from ._store import Store

_RUN_COLUMNS = ["run_id", "comparison_id", "round", "created", "status", "model", "size", "backend", "batch_size",
                "seq_len", "precision", "median_step_s", "samples_s", "tokens_s", "compile_latency_s", "cache_state",
                "peak_mem_bytes", "mfu", "final_loss", "recompiles_after_warmup", "error"]


def runs(store: Store | None = None) -> pd.DataFrame:
    """Every stored run (newest last); history survives kernel restarts."""
    df = (store or Store()).runs()
    df["created"] = pd.to_datetime(df["created"], unit="s")
    return df[_RUN_COLUMNS]


def steps(run_id: int, store: Store | None = None) -> pd.DataFrame:
    """One stored run's step records."""
    return (store or Store()).steps(run_id)


def comparisons(store: Store | None = None) -> pd.DataFrame:
    """Every stored comparison (and tuning/max-batch session), newest last."""
    df = (store or Store()).comparisons()
    df["created"] = pd.to_datetime(df["created"], unit="s")
    return df[["comparison_id", "created", "kind", "model", "size", "backends", "rounds", "status"]]


def _num(value: Any) -> Any:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value


def result_from_row(row: dict[str, Any], store: Store) -> JobResult:
    """A JobResult rebuilt from its stored row and steps."""
    spec = JobSpec.from_json(row["spec_json"])
    st = store.steps(int(row["run_id"]))
    records = [StepRecord(step=int(s.step), step_s=s.step_s, samples_s=s.samples_s, tokens_s=s.tokens_s,
                          mem_bytes=int(s.mem_bytes), loss=_num(s.loss), warmup=bool(s.warmup), seq_len=int(s.seq_len))
               for s in st.itertuples()]
    res = JobResult(spec=spec, status=row["status"], run_id=int(row["run_id"]), records=records)
    for key in ("error", "median_step_s", "samples_s", "tokens_s", "warmup_s", "compile_latency_s", "cache_state",
                "peak_mem_bytes", "mfu", "flops_per_step", "peak_flops", "n_params", "final_loss",
                "recompiles_after_warmup", "graph_breaks", "device", "wall_s", "artifacts", "log_tail"):
        val = _num(row.get(key))
        if val is not None:
            setattr(res, key, int(val) if key in ("peak_mem_bytes", "n_params", "recompiles_after_warmup",
                                                  "graph_breaks") else val)
    res.extra = json.loads(row["extra_json"]) if row.get("extra_json") else {}
    return res


def get_run(run_id: int, store: Store | None = None) -> JobResult:
    """One stored run as a JobResult."""
    store = store or Store()
    return result_from_row(store.run_row(run_id), store)
