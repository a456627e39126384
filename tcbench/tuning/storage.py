"""Where a retune study lives: URL checks, masked display, and the heartbeat that retries a dead worker's trial.

An Optuna RDB storage opened here records a heartbeat for the running trial every
``HEARTBEAT_INTERVAL_S`` seconds (a thread of the process running the study). A RUNNING trial whose
last heartbeat is older than ``GRACE_PERIOD_S`` belongs to a process that is gone (killed, lost its
machine): the next process to start a trial on the study marks it FAIL and enqueues it again with the
same learning rate and rule (``RetryHeartbeatStaleTrialCallback``, at most ``MAX_RETRY`` times). A
RUNNING trial with a fresh heartbeat belongs to a live process and is left alone. A RUNNING trial that
never had a heartbeat (an older tcbench, or ``study.ask()`` outside ``optimize``) is treated the same
way once it started more than the grace period ago.

A URL is checked before anything starts — known dialect, its driver importable, for SQLite a writable
file in an existing folder, then the database opened — and a URL that cannot be used is a :class:`SpecError`
naming ``storage``. Opening is tried again with backoff while the database's error is a passing one (its server
unreachable or busy, a lock, two sessions creating Optuna's tables at once: on PostgreSQL an advisory lock
serialises that creation), and a server still unreachable after ``TRIES`` tries is a ``StoreUnreachable``, not
"not allowed". The URL is only ever shown with its password (and ``password=``-like query values) masked.
"""

from __future__ import annotations

import copy
import os
import time
import warnings
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlparse

from tcbench.core.errors import first_line
from tcbench.core.spec import SpecError
from tcbench.store.base import StoreUnreachable, _sqlstate, transient
from tcbench.store.postgres import advisory_lock, advisory_unlock, driver_url, mask

HEARTBEAT_INTERVAL_S = 10   # a live study process writes its running trial's heartbeat this often
GRACE_PERIOD_S = 60         # six missed heartbeats: the trial's process is taken to be gone
MAX_RETRY = 3               # a trial whose process dies again and again is retried at most this often
BEAT_ATTR = "tcbench:heartbeat"   # system attr: this trial ran with a heartbeat (Optuna can judge it)
ALLOWED = ("None (in memory), 'store' (tcbench's own SQLite file), or a database URL whose driver is installed "
           "and that opens for writing, e.g. 'sqlite:///tune.db'")
_TIMEOUT_DRIVERS = ("psycopg", "psycopg2", "mysqldb", "pymysql")   # they take connect_timeout (seconds)
_PORTS = {"postgresql": 5432, "mysql": 3306}   # the servers' default ports, for the error naming host and port

def _refuse(shown: str, why: str) -> SpecError:
    return SpecError("storage", shown, ALLOWED, f"storage={shown!r} is not allowed: {why}; allowed: {ALLOWED}")


def _sqlite_path(url: Any) -> Path | None:
    """The file an SQLite URL names (None for in-memory)."""
    db = url.database or ""
    if str(url.query.get("uri", "")).lower() in ("true", "1"):
        if "mode=memory" in db or url.query.get("mode") == "memory":
            return None
        db = urlparse(db).path if db.startswith("file:") else db
    return None if db in ("", ":memory:") else Path(db)


def _check_sqlite(url: Any, shown: str) -> None:
    path = _sqlite_path(url)
    if path is None:
        raise _refuse(shown, "an in-memory SQLite database cannot be resumed nor shared with the heartbeat "
                             "thread (use storage=None for a study kept in memory)")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise _refuse(shown, f"the folder {str(folder)!r} does not exist")
    if path.is_dir():
        raise _refuse(shown, f"{str(path)!r} is a folder, not a database file")
    if path.exists() and not os.access(path, os.R_OK | os.W_OK):
        raise _refuse(shown, f"the file {str(path)!r} cannot be written")
    if not os.access(folder, os.W_OK | os.X_OK):   # SQLite writes its journal beside the file
        raise _refuse(shown, f"the folder {str(folder)!r} cannot be written")


OPTUNA_LOCK = 0x7463_6F70_7475   # session advisory lock key around Optuna's schema creation ("tcoptu")
TRIES = 5                        # opening a storage: a transient database error is tried again this often
BACKOFF_S = 0.25                 # first wait between tries, doubled each time (0.25 + 0.5 + 1 + 2 = 3.75 s)


@contextmanager
def _schema_lock(url: Any, kwargs: dict) -> Iterator[None]:
    """On PostgreSQL, one process at a time creates or upgrades Optuna's tables: two sessions creating them at once
    collide in the catalog (``pg_type_typname_nsp_index``). A session-level advisory lock on a connection of its
    own (released when it closes, also if the process dies); elsewhere nothing."""
    if url.get_backend_name() != "postgresql":
        yield
        return
    import sqlalchemy as sa
    from sqlalchemy.pool import NullPool

    engine = sa.create_engine(url, poolclass=NullPool, **kwargs)
    try:
        with engine.connect() as con:
            advisory_lock(con, OPTUNA_LOCK)
            try:
                yield
            finally:
                advisory_unlock(con, OPTUNA_LOCK)
    finally:
        engine.dispose()


def _no_answer(exc: BaseException) -> bool:
    """The connection failed before a server answered (refused, timed out, unknown host): no SQLSTATE came back.
    Retrying hides that for half a minute; a server's own passing state (too many connections, starting up) has one."""
    import sqlalchemy.exc

    return (isinstance(exc, (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError, OSError))
            and _sqlstate(exc) is None)


def _retryable(exc: BaseException) -> bool:
    """A database error worth another try when opening a storage: the server's state now (``store.base.transient``)
    or the catalog's unique violation of two sessions creating the same tables (where no lock serialises them)."""
    import sqlalchemy.exc

    return transient(exc) or isinstance(exc, sqlalchemy.exc.IntegrityError)


def check_study_name(name: Any) -> None:
    """A study's name: None (named from the settings) or a non-empty text; anything else is a SpecError before a store
    or a study is opened."""
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise SpecError("study_name", name, "None (named from the settings) or a non-empty name",
                        f"study_name={name!r} is not allowed; allowed: None (named from the settings) or a non-empty "
                        "name")


def open_storage(storage: Any, store_url: str) -> tuple[Any, str | None]:
    """(the Optuna storage, or None for in memory; how to show it, password masked). Raises SpecError.

    ``storage="store"``: tcbench's own database, ``store_url`` (``Store.url()``: its SQLite file, or its
    PostgreSQL database, where Optuna's tables sit beside tcbench's)."""
    import optuna

    if storage is None:
        return None, None
    if not isinstance(storage, str):
        if isinstance(storage, optuna.storages.BaseStorage):
            return storage, type(storage).__name__
        raise _refuse(type(storage).__name__, "it is neither a URL nor an optuna storage")
    text, url, shown = _checked_url(store_url if storage == "store" else storage)
    return _open_rdb(text, url, shown), shown


def _checked_url(text: str) -> tuple[str, Any, str]:
    """(the URL to open, that URL parsed, how to show it): a URL that is not one, names a database kind whose driver
    is not installed or an SQLite file that cannot be written is refused before the database is tried."""
    import sqlalchemy.exc
    from sqlalchemy.engine import make_url

    shown = mask(text)
    try:
        url = make_url(text)
    except (sqlalchemy.exc.ArgumentError, ValueError):
        raise _refuse(shown, "it is not a database URL (dialect://user:password@host/database)") from None
    shown = mask(text, url.password if isinstance(url.password, str) else None)
    if url.get_backend_name() == "postgresql":   # postgres:// read as postgresql://; psycopg2 when only it is installed
        text = driver_url(text)
        url = make_url(text)
    try:
        url.get_dialect().import_dbapi()
    except sqlalchemy.exc.NoSuchModuleError:
        raise _refuse(shown, f"SQLAlchemy knows no database kind {url.drivername!r}") from None
    except ImportError as exc:
        raise _refuse(shown, f"the Python module {exc.name or str(exc)!r} that SQLAlchemy's {url.drivername!r} "
                             "dialect needs is not installed") from None
    if url.get_backend_name() == "sqlite":
        _check_sqlite(url, shown)
    return text, url, shown


def _open_rdb(text: str, url: Any, shown: str) -> Any:
    """Optuna's RDB storage with heartbeats, opened again with backoff while the database's error is a passing one."""
    import optuna
    import sqlalchemy.exc

    kwargs = {}
    if url.get_backend_name() == "sqlite":
        kwargs = {"connect_args": {"timeout": 60}}       # wait for another process's write, don't fail
    elif url.get_driver_name() in _TIMEOUT_DRIVERS:
        kwargs = {"connect_args": {"connect_timeout": 20}}   # an unreachable server is an error, not a hang
    backend_name = url.get_backend_name()
    where = ("" if backend_name == "sqlite"
             else f" at {url.host or 'localhost'}:{url.port or _PORTS.get(backend_name, '?')}")
    t0 = time.monotonic()
    for attempt in range(1, TRIES + 1):
        try:
            with _schema_lock(url, kwargs), warnings.catch_warnings():
                # heartbeat_interval and the retry callback are "experimental"
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                backend = optuna.storages.RDBStorage(
                    text, engine_kwargs=kwargs, heartbeat_interval=HEARTBEAT_INTERVAL_S, grace_period=GRACE_PERIOD_S,
                    heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(
                        max_retry=MAX_RETRY))
            break
        except (sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError, RuntimeError,
                OSError) as exc:
            cause = mask(first_line(getattr(exc, "orig", None) or exc), url.password)
            if not _retryable(exc):   # the database answered, and not with a passing state: it cannot be used
                raise _refuse(shown, f"the database{where} cannot be opened ({cause})") from None
            if _no_answer(exc):   # no server there (or not yet): said at once, not after silent retries
                raise StoreUnreachable(f"storage={shown!r}: the database{where} does not answer ({cause}); is its "
                                       "server running, and is the URL right?") from None
            if attempt == TRIES:
                hint = ("" if isinstance(exc, sqlalchemy.exc.IntegrityError)   # a catalog race, not the server
                        else "; is its server running, and is the URL right?")
                raise StoreUnreachable(
                    f"storage={shown!r}: the database{where} could not be opened after {TRIES} tries over "
                    f"{time.monotonic() - t0:.0f} s ({cause}){hint}") from None
            time.sleep(BACKOFF_S * 2 ** (attempt - 1))
    return backend


def heartbeat_on(storage: Any) -> bool:
    """Does this storage record heartbeats (so RUNNING trials of dead processes can be told apart)?"""
    return storage is not None and bool(getattr(storage, "heartbeat_interval", None)) and hasattr(
        storage, "get_heartbeat_stale_trial_callback")


def grace_s(storage: Any) -> float:
    return float(storage.grace_period or 2 * storage.heartbeat_interval)


def fail_stale(study: Any, storage: Any) -> None:
    """Fail (and enqueue again) the RUNNING trials whose process is gone; leave live ones alone."""
    import optuna
    from optuna.trial import TrialState

    if not heartbeat_on(storage):
        return   # in memory (no other process), or a storage that cannot tell a live trial from a dead one
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)
        now = datetime.now()
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if t.system_attrs.get(BEAT_ATTR) or t.datetime_start is None:
                continue   # Optuna's heartbeat judges it
            if (now - t.datetime_start).total_seconds() <= grace_s(storage):
                continue
            try:
                tid = storage.get_trial_id_from_study_id_trial_number(
                    storage.get_study_id_from_name(study.study_name), t.number)
                storage.set_trial_user_attr(tid, "reason", "left RUNNING without a heartbeat by a process "
                                            "that is gone (an older tcbench, or ask() outside optimize)")
                if storage.set_trial_state_values(tid, TrialState.FAIL):
                    retry = storage.get_heartbeat_stale_trial_callback()
                    if retry is not None:   # the retry copies user attrs: not this trial's reason
                        dead = copy.deepcopy(storage.get_trial(tid))
                        dead.user_attrs.pop("reason", None)
                        retry(study, dead)
            except optuna.exceptions.UpdateFinishedTrialError:
                pass   # its process finished it, or another process failed it first


def lost_reasons(trials: list) -> dict[int, str]:
    """Why each FAIL trial without a status or reason has no result: its process died; and its retry, if any."""
    from optuna.trial import TrialState

    retried_as = {t.system_attrs["retry_history"][-1]: t.number for t in trials if t.system_attrs.get("retry_history")}
    return {t.number: "its process stopped before the trial ended (no heartbeat within the grace period); "
                      + (f"retried as trial {retried_as[t.number]}" if t.number in retried_as else "not retried")
            for t in trials if t.state == TrialState.FAIL and not t.user_attrs.get("status")
            and not t.user_attrs.get("reason")}
