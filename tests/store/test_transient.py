"""Which store errors are passing (kept, retried, spooled) and which are bugs: by class and code, never wording."""

from __future__ import annotations

import errno
import sqlite3

import pytest

from tcbench.store.base import StoreUnreachable, transient


def test_a_locked_sqlite_store_is_transient_a_syntax_error_is_not(tmp_path):
    path = tmp_path / "x.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (a)")
    holder.execute("BEGIN IMMEDIATE")
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    with pytest.raises(sqlite3.OperationalError) as locked:
        other.execute("INSERT INTO t VALUES (1)")
    with pytest.raises(sqlite3.OperationalError) as syntax:
        other.execute("INSER INTO t VALUES (1)")
    holder.execute("ROLLBACK")
    assert transient(locked.value) and not transient(syntax.value)
    # the same words in a message do not make an error passing: only its code does
    assert not transient(sqlite3.OperationalError("database is locked"))


def test_os_errors_by_errno_and_an_unreachable_server():
    assert transient(OSError(errno.ENOSPC, "No space left on device"))
    assert not transient(OSError(errno.ENOENT, "disk full, they said"))
    assert transient(StoreUnreachable("the store cannot be reached"))


def test_postgresql_errors_by_sqlstate_through_sqlalchemy():
    psycopg = pytest.importorskip("psycopg")
    import sqlalchemy.exc as sa

    lost = sa.OperationalError("SELECT 1", {}, psycopg.OperationalError("server closed the connection"))
    assert transient(lost)   # no SQLSTATE: the connection failed before the server answered
    assert transient(sa.OperationalError("SELECT 1", {}, psycopg.errors.AdminShutdown()))   # 57P01
    assert transient(sa.OperationalError("SELECT 1", {}, psycopg.errors.LockNotAvailable()))   # 55P03
    assert transient(sa.DBAPIError("SELECT 1", {}, psycopg.errors.SerializationFailure()))   # 40001
    assert not transient(sa.ProgrammingError("SELEC 1", {}, psycopg.errors.SyntaxError()))   # 42601
    assert not transient(sa.IntegrityError("INSERT", {}, psycopg.errors.UniqueViolation()))   # 23505
