"""Real tiny jobs forked by the warm launcher (tcbench.job.zygote): they train, they die with their parent and so
does the launcher, a stopped job leaves nothing behind, a launcher that dies takes its job with it and is replaced,
and the jobs it must not fork start as new processes."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from typing import Callable

import psutil
import pytest
from waiting import wait_for as _wait_for

import tcbench as tc
from tcbench import JobSpec, Store
from tcbench.host.processes import pid_alive
from tcbench.runner import zygote_client as zc
from tcbench.store.api import home

pytestmark = pytest.mark.integration

TINY = JobSpec(model="gpt2", size="tiny", batch_size=8, seq_len=32, steps=24, warmup_steps=3, lr=2e-3, seed=0,
               dropout=0.0, threads=1)


@pytest.fixture
def own_launchers():
    """Earlier tests' launchers, of other environments (the XLA jobs', another PYTHONPATH), are kept beside this
    environment's (``_Launcher.KEYS``): ended, so that the test counts only its own."""
    zc._LAUNCHER.close()


@pytest.fixture(autouse=True)
def _fork_mode(monkeypatch):
    monkeypatch.delenv(zc.LAUNCHER_ENV, raising=False)


def _working_for(run_dir: str) -> list[int]:
    """Live processes whose environment (as /proc shows it) names this run folder."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("TCBENCH_RUN_DIR") == run_dir and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found


def _gone(*pids: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(pid_alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return False


def _parents(store: Store) -> tuple[dict[int, tuple[int, int]], Callable[[dict], None]]:
    """An observer that notes, when a job starts loading, its pid and its parent's; and the notes."""
    seen: dict[int, tuple[int, int]] = {}

    def observer(event: dict) -> None:
        if isinstance(event, tc.events.PhaseChanged) and event.phase == "loading":
            pid = int(store.run_row(event.run_id)["worker_pid"])
            seen[event.run_id] = (pid, psutil.Process(pid).ppid())

    return seen, observer


def test_jobs_are_forked_by_one_launcher_and_train_as_before():
    """The first job starts the launcher from a short-lived thread (as the panel does); the launcher outlives the
    thread and forks the next job too."""
    store = Store()
    seen, observer = _parents(store)
    results: list[tc.JobResult] = []
    first = threading.Thread(target=lambda: results.append(tc.run(TINY, observer, store=store)))
    first.start()
    first.join()
    results.append(tc.run(TINY.replace(seed=1), observer, store=store))
    for r in results:
        assert r.status == "ok" and r.extra.launcher == "fork", (r.error, r.log_tail)
        assert len(r.records) == 24 and r.figures.median_step_s > 0 and r.device == "cpu"
        assert len(tc.steps(r.run_id, store)) == 24 and r.env["threads"] == 1
    (job1, launcher1), (job2, launcher2) = seen.values()
    assert launcher1 == launcher2 and job1 != job2 and pid_alive(launcher1)
    assert "tcbench.job.zygote" in psutil.Process(launcher1).cmdline()
    assert not any(_working_for(r.artifacts) for r in results) and _gone(job1, job2)


def _with_steps(store: Store, n: int) -> dict | None:
    """The latest run's row once it has ``n`` stored steps."""
    runs = store.runs()
    if runs.empty:
        return None
    run_id = int(runs.iloc[-1].run_id)
    return store.run_row(run_id) if len(tc.steps(run_id, store)) >= n else None


_PARENT = textwrap.dedent("""
    import sys
    import tcbench as tc
    tc.run(tc.JobSpec.from_json(sys.argv[1]))
""")


@contextlib.contextmanager
def _parent(tmp_path, code: str):
    """A parent process running ``code`` on a never-ending tiny job, and its store's path; it is SIGKILLed by the
    test (or on the way out)."""
    db = tmp_path / "parent.db"
    Store(db)
    env = {**os.environ, "TCBENCH_DB": str(db), "TCBENCH_HOME": str(home())}
    parent = subprocess.Popen([sys.executable, "-c", code, TINY.replace(steps=100_000).to_json()], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield parent, db
    finally:
        if parent.poll() is None:
            parent.kill()
        parent.wait()


def test_a_forked_job_and_its_launcher_die_with_their_parent(tmp_path):
    with _parent(tmp_path, _PARENT) as (parent, db):
        row = _wait_for(lambda: _with_steps(Store(db), 3), 180, "3 stored steps")
        job = int(row["worker_pid"])
        launcher = psutil.Process(job).ppid()
        assert psutil.Process(launcher).ppid() == parent.pid
        assert "tcbench.job.zygote" in psutil.Process(launcher).cmdline()
        parent.send_signal(signal.SIGKILL)
    assert _gone(job, launcher), "the job or its launcher outlived their parent"
    assert not _working_for(row["artifacts"])


def test_a_stopped_job_leaves_no_process_behind_and_the_launcher_serves_on():
    store = Store()
    stop = threading.Event()
    seen, noted = _parents(store)

    def observer(event: dict) -> None:
        noted(event)
        if isinstance(event, tc.events.StepMeasured) and event.record.step == 3:
            stop.set()

    r = tc.run(TINY.replace(steps=100_000), observer, stop=stop, store=store)
    assert r.status == "interrupted" and r.error.startswith("stopped by the user") and r.extra.launcher == "fork"
    assert len(tc.steps(r.run_id, store)) == len(r.records) >= 4
    (job, launcher), = seen.values()
    assert _gone(job) and not _working_for(r.artifacts) and pid_alive(launcher)
    again = tc.run(TINY.replace(steps=4, warmup_steps=1), store=store)
    assert again.status == "ok" and again.extra.launcher == "fork"


def test_a_launcher_that_dies_takes_its_job_with_it_and_the_next_job_gets_a_new_one():
    store = Store()
    seen, noted = _parents(store)

    def observer(event: dict) -> None:
        noted(event)
        if isinstance(event, tc.events.StepMeasured) and event.record.step == 3:
            os.kill(seen[event.run_id][1], signal.SIGKILL)

    r = tc.run(TINY.replace(steps=100_000), observer, store=store)
    assert r.status == "interrupted" and "killed by SIGKILL" in r.error, (r.error, r.log_tail)
    assert len(tc.steps(r.run_id, store)) == len(r.records) >= 4
    (job, launcher), = seen.values()
    assert _gone(job, launcher) and not _working_for(r.artifacts)
    again = tc.run(TINY.replace(steps=4, warmup_steps=1), noted, store=store)
    assert again.status == "ok" and again.extra.launcher == "fork" and seen[again.run_id][1] != launcher


def test_spawn_mode_and_a_script_job_start_a_new_process(tmp_path, monkeypatch):
    store = Store()
    monkeypatch.setenv(zc.LAUNCHER_ENV, "spawn")
    spawned = tc.run(TINY.replace(steps=4, warmup_steps=1), store=store)
    assert spawned.status == "ok" and spawned.extra.launcher == "spawn" and len(spawned.records) == 4
    monkeypatch.delenv(zc.LAUNCHER_ENV)
    script = tmp_path / "hello.py"
    script.write_text("print('hello from a script')\n")
    r = tc.run(JobSpec(script=str(script), steps=4, warmup_steps=1, threads=1), store=store)
    assert r.extra.launcher == "spawn" and "hello from a script" in r.log_tail
    assert r.status == "failed" and "without reporting a step" in r.error


def test_a_forked_copy_of_the_runner_starts_a_launcher_of_its_own():
    """Tuning workers are forked from the runner's process: the parent's launcher (its socket, threads, lock) is not
    theirs, and it still serves the parent afterwards."""
    import multiprocessing

    store = Store()
    seen, noted = _parents(store)
    short = TINY.replace(steps=4, warmup_steps=1)
    first = tc.run(short, noted, store=store)
    ctx = multiprocessing.get_context("fork")
    out = ctx.SimpleQueue()

    def worker() -> None:
        own = Store(store.path)
        seen_here, noted_here = _parents(own)
        r = tc.run(short, noted_here, store=own)
        out.put((r.status, r.extra.launcher, list(seen_here.values())))

    child = ctx.Process(target=worker)
    child.start()
    child.join(300)
    if child.exitcode is None:
        child.kill()
        child.join()
    assert child.exitcode == 0 and not out.empty(), "the forked runner's job did not finish"
    status, launcher, [(_, its_launcher)] = out.get()
    assert status == "ok" and launcher == "fork" and its_launcher != seen[first.run_id][1]
    again = tc.run(short, noted, store=store)
    assert again.extra.launcher == "fork" and seen[again.run_id][1] == seen[first.run_id][1]


def test_jobs_started_by_two_threads_at_once_are_both_forked():
    store = Store()
    seen, noted = _parents(store)
    results: list[tc.JobResult] = []
    start = threading.Barrier(2)

    def job(seed: int) -> None:
        start.wait()
        results.append(tc.run(TINY.replace(steps=6, warmup_steps=1, seed=seed), noted, store=store))

    threads = [threading.Thread(target=job, args=(seed,)) for seed in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.status for r in results] == ["ok", "ok"] and {r.extra.launcher for r in results} == {"fork"}
    (job1, launcher1), (job2, launcher2) = seen.values()
    assert job1 != job2 and launcher1 == launcher2 and _gone(job1, job2)


def _launchers_of(pid: int) -> list[int]:
    """The live warm launchers this process started."""
    found = []
    for proc in psutil.Process(pid).children():
        try:
            if "tcbench.job.zygote" in proc.cmdline() and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found


def test_every_round_of_a_comparison_forks_from_a_launcher_of_its_own(own_launchers):
    """Children of one launcher share its luck (its address layout): no two rounds of a comparison fork from the same
    launcher, the jobs of one round do, a retired launcher ends, and what stays is the last round's launcher and the
    spare started ahead of need (the next comparison's first round)."""
    store = Store()
    cmp = tc.compare(TINY.replace(steps=6, warmup_steps=1), backends=["eager"], rounds=3, store=store)
    assert [r.status for r in cmp.results] == ["ok"] * 6
    by_round: dict[int, set] = {}
    for r in cmp.results:
        assert r.extra.launcher == "fork" and r.extra.launcher_pid, (r.error, r.log_tail)
        by_round.setdefault(r.round, set()).add(r.extra.launcher_pid)
    assert all(len(pids) == 1 for pids in by_round.values()), by_round
    used = [pids.pop() for _, pids in sorted(by_round.items())]
    assert len(set(used)) == 3, used
    assert _gone(*used[:2]), "a retired launcher outlived its round"
    alive = _launchers_of(os.getpid())
    assert used[2] in alive and len(alive) <= 2, (used, alive)
    stored = tc.load_comparison(cmp.comparison_id, store)
    assert sorted(r.extra.launcher_pid for r in stored.results) == sorted(r.extra.launcher_pid for r in cmp.results)


_COMPARING = textwrap.dedent("""
    import sys
    import tcbench as tc
    tc.compare(tc.JobSpec.from_json(sys.argv[1]), backends=["eager"], rounds=2)
""")


def test_a_comparisons_launchers_and_its_spare_die_with_their_parent(tmp_path):
    with _parent(tmp_path, _COMPARING) as (parent, db):
        row = _wait_for(lambda: _with_steps(Store(db), 3), 180, "3 stored steps")
        launchers = _wait_for(lambda: _launchers_of(parent.pid) if len(_launchers_of(parent.pid)) == 2 else None, 60,
                              "the round's launcher and the spare")
        job = int(row["worker_pid"])
        assert psutil.Process(job).ppid() in launchers
        parent.send_signal(signal.SIGKILL)
    assert _gone(job, *launchers), "the job, its launcher or the spare outlived their parent"
    assert not _working_for(row["artifacts"])


_FAILING = textwrap.dedent("""
    import sys
    import tcbench as tc

    def observer(event):
        if isinstance(event, tc.events.StepMeasured) and event.record.step == 30:
            raise RuntimeError("the observer failed")

    tc.compare(tc.JobSpec.from_json(sys.argv[1]), backends=["eager"], rounds=2, observer=observer)
""")


def test_a_comparison_that_fails_leaves_no_launcher_behind(tmp_path):
    """An error in the caller ends the comparison (its row interrupted); the process exits with it, and its
    launchers (the round's and the spare) end with it: no orphan."""
    with _parent(tmp_path, _FAILING) as (parent, db):
        _wait_for(lambda: _with_steps(Store(db), 3), 180, "3 stored steps")
        launchers = _launchers_of(parent.pid)
        assert launchers
        assert parent.wait(120) != 0
    assert _gone(*launchers, within=10), "a launcher outlived the comparison's failed process"
    assert Store(db).comparisons().iloc[-1].status == "interrupted"


def test_a_stopped_comparison_leaves_no_job_and_no_retired_launcher_behind(own_launchers):
    store = Store()
    stop = threading.Event()
    seen, noted = _parents(store)

    rounds: dict[int, int] = {}

    def watch(event: dict) -> None:
        if isinstance(event, tc.events.JobStarted):
            rounds[event.run_id] = event.round
        if isinstance(event, tc.events.StepMeasured) and rounds.get(event.run_id) == 1 and event.record.step == 3:
            stop.set()
        noted(event)

    # 120 steps: round 1 is stopped at its third step, with over a hundred steps of both jobs still to take turns
    cmp = tc.compare(TINY.replace(steps=120), backends=["eager"], rounds=3, store=store, observer=watch, stop=stop)
    assert cmp.stop_reason == "stopped by the user" and {r.round for r in cmp.results} == {0, 1}
    jobs = [job for job, _ in seen.values()]
    first, second = ({r.round: r.extra.launcher_pid for r in cmp.results}[n] for n in (0, 1))
    assert first != second and _gone(*jobs) and _gone(first), "a job or a retired launcher outlived the stop"
    alive = _launchers_of(os.getpid())
    assert second in alive and len(alive) <= 2, alive
