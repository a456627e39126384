"""The result store: one SQLite file (WAL) or a PostgreSQL database, written as records arrive.

Tables: ``runs`` (one row per job, inserted when it starts and completed when it ends), ``steps``
(one row per optimizer step, committed as it arrives, so a killed job or kernel loses nothing
already measured), ``comparisons`` (their job labels in ``comparison_labels``, one row each) and
``probes``. Plain columns and JSON text only: no pickle, no ``eval`` on load. The columns of ``runs``
and ``steps`` are derived from the result dataclasses (``JobResult``, ``JobFigures``, ``StepRecord``);
inserts name their columns. tcbench's other modules read through the store's named methods, never SQL of their own.
The schema carries a version (``PRAGMA user_version``; on PostgreSQL a ``tcbench_meta`` row): an older store
is upgraded when opened, a newer one is refused. The store is ``$TCBENCH_DB`` (a path, ``sqlite:///path`` or
``postgresql://user:password@host:port/db``, see ``store/postgres.py``), else ``$TCBENCH_HOME/tcbench.db``, else
``~/.cache/tcbench/tcbench.db``; it is read on every call so a notebook can switch stores.

Nothing measured is lost and nothing stays ``running`` for ever:

- every run and comparison records the pid and host of the process that runs it and a heartbeat;
  opening the store marks ``interrupted`` the ones whose process is gone (same host) or whose
  heartbeat is older than ``STALE_S`` (another host), and ends a dead job's leftover processes;
- records that cannot be written now (the store locked for long, the disk full) are spooled to
  ``<store>.spool/`` (PostgreSQL: ``$TCBENCH_HOME/spool/<server and database>/``; when that cannot be
  written either, a folder under the temp dir) and merged the next time the store is opened;
- a store the process may not write (an archive, a read-only share) opens for reading: history,
  reports and exports work; a write names the path and why.
"""

from __future__ import annotations

import dataclasses
import json
import numbers
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import pandas as pd

from tcbench.core.extras import JobExtras
from tcbench.core.fmt import is_null
from tcbench.core.results import FIGURE_NAMES, JobFigures, JobResult, StepRecord, field_type, sql_type
from tcbench.core.spec import JobSpec
from tcbench.host.paths import home, is_url as _is_url, private_dir, sqlite_file_text, store_location  # noqa: F401 (home: re-exported)
from tcbench.host.processes import end_leftovers, pid_alive
from tcbench.store.base import Database, StoreError, StoreMissing, StoreUnreachable  # noqa: F401 (StoreMissing: re-exported)
from tcbench.store.postgres import Postgres, mask
from tcbench.store.sqlite import SQLite

SCHEMA_VERSION = 6   # 4: the compile phases (core.results.CompilePhases) among a run's figures; 5: compile_artifacts;
#                      6: a comparison's labels as rows (comparison_labels), no longer only its comma-joined backends
HEARTBEAT_S = 30.0    # a running job's parent touches its row at least this often
STALE_S = 600.0       # a running row without a heartbeat for this long is interrupted when the store is opened

# what a finished job writes into its row (besides the figures): derived from JobResult's fields
RESULT_COLUMNS = ("status", "error", "cache_state", "device", "wall_s", "artifacts", "log_tail", *FIGURE_NAMES)
STEP_COLUMNS = tuple(f.name for f in dataclasses.fields(StepRecord))

_RUN_META = [("run_id", "INTEGER PRIMARY KEY AUTOINCREMENT"), ("comparison_id", "INTEGER"),
             ("round", "INTEGER DEFAULT 0"), ("label", "TEXT DEFAULT ''"), ("created", "REAL"), ("ended", "REAL"),
             ("model", "TEXT"), ("size", "TEXT"), ("backend", "TEXT"), ("batch_size", "INTEGER"),
             ("seq_len", "INTEGER"), ("precision", "TEXT"), ("pid", "INTEGER"), ("host", "TEXT"),
             ("heartbeat", "REAL"), ("worker_pid", "INTEGER"),
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
                    ("status", "TEXT"), ("spec_json", "TEXT"), ("info_json", "TEXT"), ("pid", "INTEGER"),
                    ("host", "TEXT"), ("heartbeat", "REAL")],
    # a comparison's job labels in order (its ``backends`` column keeps them comma-joined, for display only)
    "comparison_labels": [("comparison_id", "INTEGER"), ("position", "INTEGER"), ("label", "TEXT")],
    "probes": [("name", "TEXT"), ("created", "REAL"), ("host", "TEXT"), ("value", "REAL"), ("info_json", "TEXT"),
               ("threads", "INTEGER"), ("dtype", "TEXT"), ("torch", "TEXT"), ("disturbed", "TEXT DEFAULT ''")],
    # compile artifacts kept for a team (tcbench.job.artifacts: the key, the fields it is made of, torch's bytes)
    "compile_artifacts": [("artifact_key", "TEXT"), ("created", "REAL"), ("host", "TEXT"), ("fields_json", "TEXT"),
                          ("sha256", "TEXT"), ("bytes", "INTEGER"), ("data", "BLOB")],
}
_KEYS = {"steps": ", PRIMARY KEY (run_id, step)", "compile_artifacts": ", PRIMARY KEY (artifact_key)",
         "comparison_labels": ", PRIMARY KEY (comparison_id, position)"}
_LABELS_SINCE = 6   # the schema version that keeps a comparison's labels as rows
_INSERT_LABEL = ("INSERT INTO comparison_labels (comparison_id, position, label) VALUES (:cid, :position, :label) "
                 "ON CONFLICT (comparison_id, position) DO NOTHING")


def _upgrade(tx: Any, found: int) -> None:
    """What an older schema kept otherwise, rewritten in the upgrade's transaction: before schema 6 a comparison's
    labels were only its comma-joined ``backends`` (labels could not contain commas then)."""
    if found >= _LABELS_SINCE:
        return
    rows = tx.fetch("SELECT comparison_id, backends FROM comparisons WHERE comparison_id NOT IN "
                    "(SELECT comparison_id FROM comparison_labels)")
    tx.executemany(_INSERT_LABEL, [{"cid": int(cid), "position": i, "label": label}
                                   for cid, text in rows if text for i, label in enumerate(text.split(","))])


@dataclass(frozen=True)
class StoredComparison:
    """A comparison as ``Store.done_comparisons`` (or ``unfinished_comparisons``) reads it: its spec and info parsed
    from their JSON."""

    comparison_id: int
    created: float
    spec: JobSpec
    info: dict[str, Any]


@dataclass(frozen=True)
class RoundStep:
    """One ok job's step in a stored comparison's round as its ratio reads it (``Store.round_steps``), with the
    figures that say whether the machine disturbed it (``NOISE_FIGURES``; the others left at their defaults)."""

    comparison_id: int
    round: int
    name: str             # the job's label where one is stored (an A/A twin, a variant), else its backend
    step_s: float         # its fast_step_s (the median for a job stored before that was kept)
    cache_state: str = ""   # "cold", "warm", "artifacts" for a compiled job ("" for a native one)
    figures: JobFigures = field(default_factory=JobFigures)


# what measure.metrics.voided reads of a job: whether it was disturbed, and whether that was a disturbance both jobs
# of a lock-step round share
NOISE_FIGURES = ("noisy", "steady_steps", "step_cv", "step_iqr_s", "median_step_s", "wait_share", "others_share",
                 "steal_share", "cpu_share")


@dataclass(frozen=True)
class StoredRun:
    """An ok run as ``Store.ok_runs`` reads it: its spec and extra information parsed from their JSON."""

    run_id: int
    spec: JobSpec
    extra: JobExtras


def default_path() -> Path | str:
    """``$TCBENCH_DB`` (a path, or a database URL as it is), else the file under ``home()``."""
    return store_location()


def database(location: str | os.PathLike | None, create: bool = True) -> Database:
    """The database ``location`` names: a path or ``sqlite:///path`` → SQLite; ``postgresql://…`` → PostgreSQL.
    ``create``: False refuses a missing SQLite file when it is opened (a PostgreSQL database is never created)."""
    location = default_path() if location is None else location
    text = str(location)
    if isinstance(location, str) and _is_url(text):
        scheme = text.split("://", 1)[0].split("+", 1)[0].lower()
        if scheme in ("postgresql", "postgres"):
            return Postgres(text)
        if scheme == "sqlite":
            return SQLite(sqlite_file_text(text), create)
        raise StoreError(f"TCBENCH_DB={mask(text)!r} is not a store tcbench can use; allowed: a file path, "
                         "sqlite:///path or postgresql://user:password@host:port/database")
    return SQLite(location, create)


def _upsert_steps() -> str:
    """Steps by (run_id, step): a step written again (a retried write, a merged spool) replaces the row."""
    cols = ("run_id", *STEP_COLUMNS)
    return (f"INSERT INTO steps ({', '.join(cols)}) VALUES ({', '.join(':' + c for c in cols)}) "
            f"ON CONFLICT (run_id, step) "
            f"DO UPDATE SET {', '.join(f'{c}=excluded.{c}' for c in STEP_COLUMNS if c != 'step')}")


class Store:
    """The store: SQLite or PostgreSQL (``path``: a path or a URL); one short connection per operation, safe
    across threads and processes.

    ``readonly``: None decides from the file's and folder's permissions (PostgreSQL: from the user's
    privileges); True opens for reading only. ``create``: False opens an existing store only (what history,
    reports and exports use): a missing SQLite file is a ``StoreMissing`` error and no file or folder is made;
    only writing creates a store. Opening a writable store upgrades an older schema, merges spooled records and
    reconciles runs and comparisons whose process is gone. ``path`` names the store in messages (for a URL: its
    password masked).
    """

    def __init__(self, path: str | os.PathLike | None = None, readonly: bool | None = None,
                 create: bool = True) -> None:
        self._db = database(path, create)
        self.path = self._db.path
        self.readonly = self._db.open(readonly)
        self.schema = self._check_version()   # a store opened read-only keeps an older schema: readers follow it
        if self.readonly:
            return
        if self.schema < SCHEMA_VERSION or create:   # a reader of a current store writes no schema
            self._db.migrate(TABLES, _KEYS, SCHEMA_VERSION, _upgrade)
            self.schema = SCHEMA_VERSION
        self.merge_spool()
        self.reconcile()

    def _check_version(self) -> int:
        version = self._db.version(self.readonly)
        if version > SCHEMA_VERSION:
            raise StoreError(f"the store {self.path} has schema version {version}, newer than this tcbench's "
                             f"{SCHEMA_VERSION}; upgrade tcbench to read it")
        return version

    def url(self) -> str:
        """The store as a database URL (``sqlite:///path``; for PostgreSQL with its password: pass it on, never
        show it, ``path`` is the shown form). ``retune_lr(storage="store")`` keeps its study there."""
        return self._db.url()

    @property
    def shared(self) -> bool:
        """A store several machines open (PostgreSQL): what one keeps there, the others find (compile artifacts)."""
        return isinstance(self._db, Postgres)

    def require_writable(self) -> None:
        if self.readonly:
            raise StoreError(f"the store {self.path} is open read-only (this process may not write it or its "
                             "folder); history, reports and exports work, new runs need a writable TCBENCH_DB")

    def _write(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        self.require_writable()
        with self._db.transaction(60.0) as tx:
            tx.execute(sql, params)

    def _insert(self, table: str, values: dict[str, Any], key: str) -> int:
        self.require_writable()
        with self._db.transaction(60.0) as tx:
            return tx.insert(table, values, key)

    # -- writes -------------------------------------------------------------------------------
    def insert_run(self, spec: Any, comparison_id: int | None = None, round: int = 0, label: str = "",
                   pid: int | None = None, host: str = "") -> int:
        now = time.time()
        return self._insert("runs", dict(
            comparison_id=comparison_id, round=round, label=label, created=now, heartbeat=now, status="running",
            model=spec.model, size=spec.size, backend=spec.backend, batch_size=spec.batch_size, seq_len=spec.seq_len,
            precision=spec.precision, pid=os.getpid() if pid is None else pid, host=host or socket.gethostname(),
            spec_json=spec.to_json()), "run_id")

    def add_steps(self, run_id: int, recs: list[StepRecord], timeout: float = 60.0) -> None:
        """Several steps in one transaction (columns by name); also the run's heartbeat.

        Raises the database's operational error (``transient``) when the store stays locked for ``timeout``
        s, the disk is full or the server cannot be reached: the caller keeps the records and tries again,
        or spools them (``spool``).
        """
        self.require_writable()
        with self._db.transaction(timeout) as tx:
            tx.executemany(_upsert_steps(), [{"run_id": run_id, **{c: getattr(r, c) for c in STEP_COLUMNS}}
                                             for r in recs])
            tx.execute("UPDATE runs SET heartbeat=:now WHERE run_id=:run", {"now": time.time(), "run": run_id})

    def beat(self, run_id: int, timeout: float = 2.0, **started: Any) -> None:
        """The run (and its comparison) is alive. ``started``: ``worker_pid`` (the job process, leader of its
        process group) and ``artifacts`` (its folder), written once the job process exists."""
        unknown = set(started) - {"worker_pid", "artifacts"}
        if unknown:
            raise TypeError(f"beat() got unknown fields {sorted(unknown)}")
        with self._db.transaction(timeout, self.readonly) as tx:
            now = time.time()
            self._update_run(tx, run_id, {"heartbeat": now, **started})
            tx.execute("UPDATE comparisons SET heartbeat=:now WHERE comparison_id=(SELECT comparison_id FROM runs "
                       "WHERE run_id=:run)", {"now": now, "run": run_id})

    def _finish_values(self, result: JobResult) -> dict[str, Any]:
        values = {c: getattr(result, c) for c in RESULT_COLUMNS}
        values.update(ended=time.time(), env_json=json.dumps(result.env, default=str),
                      extra_json=result.extra.to_json())
        return values

    def _update_run(self, tx: Any, run_id: int, values: dict[str, Any]) -> None:
        sets = ", ".join(f"{c}=:{c}" for c in values)   # column names from the code (RESULT_COLUMNS & co)
        tx.execute(f"UPDATE runs SET {sets} WHERE run_id=:run_id_", {**values, "run_id_": run_id})

    def finish_run(self, result: JobResult, timeout: float = 60.0) -> None:
        """Write a finished job's status, figures, environment and extra information into its row."""
        self.require_writable()
        with self._db.transaction(timeout) as tx:
            self._update_run(tx, result.run_id, self._finish_values(result))

    def insert_comparison(self, kind: str, spec: Any, backends: list[str], rounds: int, info: dict) -> int:
        """A new running comparison and its labels (``backends``, in order: one row each); its id."""
        self.require_writable()
        now = time.time()
        with self._db.transaction(60.0) as tx:
            cid = tx.insert("comparisons", dict(
                created=now, heartbeat=now, kind=kind, model=spec.model, size=spec.size, backends=",".join(backends),
                rounds=rounds, status="running", spec_json=spec.to_json(), info_json=json.dumps(info, default=str),
                pid=os.getpid(), host=socket.gethostname()), "comparison_id")
            tx.executemany(_INSERT_LABEL, [{"cid": cid, "position": i, "label": label}
                                           for i, label in enumerate(backends)])
        return cid

    def update_comparison_info(self, comparison_id: int, info: dict) -> None:
        """A running comparison's info as known so far (what a kill before its finish must not lose)."""
        self._write("UPDATE comparisons SET info_json=:info, heartbeat=:now WHERE comparison_id=:cid",
                    {"info": json.dumps(info, default=str), "now": time.time(), "cid": comparison_id})

    def finish_comparison(self, comparison_id: int, status: str, info: dict, rounds: int | None = None) -> None:
        """The comparison's final status and info (and, for adaptive rounds, how many rounds ran)."""
        self._write("UPDATE comparisons SET status=:status, info_json=:info, heartbeat=:now, "
                    "rounds=COALESCE(:rounds, rounds) WHERE comparison_id=:cid",
                    {"status": status, "info": json.dumps(info, default=str), "now": time.time(), "rounds": rounds,
                     "cid": comparison_id})

    # -- what could not be written now: spooled beside the store, merged on the next open ----------
    def spool_dirs(self) -> list[Path]:
        """Where records that could not be written are kept: beside the store (PostgreSQL: under ``home()``),
        else under the temp dir."""
        return self._db.spool_dirs()

    def spool(self, run_id: int, steps: list[StepRecord], result: JobResult | None = None) -> Path:
        """Keep steps (and the run's final row) in a file to merge on the next open; the path written.

        Raises StoreError naming every place tried and why, when none can be written.
        """
        line = json.dumps({"run_id": run_id, "steps": [dataclasses.asdict(r) for r in steps],
                           "finish": None if result is None else self._finish_values(result)}, default=str)
        errors = []
        for folder in self.spool_dirs():
            path = folder / f"run-{run_id}-{os.getpid()}.jsonl"
            try:
                private_dir(folder)
                with open(path, "a") as f:
                    f.write(line + "\n")
                    f.flush()
                    os.fsync(f.fileno())
                return path
            except (OSError, StoreError) as exc:
                errors.append(f"{folder}: {getattr(exc, 'strerror', None) or exc}")
        raise StoreError(f"could not write {len(steps)} step(s) of run {run_id} to the store {self.path} nor spool "
                         f"them ({'; '.join(errors)}); they are still in the returned JobResult")

    def merge_spool(self) -> int:
        """Write spooled records into the store (then delete their files); the number of steps merged."""
        merged = 0
        for folder in self.spool_dirs():
            for path in sorted(folder.glob("run-*.jsonl")) if folder.is_dir() else []:
                try:
                    entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
                except (OSError, ValueError):
                    continue
                try:
                    with self._db.transaction(5.0) as tx:
                        for e in entries:
                            tx.executemany(_upsert_steps(),
                                           [{"run_id": e["run_id"], **{c: s.get(c) for c in STEP_COLUMNS}}
                                            for s in e["steps"]])
                            if e.get("finish"):
                                self._update_run(tx, e["run_id"], e["finish"])
                except self._db.operational + (StoreUnreachable,):
                    return merged   # still locked, full or unreachable: the next open tries again
                merged += sum(len(e["steps"]) for e in entries)
                path.unlink(missing_ok=True)
        return merged

    # -- runs and comparisons whose process is gone ----------------------------------------------
    def reconcile(self) -> list[int]:
        """Mark ``interrupted`` the running runs and comparisons whose process is gone; the run ids marked.

        Same host: the recording process no longer exists (or has not beaten for STALE_S, a reused
        pid). Another host: no heartbeat for STALE_S. A dead job's leftover processes are ended.
        """
        host, now = socket.gethostname(), time.time()
        lost = self._db.operational + (StoreUnreachable,)

        def gone(pid: Any, row_host: Any, beat: Any) -> str:
            beat = beat if beat == beat and beat is not None else 0.0
            if row_host == host and pid is not None and pid == pid and not pid_alive(pid):
                return "the process running this job ended without reporting"
            if now - beat > STALE_S:
                return f"no heartbeat for {(now - beat) / 60:.0f} min; the process running this job is gone"
            return ""

        try:
            runs = self.query("SELECT run_id, pid, host, heartbeat, created, worker_pid, artifacts FROM runs "
                              "WHERE status='running'")
            cmps = self.query("SELECT comparison_id, pid, host, heartbeat, created FROM comparisons "
                              "WHERE status='running'")
        except lost:
            return []
        marked = []
        for r in runs.itertuples():
            why = gone(r.pid, r.host, r.heartbeat if r.heartbeat == r.heartbeat else r.created)
            if not why:
                continue
            if r.host == host and r.worker_pid == r.worker_pid and r.worker_pid:
                end_leftovers(r.worker_pid, r.artifacts)
            try:
                self._write("UPDATE runs SET status='interrupted', error=:why, ended=:now WHERE run_id=:run "
                            "AND status='running'",
                            {"why": f"{why}; the steps it reported are kept", "now": now, "run": int(r.run_id)})
                marked.append(int(r.run_id))
            except lost:
                return marked
        for c in cmps.itertuples():
            why = gone(c.pid, c.host, c.heartbeat if c.heartbeat == c.heartbeat else c.created)
            if why:
                try:
                    self._write("UPDATE comparisons SET status='interrupted' WHERE comparison_id=:cid AND "
                                "status='running'", {"cid": int(c.comparison_id)})
                except lost:
                    return marked
        return marked

    def add_probe(self, name: str, host: str, value: float, info: dict, threads: int = 0, dtype: str = "",
                  torch: str = "", disturbed: str = "") -> None:
        if self.readonly:   # a probe is a cache: a read-only store simply does not keep it
            return
        self._insert("probes", dict(name=name, created=time.time(), host=host, value=value, threads=threads,
                                    dtype=dtype, torch=torch, disturbed=disturbed, info_json=json.dumps(info)), "")

    def put_artifact(self, head: Mapping[str, Any], data: bytes) -> bool:
        """Keep a compile artifact (its header as ``tcbench.job.artifacts`` writes it, and its bytes) for everyone
        who opens this store; the first one kept for a key stays (a key's bytes are the same compiled code). Whether
        it was new. A read-only store keeps nothing."""
        if self.readonly or not self.query("SELECT artifact_key FROM compile_artifacts WHERE artifact_key = :k",
                                           {"k": head["key"]}).empty:
            return False
        self._write("INSERT INTO compile_artifacts (artifact_key, created, host, fields_json, sha256, bytes, data) "
                    "VALUES (:k, :created, :host, :fields, :sha, :n, :data) ON CONFLICT (artifact_key) DO NOTHING",
                    {"k": head["key"], "created": time.time(), "host": socket.gethostname(),
                     "fields": json.dumps(head["fields"], default=str, sort_keys=True), "sha": head["sha256"],
                     "n": int(head["bytes"]), "data": bytes(data)})
        return True

    def artifacts_for(self, wanted: Mapping[str, Any]) -> list[tuple[dict, bytes]]:
        """The compile artifacts whose fields include ``wanted`` (a job's own fields, without the machine's): (their
        header, their bytes) each; which of them fits a machine is for its key to say."""
        want = json.loads(json.dumps(dict(wanted), default=str))
        heads = self.query("SELECT artifact_key, fields_json, sha256, bytes FROM compile_artifacts")
        keys = [r.artifact_key for r in heads.itertuples()
                if all(json.loads(r.fields_json).get(k) == v for k, v in want.items())]
        out = []
        for key in keys:
            row = self.query("SELECT artifact_key, fields_json, sha256, bytes, data FROM compile_artifacts "
                             "WHERE artifact_key = :k", {"k": key}).iloc[0]
            out.append(({"key": row["artifact_key"], "fields": json.loads(row["fields_json"]),
                         "bytes": int(row["bytes"]), "sha256": row["sha256"]}, bytes(row["data"])))
        return out

    # -- reads --------------------------------------------------------------------------------
    def query(self, sql: str, params: Mapping[str, Any] | None = None) -> pd.DataFrame:
        """The rows of ``sql`` as a DataFrame; parameters by name, whatever the database: ``:name`` in the SQL and
        ``params={"name": value}`` (SQLite takes them as they are, SQLAlchemy binds them on PostgreSQL)."""
        return self._db.query(sql, dict(params or {}), self.readonly)

    def runs(self) -> pd.DataFrame:
        return self.query("SELECT * FROM runs ORDER BY run_id")

    def run_row(self, run_id: int) -> dict[str, Any]:
        df = self.query("SELECT * FROM runs WHERE run_id=:run", {"run": int(run_id)})
        if df.empty:
            raise KeyError(f"run_id={run_id} is not in the store {self.path}")
        return df.iloc[0].to_dict()

    def steps(self, run_id: int) -> pd.DataFrame:
        df = self.query("SELECT * FROM steps WHERE run_id=:run ORDER BY step", {"run": int(run_id)})
        df["warmup"] = df["warmup"].astype(bool)
        return df

    def comparisons(self) -> pd.DataFrame:
        return self.query("SELECT * FROM comparisons ORDER BY comparison_id")

    def comparison_row(self, comparison_id: int) -> dict[str, Any]:
        if isinstance(comparison_id, bool) or not isinstance(comparison_id, numbers.Integral) or comparison_id < 1:
            raise ValueError(f"comparison_id={comparison_id!r} is not allowed; allowed: a whole number from 1 (tcbench "
                             "comparisons lists them)")
        df = self.query("SELECT * FROM comparisons WHERE comparison_id=:cid", {"cid": int(comparison_id)})
        if df.empty:
            raise KeyError(f"comparison_id={comparison_id} is not in the store {self.path}")
        return df.iloc[0].to_dict()

    def comparison_labels(self, comparison_id: int) -> list[str]:
        """The comparison's job labels in order (the native job's first)."""
        if self.schema < _LABELS_SINCE:   # an older store opened read-only: its labels are comma-joined
            text = self.comparison_row(comparison_id)["backends"]
            return text.split(",") if text else []
        df = self.query("SELECT label FROM comparison_labels WHERE comparison_id=:cid ORDER BY position",
                        {"cid": int(comparison_id)})
        return [str(label) for label in df["label"]]

    def done_comparisons(self, kind: str, model: str | None = None, size: str | None = None,
                         since: float | None = None) -> list[StoredComparison]:
        """The finished comparisons of ``kind`` (of ``model`` and ``size``, created after ``since``, where given),
        newest first; which of their specs match is for the caller to say (by their fields)."""
        return self._comparisons_of(kind, "status = 'done'", model, size, since)

    def unfinished_comparisons(self, kind: str, model: str | None = None,
                               size: str | None = None) -> list[StoredComparison]:
        """The comparisons of ``kind`` that did not finish (stopped, failed, or still ``running`` because their
        process was killed), newest first: what a study resumes from."""
        return self._comparisons_of(kind, "status <> 'done'", model, size, None)

    def _comparisons_of(self, kind: str, status: str, model: str | None, size: str | None,
                        since: float | None) -> list[StoredComparison]:
        given = {k: v for k, v in {"model": model, "size": size}.items() if v is not None}
        where = "".join(f" AND {k} = :{k}" for k in given) + ("" if since is None else " AND created > :since")
        df = self.query("SELECT comparison_id, created, spec_json, info_json FROM comparisons WHERE kind = :kind "
                        f"AND {status}{where} ORDER BY comparison_id DESC",
                        {"kind": kind, **given, **({} if since is None else {"since": since})})
        return [StoredComparison(int(r.comparison_id), float(r.created), JobSpec.from_stored(r.spec_json),
                                 json.loads(r.info_json or "{}")) for r in df.itertuples()]

    def round_steps(self, comparison_ids: list[int], host: str) -> list[RoundStep]:
        """The step of every ok job run on ``host`` in these comparisons as a round's ratio reads it
        (``fast_step_s``; a job stored before it was kept: its median), with its noise figures; none: empty."""
        if not comparison_ids:
            return []
        ids = {f"c{i}": int(cid) for i, cid in enumerate(comparison_ids)}
        df = self.query("SELECT comparison_id, round, backend, label, COALESCE(fast_step_s, median_step_s) AS step_s, "
                        f"cache_state, {', '.join(NOISE_FIGURES)} "
                        f"FROM runs WHERE comparison_id IN "
                        f"({', '.join(':' + k for k in ids)}) AND status = 'ok' AND host = :host "
                        "AND median_step_s > 0", {**ids, "host": host})
        kinds = {n: field_type(JobFigures, n) for n in NOISE_FIGURES}   # SQLite keeps bools and ints as numbers
        return [RoundStep(int(r["comparison_id"]), int(r["round"]), r["label"] or r["backend"], float(r["step_s"]),
                          r["cache_state"] or "",
                          JobFigures(**{n: kinds[n](r[n]) for n in NOISE_FIGURES if not is_null(r[n])}))
                for r in df.to_dict("records")]

    def ok_runs(self, backend: str, model: str, size: str, batch_size: int, precision: str) -> list[StoredRun]:
        """The runs that ended ok with these columns, newest first; which of their specs match is the caller's."""
        df = self.query("SELECT run_id, spec_json, extra_json FROM runs WHERE status = 'ok' AND backend = :backend "
                        "AND model = :model AND size = :size AND batch_size = :batch AND precision = :precision "
                        "ORDER BY run_id DESC", {"backend": backend, "model": model, "size": size, "batch": batch_size,
                                                 "precision": precision})
        return [StoredRun(int(r.run_id), JobSpec.from_stored(r.spec_json), JobExtras.from_json(r.extra_json))
                for r in df.itertuples()]

    def comparison_runs(self, comparison_id: int) -> pd.DataFrame:
        return self.query("SELECT * FROM runs WHERE comparison_id=:cid ORDER BY run_id", {"cid": int(comparison_id)})

    def latest_probe(self, name: str, host: str, threads: int, dtype: str, torch: str,
                     max_age_s: float) -> dict | None:
        """The newest undisturbed probe for this host, thread count, dtype and torch version (or None)."""
        df = self.query("SELECT value, info_json FROM probes WHERE name=:name AND host=:host AND threads=:threads "
                        "AND dtype=:dtype AND torch=:torch AND (disturbed IS NULL OR disturbed='') AND created>:since "
                        "ORDER BY created DESC LIMIT 1", {"name": name, "host": host, "threads": threads,
                                                          "dtype": dtype, "torch": torch,
                                                          "since": time.time() - max_age_s})
        if df.empty:
            return None
        return {**json.loads(df.iloc[0]["info_json"] or "{}"), "flops": float(df.iloc[0]["value"])}
