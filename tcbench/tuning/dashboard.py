"""optuna-dashboard on a study's storage: tcbench's store, an SQLite file or a PostgreSQL database.

``dashboard`` serves until Ctrl-C (``tcbench dashboard``); ``start_dashboard`` serves from a daemon thread of this
process and returns a ``Dashboard`` (its ``url``, ``study_url(name)`` and ``stop()``), what the panel's tuning tab
links to. Both listen on 127.0.0.1 by default: optuna-dashboard asks for no password, and whoever reaches it may
rename or delete studies. The storage is checked as ``retune_lr`` checks it (``storage.open_storage``), except that
an SQLite file (or tcbench's store) that does not exist is refused, not created: the dashboard only shows studies.
optuna-dashboard is the extra ``tcbench-workbench[dashboard]``; it is imported only when a dashboard starts.
"""

from __future__ import annotations

import errno
import socketserver
import threading
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from tcbench.core.spec import SpecError
from tcbench.host.requirements import DASHBOARD, pip_install
from tcbench.store.api import Store
from tcbench.store.postgres import mask
from tcbench.tuning.storage import ALLOWED, _sqlite_path, open_storage

__all__ = ["Dashboard", "DashboardMissing", "INSTALL", "dashboard", "start_dashboard"]

INSTALL = pip_install(DASHBOARD)
LOOPBACK = ("127.0.0.1", "localhost")
SHOWN = ("'store' (tcbench's own), or the URL of a database that holds studies (sqlite:///path of an existing file, "
         "postgresql://user@host:port/database)")


class DashboardMissing(ImportError):
    """optuna-dashboard is not installed (or cannot be imported): the message names the pip command."""


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:   # noqa: A002 - wsgiref's signature
        pass   # one line per request would bury the URL line


class _Server(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True   # a browser's open request never holds the process at exit


class Dashboard:
    """A running optuna-dashboard: ``url`` (its page), ``storage`` (the URL shown, password masked)."""

    def __init__(self, server: WSGIServer, optuna_storage: Any, storage: str, host: str, owned: bool = True) -> None:
        self._server, self._storage, self.storage, self._owned = server, optuna_storage, storage, owned
        self.host, self.port = host, server.server_address[1]
        self.url = f"http://{host}:{self.port}/dashboard"
        self._thread: threading.Thread | None = None

    def study_url(self, study_name: str) -> str:
        """The page of one study (KeyError naming the study when the storage has none of that name)."""
        return f"{self.url}/studies/{self._storage.get_study_id_from_name(study_name)}"

    def line(self) -> str:
        """What to tell the user: where it serves which storage, and how to stop it."""
        warn = "" if self.host in LOOPBACK else "; no password: anyone who reaches it may change or delete studies"
        return f"optuna-dashboard on {self.storage}: open {self.url} (Ctrl-C stops it{warn})"

    def serve_forever(self) -> None:
        """Serve on this thread until Ctrl-C (which ends it quietly) or ``stop()`` from another thread."""
        try:
            self._server.serve_forever(poll_interval=0.2)
        except KeyboardInterrupt:
            pass
        finally:
            self._close()

    def start(self) -> "Dashboard":
        """Serve from a daemon thread of this process; returns self."""
        self._thread = threading.Thread(target=self.serve_forever, name="tcbench-dashboard", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving (a no-op when it has stopped) and close the storage's connections."""
        if self._thread is not None and self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(10)
        self._close()

    def _close(self) -> None:
        self._server.server_close()
        if self._owned:
            self._storage.engine.dispose()

    def __enter__(self) -> "Dashboard":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _wsgi() -> Any:
    try:
        from optuna_dashboard import wsgi
    except ImportError as exc:
        why = "is not installed" if exc.name == "optuna_dashboard" else f"cannot be imported ({exc})"
        raise DashboardMissing(f"optuna-dashboard {why}: {INSTALL}") from None
    return wsgi


def _refuse_missing(storage: Any) -> None:
    """Refuse an SQLite URL whose file does not exist: opening it would create an empty database to show."""
    if not isinstance(storage, str):
        return
    import sqlalchemy.exc
    from sqlalchemy.engine import make_url

    try:
        url = make_url(storage)
    except (sqlalchemy.exc.ArgumentError, ValueError):
        return   # open_storage says what is wrong with it
    path = _sqlite_path(url) if url.get_backend_name() == "sqlite" else None
    if path is not None and not path.exists():
        shown = mask(storage)
        raise SpecError("storage", shown, SHOWN, f"storage={shown!r} is not allowed: the file {str(path)!r} does not "
                                                 f"exist (a retune with this storage creates it); allowed: {SHOWN}")


def start_dashboard(storage: Any = "store", host: str = "127.0.0.1", port: int | None = None,
                    background: bool = True) -> Dashboard:
    """optuna-dashboard on ``storage`` ("store": tcbench's own, where ``retune_lr(storage="store")`` keeps its
    studies; an ``sqlite:///`` or ``postgresql://`` URL; an Optuna storage), listening on ``host``:``port`` (None:
    a free port). Serving from a daemon thread (``background``), else call ``serve_forever()``.

    Raises ``DashboardMissing`` without optuna-dashboard, ``SpecError`` for a storage, host or port that cannot be
    used, ``StoreError`` when tcbench's store does not exist or its server cannot be reached."""
    if port is not None and not (isinstance(port, int) and 0 <= port <= 65535):
        raise SpecError("port", port, "a whole number 0-65535 (0 or None: a free port)")
    if storage is None:
        raise SpecError("storage", None, SHOWN, f"storage=None is not allowed: a study kept in memory cannot be "
                                                f"shown by a server; allowed: {SHOWN}")
    app = _wsgi()
    store_url = Store(create=False).url() if storage == "store" else ""   # StoreMissing: it was never made
    _refuse_missing(storage)
    try:
        optuna_storage, shown = open_storage(storage, store_url)
    except SpecError as exc:   # in a dashboard's words: it shows stored studies, it never writes one
        if exc.field != "storage":
            raise
        raise SpecError("storage", exc.value, SHOWN, str(exc).replace(ALLOWED, SHOWN)) from None
    owned = isinstance(storage, str)   # an engine opened here, closed when it stops (a storage given is the caller's)
    try:
        server = make_server(host, port or 0, app(optuna_storage), server_class=_Server, handler_class=_Quiet)
    except OSError as exc:
        if owned:
            optuna_storage.engine.dispose()
        field, value = ("port", port) if exc.errno in (errno.EADDRINUSE, errno.EACCES) else ("host", host)
        raise SpecError(field, value, "a free port on an address of this machine (127.0.0.1 by default)",
                        f"cannot serve on {host}:{port or 0} ({exc.strerror or exc}); {field}={value!r} is not "
                        "allowed; allowed: a free port on an address of this machine") from None
    board = Dashboard(server, optuna_storage, shown, host, owned)
    return board.start() if background else board


def dashboard(storage: Any = "store", host: str = "127.0.0.1", port: int | None = None) -> None:
    """Serve optuna-dashboard on ``storage`` until Ctrl-C, after printing one line with the URL to open (see
    ``start_dashboard`` for the arguments and errors)."""
    board = start_dashboard(storage, host, port, background=False)
    print(board.line(), flush=True)
    board.serve_forever()
