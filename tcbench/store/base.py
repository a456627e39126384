"""The store's plug point: ``Database``, what each kind of database (``sqlite.SQLite``, ``postgres.Postgres``)
provides, and the errors the store raises; which write failures are worth keeping and retrying (``transient``)."""

from __future__ import annotations

import errno
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from tcbench.core.errors import StoreError

__all__ = ["Database", "StoreError", "StoreMissing", "StoreUnreachable", "transient"]


class StoreMissing(StoreError):
    """A store opened for reading (``Store(create=False)``, ``readonly=True``) does not exist: nothing was created."""


class StoreUnreachable(StoreError):
    """The store's server cannot be reached now (names host, port and why): a write is kept and spooled."""


# SQLite's primary result codes for a write that cannot happen right now: busy, locked, read-only, I/O error, disk
# full, cannot open (https://www.sqlite.org/rescode.html); kept by the caller and written (or spooled) later
_SQLITE_TRANSIENT = {5, 6, 8, 10, 13, 14}
_OS_TRANSIENT = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO, errno.EAGAIN}
# PostgreSQL SQLSTATE classes and codes of a database that cannot take the write now (the connection, resources,
# an operator's intervention, a lock or serialisation conflict), not a bug in the statement
_PG_TRANSIENT_CLASSES = ("08", "53", "57", "58")
_PG_TRANSIENT_CODES = {"40001", "40P01", "55P03", "55006"}


def _sqlstate(exc: BaseException) -> str | None:
    orig = getattr(exc, "orig", exc)   # SQLAlchemy wraps the driver's error
    return getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)   # psycopg (3), psycopg2


def transient(exc: BaseException) -> bool:
    """True for a write that failed because of the store's state now (locked, disk full, its server
    unreachable), not a bug: judged by the error's class and code, never its wording."""
    if isinstance(exc, StoreUnreachable):
        return True
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        return code is not None and code & 0xFF in _SQLITE_TRANSIENT
    if isinstance(exc, OSError):
        return exc.errno in _OS_TRANSIENT
    state = _sqlstate(exc)
    if state:
        return state[:2] in _PG_TRANSIENT_CLASSES or state in _PG_TRANSIENT_CODES
    sa = sys.modules.get("sqlalchemy.exc")
    # no SQLSTATE: the connection failed or was lost before the server answered (a bug raises ProgrammingError & co)
    return sa is not None and isinstance(exc, (sa.OperationalError, sa.InterfaceError, sa.DisconnectionError))


class Database:
    """Where the store's rows live: one per kind of database (``sqlite.SQLite``, ``postgres.Postgres``).

    SQL is written with ``:name`` parameters and a dict of values (SQLite takes them as they are; PostgreSQL's
    SQLAlchemy binds them); ``transaction`` yields an object with ``execute``, ``executemany`` (a list of dicts),
    ``fetch`` (the rows as tuples) and ``insert`` (the new row's key), committed when the block ends. ``migrate``
    creates the tables and columns a store lacks, then calls ``upgrade(tx, found)`` in the same transaction
    (``found``: the version the store had) to rewrite data an older schema kept otherwise.
    """

    path: Path | str        # how messages name the store (a URL with its password masked)
    operational: tuple      # what a write raises when the database cannot take it now (kept, spooled)

    def open(self, readonly: bool | None) -> bool: ...      # check the location; whether to open read-only
    def version(self, readonly: bool) -> int: ...
    def migrate(self, tables: dict, keys: dict, version: int, upgrade: Any = None) -> None: ...
    def transaction(self, timeout: float, readonly: bool = False) -> Any: ...
    def query(self, sql: str, params: dict, readonly: bool) -> pd.DataFrame: ...
    def spool_dirs(self) -> list[Path]: ...
    def url(self) -> str: ...   # as SQLAlchemy (Optuna) opens it, password included: never show it
