"""The store's plug point: ``Database``, what each kind of database (``sqlite.SQLite``, ``postgres.Postgres``)
provides, and the errors the store raises; which write failures are worth keeping and retrying (``transient``)."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from tcbench.core.errors import StoreError

__all__ = ["Database", "StoreError", "StoreUnreachable", "transient"]


class StoreUnreachable(StoreError):
    """The store's server cannot be reached now (names host, port and why): a write is kept and spooled."""


# what SQLite says when a write cannot happen right now: kept by the caller and written (or spooled) later
_TRANSIENT = ("locked", "busy", "full", "disk i/o error", "readonly", "read-only", "unable to open")


def transient(exc: BaseException) -> bool:
    """True for a write that failed because of the store's state now (locked, disk full, its server
    unreachable), not a bug."""
    if isinstance(exc, StoreUnreachable):
        return True
    if "psycopg2" in sys.modules and isinstance(exc, (sys.modules["psycopg2"].OperationalError,
                                                      sys.modules["psycopg2"].InterfaceError)):
        return True   # PostgreSQL: the connection failed or was lost (a bug raises ProgrammingError & co)
    return isinstance(exc, (sqlite3.OperationalError, OSError, StoreError)) and any(
        word in str(exc).lower() for word in _TRANSIENT)


class Database:
    """Where the store's rows live: one per kind of database (``sqlite.SQLite``, ``postgres.Postgres``).

    SQL is written with ``?`` placeholders; ``transaction`` yields an object with ``execute``,
    ``executemany`` and ``insert`` (the new row's key), committed when the block ends.
    """

    path: Path | str        # how messages name the store (a URL with its password masked)
    operational: tuple      # what a write raises when the database cannot take it now (kept, spooled)

    def open(self, readonly: bool | None) -> bool: ...      # check the location; whether to open read-only
    def version(self, readonly: bool) -> int: ...
    def migrate(self, tables: dict, keys: dict, version: int) -> None: ...
    def transaction(self, timeout: float, readonly: bool = False) -> Any: ...
    def query(self, sql: str, params: tuple, readonly: bool) -> pd.DataFrame: ...
    def spool_dirs(self) -> list[Path]: ...
    def url(self) -> str: ...   # as SQLAlchemy (Optuna) opens it, password included: never show it
