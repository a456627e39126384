"""tcbench's store in one SQLite file (WAL): the default, ``$TCBENCH_HOME/tcbench.db`` or ``TCBENCH_DB=path`` /
``sqlite:///path``. One short connection per operation; a write is ``BEGIN IMMEDIATE`` (one writer at a time, the
others wait up to their timeout); a store the process may not write opens read-only (seeing other writers through
the WAL index, or as an immutable archive in a read-only folder)."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping
from urllib.parse import quote

import pandas as pd

from tcbench.host.paths import home, private_dir, writable
from tcbench.store.base import Database, StoreError, StoreMissing, transient


class _Tx:
    """A transaction on an SQLite connection (``BEGIN IMMEDIATE``: one writer at a time, others wait)."""

    def __init__(self, con: sqlite3.Connection) -> None:
        self.con = con

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        self.con.execute(sql, dict(params or {}))   # :name parameters, bound by sqlite3

    def executemany(self, sql: str, rows: list[Mapping[str, Any]]) -> None:
        self.con.executemany(sql, rows)

    def fetch(self, sql: str, params: Mapping[str, Any] | None = None) -> list[tuple]:
        return self.con.execute(sql, dict(params or {})).fetchall()

    def insert(self, table: str, values: dict[str, Any], key: str) -> int:
        cols = list(values)
        cur = self.con.execute(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join(':' + c for c in cols)})",
                               values)
        return int(cur.lastrowid or 0)


def _under_home(path: Path) -> bool:
    return home() == path.parent or home() in path.parents


class SQLite(Database):
    """One SQLite file (WAL); one short connection per operation. ``create``: False refuses a missing file
    (``StoreMissing``) before any file or folder is made: only writing creates a store."""

    operational = (sqlite3.OperationalError,)

    def __init__(self, path: str | os.PathLike, create: bool = True) -> None:
        self.path = Path(path).expanduser().resolve()
        self.create = create

    def open(self, readonly: bool | None) -> bool:
        if self.path.is_dir():
            raise StoreError(f"the store {self.path} is a folder; TCBENCH_DB must name a file")
        for parent in self.path.parents:
            if parent.exists() and not parent.is_dir():
                raise StoreError(f"cannot use the store {self.path}: {parent} is a file, not a folder "
                                 "(check TCBENCH_HOME / TCBENCH_DB)")
        if (readonly or not self.create) and not self.path.is_file():
            raise StoreMissing(f"the store {self.path} does not exist (check TCBENCH_DB / TCBENCH_HOME); a command "
                               "that writes creates it: tcbench run or tcbench compare, tc.run() or tc.compare()")
        if self.path.is_file():
            self._check_ours()
        if readonly is None:
            if not self.path.parent.exists():
                if not _under_home(self.path):   # a typo in TCBENCH_DB must not split a user's history in two
                    raise StoreError(f"cannot create the store {self.path}: its folder {self.path.parent} does not "
                                     "exist (create it, or check TCBENCH_DB for a typo); tcbench creates folders "
                                     "only under TCBENCH_HOME")
                private_dir(self.path.parent)
            readonly = self.path.exists() and not writable(self.path)
            if not readonly and not writable(self.path):
                raise StoreError(f"cannot create the store {self.path}: its folder is not writable")
        return bool(readonly)

    def _check_ours(self) -> None:
        """Refuse, before anything is written, a file that is not a tcbench store: another program's SQLite database
        (tables, none of them tcbench's ``runs``) or a file that is no SQLite database at all."""
        try:
            con = self._connect_readonly()
            try:
                tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
            finally:
                con.close()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path} is not a tcbench store (it is not an SQLite database: {exc}); point "
                             "TCBENCH_DB at a tcbench store or at a new file") from exc
        if not tables and not self.create:   # an empty file (or database) it was only given to read: left empty
            raise StoreMissing(f"the store {self.path} holds nothing yet (an empty file); a command that writes "
                               "creates the store in it: tcbench run or tcbench compare, tc.run() or tc.compare()")
        if tables and "runs" not in tables:
            shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
            raise StoreError(f"{self.path} is not a tcbench store (it holds other tables: {shown}); tcbench leaves it "
                             "as it is: point TCBENCH_DB at a tcbench store or at a new file")

    def version(self, readonly: bool) -> int:
        con = self._connect(readonly=readonly)
        try:
            return con.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"the store {self.path} cannot be read: {exc}") from exc
        finally:
            con.close()

    def migrate(self, tables: dict, keys: dict, version: int, upgrade: Any = None) -> None:
        con = self._connect()
        try:
            con.execute("BEGIN IMMEDIATE")
            found = con.execute("PRAGMA user_version").fetchone()[0]
            for table, cols in tables.items():
                con.execute(f"CREATE TABLE IF NOT EXISTS {table} ("
                            + ", ".join(f"{n} {t}" for n, t in cols) + keys.get(table, "") + ")")
                have = {row[1] for row in con.execute(f"PRAGMA table_info({table})")}
                for name, typ in cols:   # an older store: add the columns it lacks (old rows read as NULL)
                    if name not in have:
                        con.execute(f"ALTER TABLE {table} ADD COLUMN {name} "
                                    f"{typ.replace(' PRIMARY KEY AUTOINCREMENT', '')}")
            if upgrade is not None:
                upgrade(_Tx(con), found)
            con.execute(f"PRAGMA user_version={version}")
            con.execute("COMMIT")
        finally:
            con.close()

    def _connect(self, timeout: float = 60.0, readonly: bool = False) -> sqlite3.Connection:
        try:
            if readonly:
                return self._connect_readonly()
            con = sqlite3.connect(self.path, timeout=timeout, isolation_level=None)
            con.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("PRAGMA synchronous=NORMAL")
            return con
        except sqlite3.DatabaseError as exc:
            if transient(exc):
                raise
            raise StoreError(f"the store {self.path} cannot be opened: {exc} (is it a tcbench store?)") from exc

    def _connect_readonly(self) -> sqlite3.Connection:
        uri = f"file:{quote(str(self.path))}"
        try:   # read-only, seeing other writers (needs the WAL index beside it) ...
            con = sqlite3.connect(f"{uri}?mode=ro", uri=True, isolation_level=None)
            con.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
            return con
        except sqlite3.OperationalError:   # ... or an archive nobody writes (a read-only folder)
            return sqlite3.connect(f"{uri}?immutable=1", uri=True, isolation_level=None)

    @contextmanager
    def transaction(self, timeout: float, readonly: bool = False) -> Iterator[_Tx]:
        con = self._connect(timeout, readonly)
        try:
            con.execute("BEGIN IMMEDIATE")
            yield _Tx(con)
            con.execute("COMMIT")
        finally:
            con.close()

    def query(self, sql: str, params: Mapping[str, Any], readonly: bool) -> pd.DataFrame:
        con = self._connect(readonly=readonly)
        try:
            return pd.read_sql_query(sql, con, params=params)
        finally:
            con.close()

    def url(self) -> str:
        return f"sqlite:///{self.path}"

    def spool_dirs(self) -> list[Path]:
        key = hashlib.sha1(str(self.path).encode()).hexdigest()[:12]
        return [self.path.parent / f"{self.path.name}.spool",
                Path(tempfile.gettempdir()) / f"tcbench-spool-{os.getuid()}" / key]
