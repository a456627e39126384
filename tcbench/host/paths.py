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
