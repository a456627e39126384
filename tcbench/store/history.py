"""History: everything in the store as DataFrames, and stored runs rebuilt as JobResults.

The readers are derived from the result dataclasses' fields, like the store's columns.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from typing import Any

import pandas as pd

from tcbench.core.extras import JobExtras
from tcbench.core.results import FIGURE_NAMES, JobFigures, JobResult, StepRecord, field_type
from tcbench.core.spec import JobSpec
from tcbench.store.api import STEP_COLUMNS, Store
from tcbench.core.fmt import is_null

# tc.runs()'s columns, in its order: stored columns of the `runs` table (store.api's names; the figures are
# core.results.JobFigures'), two of them in people's units (median_step_s in ms, peak_mem_bytes in MiB). Data, not a
# display table: the values stay numbers; `tcbench runs` writes them through tcbench.view.format.COLUMNS.
_RUN_COLUMNS = ["run_id", "comparison_id", "round", "label", "created", "status", "model", "size", "backend",
                "batch_size", "seq_len", "precision", "median_step_ms", "step_cv", "samples_s", "tokens_s",
                "compile_latency_s", "cache_state", "peak_mem_mb", "mfu", "noisy", "noise_reason", "final_loss",
                "recompiles_after_warmup", "error"]
ENV_COLUMNS = ["host", "threads", "tcbench", "commit", "torch", "torch_xla", "transformers", "load_start",
               "load_end"]


def _num(value: Any) -> Any:
    return None if is_null(value) else value


def _env_cells(env_json: Any) -> dict[str, Any]:
    env = json.loads(env_json) if isinstance(env_json, str) and env_json else {}

    def load(key: str) -> str | None:
        return None if not env.get(key) else f"{env[key]['loadavg'][0]:.2f} ({env[key]['runnable']} runnable)"

    return {**{k: env.get(k) for k in ENV_COLUMNS[:7]}, "load_start": load("load_start"), "load_end": load("load_end")}


def _reading(store: Store | None) -> Store:
    """``store``, else the default store opened for reading: a missing one is a named error (``StoreMissing``), no
    file or folder is made."""
    return store or Store(create=False)


def runs(store: Store | None = None) -> pd.DataFrame:
    """Every stored run (newest last) with its figures and environment; history survives kernel restarts."""
    df = _reading(store).runs()
    df["created"] = pd.to_datetime(df["created"], unit="s")
    df["median_step_ms"] = df["median_step_s"] * 1e3
    df["peak_mem_mb"] = df["peak_mem_bytes"] / 2**20
    df["noisy"] = df["noisy"].map(lambda v: None if is_null(v) else bool(v))
    env = pd.DataFrame([_env_cells(v) for v in df["env_json"]], columns=ENV_COLUMNS, index=df.index)
    return pd.concat([df[_RUN_COLUMNS], env], axis=1)


def steps(run_id: int, store: Store | None = None) -> pd.DataFrame:
    """One stored run's step records."""
    return _reading(store).steps(run_id)


def comparisons(store: Store | None = None) -> pd.DataFrame:
    """Every stored comparison (and tuning/max-batch session), newest last."""
    df = _reading(store).comparisons()
    df["created"] = pd.to_datetime(df["created"], unit="s")
    return df[["comparison_id", "created", "kind", "model", "size", "backends", "rounds", "status"]]


@functools.lru_cache(maxsize=None)
def _type(cls: type, name: str) -> type:
    """A dataclass field's type (looked up once: rebuilding a run reads every cell of every step)."""
    return field_type(cls, name)


def _typed(cls: type, name: str, value: Any) -> Any:
    """A stored cell converted back to its dataclass field's type (SQLite keeps ints and bools as numbers)."""
    value = _num(value)
    if value is None:
        return None
    kind = _type(cls, name)
    if kind is bool:
        return bool(value)
    if kind is int:
        return int(value)
    return value


def _figures(row: dict[str, Any]) -> JobFigures:
    defaults = {f.name: f.default for f in dataclasses.fields(JobFigures)}
    values = {n: _typed(JobFigures, n, row.get(n)) for n in FIGURE_NAMES}
    return JobFigures(**{n: defaults[n] if v is None else v for n, v in values.items()})


def result_from_row(row: dict[str, Any], store: Store) -> JobResult:
    """A JobResult rebuilt from its stored row and steps."""
    spec = JobSpec.from_stored(row["spec_json"])
    st = store.steps(int(row["run_id"]))
    records = [StepRecord(**{c: _typed(StepRecord, c, rec[c]) for c in STEP_COLUMNS})
               for rec in st.to_dict("records")]
    res = JobResult(spec=spec, status=row["status"], run_id=int(row["run_id"]), records=records,
                    figures=_figures(row), round=int(_num(row.get("round")) or 0), label=_num(row.get("label")) or "")
    for key in ("error", "cache_state", "device", "wall_s", "artifacts", "log_tail"):
        val = _num(row.get(key))
        if val is not None:
            setattr(res, key, val)
    res.env = json.loads(row["env_json"]) if _num(row.get("env_json")) else {}
    res.extra = JobExtras.from_json(_num(row.get("extra_json")))
    return res


def get_run(run_id: int, store: Store | None = None) -> JobResult:
    """One stored run as a JobResult."""
    store = _reading(store)
    return result_from_row(store.run_row(run_id), store)
