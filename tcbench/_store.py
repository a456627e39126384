"""The result store: one SQLite file (WAL), written as records arrive.

Tables: ``runs`` (one row per job, inserted when it starts and completed when it ends), ``steps``
(one row per optimizer step, committed as it arrives, so a killed job or kernel loses nothing
already measured), ``comparisons`` and ``probes``. Plain columns and JSON text only: no pickle,
no ``eval`` on load. The columns of ``runs`` and ``steps`` are derived from the result dataclasses
(``JobResult``, ``JobFigures``, ``StepRecord``); inserts name their columns. The schema carries a
version (``PRAGMA user_version``): an older store is upgraded when opened, a newer one is refused.
The path is ``$TCBENCH_DB``, else ``$TCBENCH_HOME/tcbench.db``, else ``~/.cache/tcbench/tcbench.db``;
it is read on every call so a notebook can switch stores.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from ._results import FIGURE_NAMES, JobFigures, JobResult, StepRecord, sql_type

SCHEMA_VERSION = 2

# what a finished job writes into its row (besides the figures): derived from JobResult's fields
RESULT_COLUMNS = ("status", "error", "cache_state", "device", "wall_s", "artifacts", "log_tail", *FIGURE_NAMES)
STEP_COLUMNS = tuple(f.name for f in dataclasses.fields(StepRecord))

_RUN_META = [("run_id", "INTEGER PRIMARY KEY AUTOINCREMENT"), ("comparison_id", "INTEGER"),
             ("round", "INTEGER DEFAULT 0"), ("label", "TEXT DEFAULT ''"), ("created", "REAL"), ("ended", "REAL"),
             ("model", "TEXT"), ("size", "TEXT"), ("backend", "TEXT"), ("batch_size", "INTEGER"),
             ("seq_len", "INTEGER"), ("precision", "TEXT"), ("pid", "INTEGER"), ("host", "TEXT"),
             ("spec_json", "TEXT"), ("env_json", "TEXT"), ("extra_json", "TEXT")]


def _typed(cls: type, names: Iterable[str]) -> list[tuple[str, str]]:
    return [(n, sql_type(cls, n)) for n in names]


TABLES: dict[str, list[tuple[str, str]]] = {
    "runs": _RUN_META + [("status", "TEXT"), ("error", "TEXT DEFAULT ''")]
    + _typed(JobResult, ("cache_state", "device", "wall_s", "artifacts", "log_tail"))
    + _typed(JobFigures, FIGURE_NAMES),
    "steps": [("run_id", "INTEGER")] + _typed(StepRecord, STEP_COLUMNS),
    "comparisons": [("comparison_id", "INTEGER PRIMARY KEY AUTOINCREMENT"), ("created", "REAL"), ("kind", "TEXT"),
                    ("model", "TEXT"), ("size", "TEXT"), ("backends", "TEXT"), ("rounds", "INTEGER"),
                    ("status", "TEXT"), ("spec_json", "TEXT"), ("info_json", "TEXT")],
    "probes": [("name", "TEXT"), ("created", "REAL"), ("host", "TEXT"), ("value", "REAL"), ("info_json", "TEXT"),
               ("threads", "INTEGER"), ("dtype", "TEXT"), ("torch", "TEXT"), ("disturbed", "TEXT DEFAULT ''")],
}
_KEYS = {"steps": ", PRIMARY KEY (run_id, step)"}


class StoreError(RuntimeError):
    """The store cannot be used as asked (a newer schema, an unusable path); the message names why."""


def home() -> Path:
    """tcbench's folder for the store, compile caches and run artifacts ($TCBENCH_HOME), always absolute."""
    return Path(os.environ.get("TCBENCH_HOME") or Path.home() / ".cache" / "tcbench").expanduser().resolve()


def default_path() -> Path:
    return Path(os.environ.get("TCBENCH_DB") or home() / "tcbench.db").expanduser().resolve()


class Store:
    """SQLite store; one short connection per operation, safe across threads and processes."""

    def __init__(self, path: str | os.PathLike | None = None) -> None:
        self.path = Path(path).expanduser().resolve() if path is not None else default_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._migrate()

    def _migrate(self) -> None:
        con = self._connect()
        try:
            version = con.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreError(f"the store {self.path} has schema version {version}, newer than this tcbench's "
                                 f"{SCHEMA_VERSION}; upgrade tcbench to read it")
            con.execute("BEGIN IMMEDIATE")
            for table, cols in TABLES.items():
                con.execute(f"CREATE TABLE IF NOT EXISTS {table} ("
                            + ", ".join(f"{n} {t}" for n, t in cols) + _KEYS.get(table, "") + ")")
                have = {row[1] for row in con.execute(f"PRAGMA table_info({table})")}
                for name, typ in cols:   # an older store: add the columns it lacks (old rows read as NULL)
                    if name not in have:
                        con.execute(f"ALTER TABLE {table} ADD COLUMN {name} {typ.replace(' PRIMARY KEY AUTOINCREMENT', '')}")
            con.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            con.execute("COMMIT")
        finally:
            con.close()

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

    def _insert(self, table: str, values: dict[str, Any]) -> int:
        cols = list(values)
        return self._write(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                           [values[c] for c in cols])

    # -- writes -------------------------------------------------------------------------------
    def insert_run(self, spec: Any, comparison_id: int | None = None, round: int = 0, label: str = "",
                   pid: int | None = None, host: str = "") -> int:
        return self._insert("runs", dict(
            comparison_id=comparison_id, round=round, label=label, created=time.time(), status="running",
            model=spec.model, size=spec.size, backend=spec.backend, batch_size=spec.batch_size, seq_len=spec.seq_len,
            precision=spec.precision, pid=pid, host=host, spec_json=spec.to_json()))

    def add_steps(self, run_id: int, recs: list[StepRecord]) -> None:
        """Several steps in one transaction (columns by name)."""
        cols = ("run_id", *STEP_COLUMNS)
        con = self._connect()
        try:
            con.execute("BEGIN IMMEDIATE")
            con.executemany(f"INSERT OR REPLACE INTO steps ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                            [(run_id, *(getattr(r, c) for c in STEP_COLUMNS)) for r in recs])
            con.execute("COMMIT")
        finally:
            con.close()

    def finish_run(self, result: JobResult) -> None:
        """Write a finished job's status, figures, environment and extra information into its row."""
        values = {c: getattr(result, c) for c in RESULT_COLUMNS}
        values.update(ended=time.time(), env_json=json.dumps(result.env, default=str),
                      extra_json=json.dumps(result.extra, default=str))
        sets = ", ".join(f"{c}=?" for c in values)
        self._write(f"UPDATE runs SET {sets} WHERE run_id=?", [*values.values(), result.run_id])

    def insert_comparison(self, kind: str, spec: Any, backends: list[str], rounds: int, info: dict) -> int:
        return self._insert("comparisons", dict(
            created=time.time(), kind=kind, model=spec.model, size=spec.size, backends=",".join(backends),
            rounds=rounds, status="running", spec_json=spec.to_json(), info_json=json.dumps(info, default=str)))

    def finish_comparison(self, comparison_id: int, status: str, info: dict) -> None:
        self._write("UPDATE comparisons SET status=?, info_json=? WHERE comparison_id=?",
                    (status, json.dumps(info, default=str), comparison_id))

    def add_probe(self, name: str, host: str, value: float, info: dict, threads: int = 0, dtype: str = "",
                  torch: str = "", disturbed: str = "") -> None:
        self._insert("probes", dict(name=name, created=time.time(), host=host, value=value, threads=threads,
                                    dtype=dtype, torch=torch, disturbed=disturbed, info_json=json.dumps(info)))

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

    def latest_probe(self, name: str, host: str, threads: int, dtype: str, torch: str,
                     max_age_s: float) -> dict | None:
        """The newest undisturbed probe for this host, thread count, dtype and torch version (or None)."""
        df = self.query("SELECT value, info_json FROM probes WHERE name=? AND host=? AND threads=? AND dtype=? "
                        "AND torch=? AND (disturbed IS NULL OR disturbed='') AND created>? ORDER BY created DESC "
                        "LIMIT 1", (name, host, threads, dtype, torch, time.time() - max_age_s))
        if df.empty:
            return None
        return {**json.loads(df.iloc[0]["info_json"] or "{}"), "flops": float(df.iloc[0]["value"])}
