"""tcbench's folders on this machine: ``$TCBENCH_HOME`` (the store, compile caches, run folders), created
readable by this user only, and whether a file may be written where it is."""

from __future__ import annotations

import os
from pathlib import Path

from tcbench.core.errors import StoreError


def home() -> Path:
    """tcbench's folder for the store, compile caches and run artifacts ($TCBENCH_HOME), always absolute."""
    return Path(os.environ.get("TCBENCH_HOME") or Path.home() / ".cache" / "tcbench").expanduser().resolve()


def private_dir(path: Path, tighten: bool = False) -> Path:
    """``path`` created (with its parents) readable by this user only (0700): compile caches hold code.

    ``tighten``: an existing folder of tcbench's own (its cache, its run folders) owned by this user is
    made 0700 too (an older tcbench created them 0755).
    """
    path = Path(path)
    if path.is_dir() and tighten:
        st = path.stat()
        if st.st_uid == os.getuid() and st.st_mode & 0o077:
            path.chmod(0o700)
    if not path.is_dir():
        try:
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
            path.chmod(0o700)
        except FileExistsError as exc:
            raise StoreError(f"cannot use {path} as a folder: a file of that name exists") from exc
        except NotADirectoryError as exc:
            raise StoreError(f"cannot create the folder {path}: a part of its path is a file") from exc
        except OSError as exc:
            raise StoreError(f"cannot create the folder {path}: {exc.strerror or exc}") from exc
    return path


def writable(path: Path) -> bool:
    """Whether this process may write the file ``path`` and its folder (SQLite's WAL needs files beside it)."""
    folder = path.parent
    return os.access(folder, os.W_OK | os.X_OK) and (not path.exists() or os.access(path, os.W_OK))


# -- the store's location, and the files a user names for output -------------------------------------------------
SQLITE_HEADER = b"SQLite format 3\x00"   # the first 16 bytes of every SQLite database file
# a file tcbench wrote carries this near its start (the HTML reports' <meta>, the JSON exports' first key): writing it
# again is a rerun, not an overwrite of a user's file
GENERATOR_META = '<meta name="generator" content="tcbench">'
_OWN_JSON_START = ('{"comparison_id"', '{\n "comparison_id"')


def is_url(text: str) -> bool:
    """Whether ``text`` is a database URL (``scheme://…``) rather than a path."""
    return "://" in text and text.split("://", 1)[0].replace("+", "").isalnum()


def store_location() -> Path | str:
    """``$TCBENCH_DB`` (a path, or a database URL as it is), else the file under ``home()``."""
    db = os.environ.get("TCBENCH_DB")
    if db and is_url(db):
        return db
    return Path(db or home() / "tcbench.db").expanduser().resolve()


def sqlite_file_text(url: str) -> str:
    """What follows the scheme of a ``sqlite://`` URL, with or without a driver (``sqlite+pysqlite://``), as
    SQLAlchemy reads it: ``sqlite:///rel.db`` a relative path, ``sqlite:////abs.db`` an absolute one."""
    rest = url.split("://", 1)[1]
    return rest[1:] if rest.startswith("/") else rest


def sqlite_path(location: str | os.PathLike) -> Path | None:
    """The file a store location names — a path or a ``sqlite://`` URL — resolved; None for a database server's URL
    (PostgreSQL), another scheme or an in-memory database."""
    text = str(location)
    if isinstance(location, str) and is_url(text):
        if text.split("://", 1)[0].split("+", 1)[0].lower() != "sqlite":
            return None
        text = sqlite_file_text(text)
    return Path(text).expanduser().resolve() if text and text != ":memory:" else None


def check_output(path: str | os.PathLike, field: str, force: bool = True) -> Path:
    """``path`` as a file a user asked tcbench to write (a report, an export), checked before anything is written:
    never the store however it is named (``$TCBENCH_DB`` as a path or a ``sqlite://`` URL, or the file under
    ``$TCBENCH_HOME``), its journal files, nor any SQLite database; with ``force=False`` also never an existing file
    that tcbench did not write (the CLI's ``--force`` allows that). A ValueError names ``field``, the path and why."""
    p = Path(path).expanduser()
    target = p.resolve()
    field = f"{field} {path}" if field.startswith("--") else f"{field}={str(path)!r}"   # a flag, or an argument
    store = sqlite_path(store_location())
    if store is not None and target in {store, *(Path(f"{store}{s}") for s in ("-wal", "-shm", "-journal"))}:
        raise ValueError(f"{field}: that is the store (TCBENCH_DB {store}); writing it would destroy "
                         "every stored run; allowed: any other file")
    if not target.parent.is_dir():
        raise ValueError(f"{field}: cannot write it (the folder {p.parent} does not exist)")
    if target.is_dir():
        raise ValueError(f"{field}: cannot write it (it is a folder)")
    head = _head(target)
    if head.startswith(SQLITE_HEADER):
        raise ValueError(f"{field}: that file is a SQLite database (a store?); writing it would destroy "
                         "it; allowed: any other file")
    if not force and head and not _written_by_tcbench(head):
        raise ValueError(f"{field}: the file exists and tcbench did not write it; give another path, "
                         "or --force to replace it")
    return p


def _head(path: Path, size: int = 2048) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(size)
    except OSError:   # missing, a folder, unreadable: nothing of the user's is there to lose by this check
        return b""


def _written_by_tcbench(head: bytes) -> bool:
    text = head.decode("utf-8", "replace")
    return GENERATOR_META in text or text.startswith(_OWN_JSON_START)
