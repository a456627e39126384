"""Shared test settings: one persistent compile cache for the whole suite, a fresh store per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Compile caches (Inductor, XLA) are shared across tests and across runs: cold compiles are slow here.
os.environ.setdefault("TCBENCH_HOME", str(ROOT / ".tcbench-test-home"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# The suite's comparisons fork every round from one launcher per environment (TCBENCH_LAUNCHER=shared): a launcher of
# its own per round, the default, costs a comparison here ~10 s of imports, minutes over the suite. The default is
# tested in tests/runner/test_launcher.py (and every test that deletes the variable).
os.environ.setdefault("TCBENCH_LAUNCHER", "shared")


def pytest_sessionstart(session: pytest.Session) -> None:
    """The suite's own process is a caller that never compiled: its first backward runs here, before any test
    compiles in it. With torch 2.14 (not 2.9) a first backward after a torch.compile, GPU or not, starts autograd's
    device threads, and retune workers forked from this process after that are refused
    (``tcbench.tuning.lr.workers.check_fork``, tested on its own in a fresh process): a unit test's compile would
    otherwise decide the forked-worker tests after it."""
    import torch

    x = torch.zeros(1, requires_grad=True)
    (x * 2).sum().backward()


@pytest.fixture(autouse=True, scope="session")
def _session_store(tmp_path_factory: pytest.TempPathFactory):
    """Every test session writes to its own SQLite store, never the user's."""
    if not os.environ.get("TCBENCH_KEEP_DB"):
        os.environ["TCBENCH_DB"] = str(tmp_path_factory.mktemp("store") / "tcbench.db")
    from tcbench import Store

    Store()   # made, as a user's is once anything ran: reading a store that was never made is an error
    yield


@pytest.fixture
def store(tmp_path: Path):
    """A store of the test's own."""
    from tcbench import Store

    return Store(tmp_path / "t.db")


@pytest.fixture(scope="session")
def pg_url():
    """``postgresql://postgres@127.0.0.1:PORT/tcbench`` of a server this session starts and stops (tests/pgserver.py);
    skips where PostgreSQL's binaries are missing."""
    from pgserver import missing, server

    why = missing()
    if why:
        pytest.skip(why)
    yield from server()


@pytest.fixture
def no_process(monkeypatch):
    """Fail the test if a job process (or the peak-FLOPs probe before it) would start: for bad inputs, which must be
    refused before either."""
    from tcbench.runner import process as _runner

    def started(*args, **kwargs):
        raise AssertionError("a process was started for a bad input")
    monkeypatch.setattr(_runner.subprocess, "Popen", started)
    monkeypatch.setattr(_runner, "_probe", started)


# make test's integration leg runs on two pytest-xdist workers with `--dist loadfile`: a file's tests stay together on
# one worker (they share module fixtures, and some read what the test before them left in the shared compile cache),
# except the files named here, whose tests are independent of each other and each minutes long (a notebook each):
# those spread over the workers one by one. Work is handed out in collection order (xdist's own order, by number of
# tests, put the single tests last, and a notebook last is a worker alone for minutes at the end).
SPREAD = ("tests/test_notebooks.py",)


def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return nodeid if nodeid.split("::")[0] in SPREAD else super()._split_scope(nodeid)

    config.option.loadscopereorder = False
    return Scheduling(config, log)
