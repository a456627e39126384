"""optuna-dashboard on a study two workers filled (issue 25, part 3), seen in Chromium.

Two worker processes (plain Optuna, as a teammate's script would be) fill one study at the same time, on an SQLite
file and on a fresh PostgreSQL database (its plain ``postgresql://`` URL, with a password the test server ignores);
``tcbench dashboard --storage URL --port P`` serves it; the page lists the study, its trial list says 6 trials, all
complete, and the API call the page makes for it returns the 6 trials of both workers. Ctrl-C stops the server (exit 0).
"""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid

import pytest

pytestmark = pytest.mark.browser

WORKER = """
import sys, optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)
url, name, worker = sys.argv[1], sys.argv[2], int(sys.argv[3])
study = optuna.create_study(storage=url, study_name=name, load_if_exists=True)
def objective(trial):
    trial.set_user_attr("worker", worker)
    return trial.suggest_float("lr", 1e-4, 1e-1, log=True)
study.optimize(objective, n_trials=3)
"""
PASSWORD = "s3cret"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def storage(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'team.db'}"
    from pgserver import fresh_database

    return fresh_database(request.getfixturevalue("pg_url"), password=PASSWORD)


def _fill(url: str, name: str) -> None:
    """Two workers on one study at once, 3 trials each. The study's tables are made first (the dashboard is under
    test here, not a simultaneous first start)."""
    import optuna

    optuna.create_study(storage=url, study_name=name)
    workers = [subprocess.Popen([sys.executable, "-c", WORKER, url, name, str(i)], stderr=subprocess.PIPE, text=True)
               for i in range(2)]
    for proc in workers:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err


def _wait(url: str, proc: subprocess.Popen, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        assert proc.poll() is None, proc.communicate()
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            assert time.monotonic() < deadline, f"{url} did not answer within {timeout_s:.0f} s"
            time.sleep(0.25)


@pytest.mark.timeout(180)
def test_dashboard_shows_the_trials_two_workers_wrote(page, storage, artifacts):
    name = f"shared-{uuid.uuid4().hex[:8]}"
    _fill(storage, name)
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tcbench.cli", "dashboard", "--storage", storage, "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            # a terminal's process has SIGINT at its default; a background CI job may have it ignored
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        base = f"http://127.0.0.1:{port}"
        _wait(f"{base}/api/studies", proc)
        page.goto(f"{base}/dashboard")
        page.get_by_text(name).first.wait_for(state="visible", timeout=30_000)   # the studies page lists it
        page.get_by_text(name).first.click()
        page.wait_for_url("**/dashboard/studies/*", timeout=30_000)
        study_id = int(re.search(r"/dashboard/studies/(\d+)", page.url).group(1))
        page.goto(f"{base}/dashboard/studies/{study_id}/trials")   # the trial list
        page.get_by_text("6 Trials").wait_for(state="visible", timeout=30_000)
        page.screenshot(path=str(artifacts / f"dashboard-{storage.split(':')[0]}.png"), full_page=True)
        for n in range(6):
            assert page.get_by_text(f"Trial {n}", exact=True).count() == 1, n
        # what the page itself asked for to draw that list, fetched again from the page
        trials = page.evaluate(f"fetch('/api/studies/{study_id}?after=0').then(r => r.json())")["trials"]
        assert sorted(t["number"] for t in trials) == list(range(6))
        assert {t["state"] for t in trials} == {"Complete"}
        assert sorted(int(a["value"]) for t in trials for a in t["user_attrs"] if a["key"] == "worker") == [0, 0, 0, 1, 1, 1]
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
    assert proc.returncode == 0 and err == "", (proc.returncode, err)
    assert out.count("\n") == 1 and f"open http://127.0.0.1:{port}/dashboard" in out, out
    assert PASSWORD not in out and (":***@" in out) == storage.startswith("postgresql"), out
