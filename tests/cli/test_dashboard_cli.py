"""``tcbench dashboard`` (issue 25, part 3): each storage it cannot show, a port it cannot take and a missing
optuna-dashboard is one line on stderr and exit 2, with nothing created and no password shown; a study it can show
is served on 127.0.0.1 behind one printed line until Ctrl-C, which exits 0."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tcbench.cli.app import main

from tcbench.tuning.dashboard import INSTALL as PIP   # the pip command of the dashboard extra


def _one_line(capsys) -> str:
    cap = capsys.readouterr()
    assert cap.err.startswith("tcbench: ") and cap.err.count("\n") == 1, cap.err
    assert cap.out == "" and "Traceback" not in cap.err
    return cap.err


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture
def study(tmp_path) -> str:
    """An SQLite study 'shared' with three finished trials."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    optuna.create_study(storage=url, study_name="shared").optimize(
        lambda t: t.suggest_float("lr", 1e-4, 1e-1, log=True), n_trials=3)
    return url


@pytest.mark.parametrize("storage, needle", [
    ("sqlite:///{tmp}/typo.db", "typo.db' does not exist"),
    ("not a url", "it is not a database URL"),
    ("mysql://team:s3cret@db.example/tune", "'MySQLdb'"),
], ids=["missing-file", "not-a-url", "no-driver"])
def test_a_storage_it_cannot_show_is_one_line_and_creates_nothing(storage, needle, tmp_path, capsys):
    assert main(["dashboard", "--storage", storage.replace("{tmp}", str(tmp_path))]) == 2
    err = _one_line(capsys)
    assert needle in err and "s3cret" not in err, err
    assert _files(tmp_path) == []


def test_a_store_that_was_never_made_is_named_not_created(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TCBENCH_DB", str(tmp_path / "nonexistent" / "x.db"))
    assert main(["dashboard"]) == 2
    assert "does not exist" in _one_line(capsys) and _files(tmp_path) == []


def test_without_optuna_dashboard_it_names_the_extra(study, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "optuna_dashboard", None)   # as if not installed: import raises ImportError
    assert main(["dashboard", "--storage", study]) == 2
    assert PIP in _one_line(capsys)


def test_a_port_in_use_is_one_line(study, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["dashboard", "--storage", study, "--port", str(port)]) == 2
    err = _one_line(capsys)
    assert f"127.0.0.1:{port}" in err and f"--port {port}" in err, err


def test_serves_the_study_on_loopback_until_ctrl_c(study, tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "tcbench.cli", "dashboard", "--storage", study],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"},
                            # a terminal's process has SIGINT at its default; a background CI job may have it ignored
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        line = proc.stdout.readline()   # printed once the port is bound
        m = re.search(r"open (http://127\.0\.0\.1:(\d+)/dashboard) \(Ctrl-C stops it\)", line)
        assert m and study in line, line + proc.stderr.read() if proc.poll() is not None else line
        with urllib.request.urlopen(f"http://127.0.0.1:{m.group(2)}/api/studies", timeout=30) as r:
            names = [s["study_name"] for s in json.loads(r.read())["study_summaries"]]
        assert names == ["shared"]
        with urllib.request.urlopen(m.group(1), timeout=30) as r:
            assert r.status == 200 and b"Optuna Dashboard" in r.read()
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and out == "" and err == "", (proc.returncode, out, err)
