"""A PostgreSQL server of the test session's own: Debian's binaries run as the ``postgres`` user (initdb and
postgres refuse root), a data folder in a temp folder it owns, trust auth on 127.0.0.1 and a free port, no fsync.
Started once per session (under a second), stopped by its pid at the end. ``make test`` installs the
``postgresql`` package where it is missing; without its binaries the tests that need the server skip."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator

USER = "postgres"


def binaries() -> Path | None:
    """The newest /usr/lib/postgresql/*/bin holding initdb and postgres, or None."""
    found = [Path(d) for d in glob.glob("/usr/lib/postgresql/*/bin")
             if os.access(Path(d) / "initdb", os.X_OK) and os.access(Path(d) / "postgres", os.X_OK)]
    return max(found, key=lambda d: int(d.parent.name) if d.parent.name.isdigit() else 0) if found else None


def missing() -> str | None:
    """Why no server can be started here (None: it can)."""
    if binaries() is None:
        return "PostgreSQL's initdb/postgres are not in /usr/lib/postgresql/*/bin (make test installs postgresql)"
    try:
        pwd.getpwnam(USER)
    except KeyError:
        return f"there is no {USER!r} user to run PostgreSQL as (Debian's postgresql package creates it)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_postgres(args: list, **kw) -> subprocess.Popen:
    user = None if os.getuid() == pwd.getpwnam(USER).pw_uid else USER   # root (or anyone) runs it as postgres
    return subprocess.Popen(args, user=user, stdin=subprocess.DEVNULL, **kw)


def _ready(port: int, proc: subprocess.Popen, log: Path, deadline: float) -> None:
    import psycopg

    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"postgres exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            psycopg.connect(host="127.0.0.1", port=port, user=USER, dbname="postgres", connect_timeout=2).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"postgres did not accept connections in time: {log.read_text()[-2000:]}")
            time.sleep(0.1)


def server(db: str = "tcbench") -> Iterator[str]:
    """Start a server, create database ``db``, yield ``postgresql://postgres@127.0.0.1:PORT/db``, stop it."""

    bin_dir, pw = binaries(), pwd.getpwnam(USER)
    tmp = Path(tempfile.mkdtemp(prefix="tcbench-pg-"))
    os.chown(tmp, pw.pw_uid, pw.pw_gid)
    data, log = tmp / "data", tmp / "server.log"
    init = _as_postgres([str(bin_dir / "initdb"), "-D", str(data), "--auth=trust", "--no-sync", "-U", USER],
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=tmp)
    out = init.communicate(timeout=120)[0]
    if init.returncode:
        shutil.rmtree(tmp, ignore_errors=True)
        raise RuntimeError(f"initdb failed ({init.returncode}): {out.decode(errors='replace')[-2000:]}")
    port = _free_port()
    with open(log, "wb") as f:
        proc = _as_postgres([str(bin_dir / "postgres"), "-D", str(data), "-c", "listen_addresses=127.0.0.1",
                             "-c", f"unix_socket_directories={tmp}", "-c", "fsync=off", "-p", str(port)],
                            stdout=f, stderr=subprocess.STDOUT, cwd=tmp)
    try:
        _ready(port, proc, log, time.monotonic() + 60)
        yield fresh_database(f"postgresql://{USER}@127.0.0.1:{port}/postgres", db)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)   # "fast" shutdown: ends the sessions, no checkpoint wait
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def fresh_database(pg_url: str, name: str | None = None, password: str = "") -> str:
    """Create database ``name`` (default: a new unique name) on ``pg_url``'s server; its URL (with ``password``
    in it when given: the test server trusts 127.0.0.1 and ignores it)."""
    import uuid

    import psycopg

    name = name or f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_url, autocommit=True) as con:
        con.execute(f'CREATE DATABASE "{name}"')
    url = pg_url.rsplit("/", 1)[0] + "/" + name
    return url.replace(f"{USER}@", f"{USER}:{password}@") if password else url
