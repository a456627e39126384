"""The result store: one SQLite file (WAL), written as records arrive.

Tables: ``runs`` (one row per job, inserted when it starts and completed when it ends), ``steps``
(one row per optimizer step, committed as it arrives, so a killed job or kernel loses nothing
already measured), ``comparisons`` and ``probes``. Plain columns and JSON text only: no pickle,
no ``eval`` on load. The path is ``$TCBENCH_DB``, else ``$TCBENCH_HOME/tcbench.db``, else
``~/.cache/tcbench/tcbench.db``; it is read on every call so a notebook can switch stores.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from ._results import StepRecord

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id INTEGER PRIMARY KEY AUTOINCREMENT,
    comparison_id INTEGER, round INTEGER DEFAULT 0,
    created REAL, ended REAL, status TEXT, error TEXT DEFAULT '',
    model TEXT, size TEXT, backend TEXT, batch_size INTEGER, seq_len INTEGER, precision TEXT,
    median_step_s REAL, samples_s REAL, tokens_s REAL, warmup_s REAL, compile_latency_s REAL,
    cache_state TEXT, peak_mem_bytes INTEGER, mfu REAL, flops_per_step REAL, peak_flops REAL,
    n_params INTEGER, final_loss REAL, recompiles_after_warmup INTEGER, graph_breaks INTEGER,
    device TEXT, wall_s REAL, artifacts TEXT, log_tail TEXT, spec_json TEXT, extra_json TEXT
);
CREATE TABLE IF NOT EXISTS steps (
    run_id INTEGER, step INTEGER, step_s REAL, samples_s REAL, tokens_s REAL, mem_bytes INTEGER,
    loss REAL, warmup INTEGER, seq_len INTEGER, PRIMARY KEY (run_id, step)
);
CREATE TABLE IF NOT EXISTS comparisons (
    comparison_id INTEGER PRIMARY KEY AUTOINCREMENT, created REAL, kind TEXT,
    model TEXT, size TEXT, backends TEXT, rounds INTEGER, status TEXT, spec_json TEXT, info_json TEXT
);
CREATE TABLE IF NOT EXISTS probes (
    name TEXT, created REAL, host TEXT, value REAL, info_json TEXT
);
"""

RESULT_COLUMNS = ("status", "error", "median_step_s", "samples_s", "tokens_s", "warmup_s", "compile_latency_s",
                  "cache_state", "peak_mem_bytes", "mfu", "flops_per_step", "peak_flops", "n_params", "final_loss",
                  "recompiles_after_warmup", "graph_breaks", "device", "wall_s", "artifacts", "log_tail")


def home() -> Path:
    """tcbench's folder for the store, compile caches and run artifacts ($TCBENCH_HOME)."""
    return Path(os.environ.get("TCBENCH_HOME") or Path.home() / ".cache" / "tcbench")


def default_path() -> Path:
    return Path(os.environ.get("TCBENCH_DB") or home() / "tcbench.db")


class Store:
    """SQLite store; one short connection per operation, safe across threads and processes."""

    def __init__(self, path: str | os.PathLike | None = None) -> None:
        self.path = Path(path) if path is not None else default_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as con:
            con.executescript(_SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        con = sqlite3.connect(self.path, timeout=60.0, isolation_level=None)
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA busy_timeout=60000")
        con.execute("PRAGMA synchronous=NORMAL")
        return con

    def _write(self, sql: str, params: Iterable[Any] = ()) -> int:
        con = self._connect()
        try:
            con.execute("BEGIN IMMEDIATE")
            cur = con.execute(sql, tuple(params))
            con.execute("COMMIT")
            return int(cur.lastrowid or 0)
        finally:
            con.close()

    # -- writes -------------------------------------------------------------------------------
    def insert_run(self, spec_json: str, spec: Any, comparison_id: int | None = None, round: int = 0) -> int:
        return self._write(
            "INSERT INTO runs (comparison_id, round, created, status, model, size, backend, batch_size, seq_len, "
            "precision, spec_json) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (comparison_id, round, time.time(), "running", spec.model, spec.size, spec.backend, spec.batch_size,
             spec.seq_len, spec.precision, spec_json))

    def add_step(self, run_id: int, rec: StepRecord) -> None:
        self._write("INSERT OR REPLACE INTO steps VALUES (?,?,?,?,?,?,?,?,?)",
                    (run_id, rec.step, rec.step_s, rec.samples_s, rec.tokens_s, rec.mem_bytes, rec.loss,
                     int(rec.warmup), rec.seq_len))

    def add_steps(self, run_id: int, recs: list[StepRecord]) -> None:
        """Several steps in one transaction."""
        con = self._connect()
        try:
            con.execute("BEGIN IMMEDIATE")
            con.executemany("INSERT OR REPLACE INTO steps VALUES (?,?,?,?,?,?,?,?,?)",
                            [(run_id, r.step, r.step_s, r.samples_s, r.tokens_s, r.mem_bytes, r.loss, int(r.warmup),
                              r.seq_len) for r in recs])
            con.execute("COMMIT")
        finally:
            con.close()

    def finish_run(self, run_id: int, figures: dict[str, Any], extra: dict[str, Any]) -> None:
        cols = [c for c in RESULT_COLUMNS if c in figures]
        sets = ", ".join(f"{c}=?" for c in cols)
        self._write(f"UPDATE runs SET ended=?, {sets}, extra_json=? WHERE run_id=?",
                    [time.time(), *[figures[c] for c in cols], json.dumps(extra, default=str), run_id])

    def insert_comparison(self, kind: str, spec: Any, backends: list[str], rounds: int, info: dict) -> int:
        return self._write(
            "INSERT INTO comparisons (created, kind, model, size, backends, rounds, status, spec_json, info_json) "
            "VALUES (?,?,?,?,?,?,?,?,?)",
            (time.time(), kind, spec.model, spec.size, ",".join(backends), rounds, "running", spec.to_json(),
             json.dumps(info, default=str)))

    def finish_comparison(self, comparison_id: int, status: str, info: dict) -> None:
        self._write("UPDATE comparisons SET status=?, info_json=? WHERE comparison_id=?",
                    (status, json.dumps(info, default=str), comparison_id))

    def add_probe(self, name: str, host: str, value: float, info: dict) -> None:
        self._write("INSERT INTO probes VALUES (?,?,?,?,?)", (name, time.time(), host, value, json.dumps(info)))

    # -- reads --------------------------------------------------------------------------------
    def query(self, sql: str, params: Iterable[Any] = ()) -> pd.DataFrame:
        con = self._connect()
        try:
            return pd.read_sql_query(sql, con, params=tuple(params))
        finally:
            con.close()

    def runs(self) -> pd.DataFrame:
        return self.query("SELECT * FROM runs ORDER BY run_id")

    def run_row(self, run_id: int) -> dict[str, Any]:
        df = self.query("SELECT * FROM runs WHERE run_id=?", (int(run_id),))
        if df.empty:
            raise KeyError(f"run_id={run_id} is not in the store {self.path}")
        return df.iloc[0].to_dict()

    def steps(self, run_id: int) -> pd.DataFrame:
        df = self.query("SELECT * FROM steps WHERE run_id=? ORDER BY step", (int(run_id),))
        df["warmup"] = df["warmup"].astype(bool)
        return df

    def comparisons(self) -> pd.DataFrame:
        return self.query("SELECT * FROM comparisons ORDER BY comparison_id")

    def comparison_row(self, comparison_id: int) -> dict[str, Any]:
        df = self.query("SELECT * FROM comparisons WHERE comparison_id=?", (int(comparison_id),))
        if df.empty:
            raise KeyError(f"comparison_id={comparison_id} is not in the store {self.path}")
        return df.iloc[0].to_dict()

    def comparison_runs(self, comparison_id: int) -> pd.DataFrame:
        return self.query("SELECT * FROM runs WHERE comparison_id=? ORDER BY run_id", (int(comparison_id),))

    def latest_probe(self, name: str, host: str, max_age_s: float) -> float | None:
        df = self.query("SELECT value FROM probes WHERE name=? AND host=? AND created>? ORDER BY created DESC LIMIT 1",
                        (name, host, time.time() - max_age_s))
        return None if df.empty else float(df.iloc[0]["value"])
