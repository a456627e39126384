"""The fault suite: each fault is really done to a real tiny job, and each test counts what was lost.

Every test asserts the two figures the README reports: measured steps lost (0) and processes left
behind (0). "Left behind" is any live process whose environment names a run folder of this test
session's TCBENCH_HOME (a job process and anything it started carry ``TCBENCH_RUN_DIR``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest
from waiting import wait_for as _wait_for

import tcbench as tc
from tcbench import JobSpec, Store
from tcbench.store.api import STALE_S, home

pytestmark = pytest.mark.integration

TINY = JobSpec(model="gpt2", size="tiny", batch_size=8, seq_len=32, steps=24, warmup_steps=3, lr=2e-3,
               seed=0, dropout=0.0, threads=1)


# -- what is left behind -------------------------------------------------------------------------------
def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return stat[stat.rindex(b")") + 2:].split()[0].decode()
    except OSError:
        return ""


def _left_behind(run_dir: str | None = None) -> list[int]:
    """Live (not zombie) processes working for a run folder of this session (or for ``run_dir``)."""
    marker = f"TCBENCH_RUN_DIR={run_dir or home() / 'runs'}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if any(v.startswith(marker) for v in env) and _state(int(entry)) not in ("Z", "X", ""):
            found.append(int(entry))
    return found


def _wait_gone(run_dir: str, within: float = 5.0) -> list[int]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        left = _left_behind(run_dir)
        if not left:
            return []
        time.sleep(0.1)
    return _left_behind(run_dir)


def _row(db: Path, run_id: int | None = None) -> dict:
    con = sqlite3.connect(db)
    con.row_factory = sqlite3.Row
    try:
        sql = "SELECT * FROM runs " + ("WHERE run_id=?" if run_id else "ORDER BY run_id DESC LIMIT 1")
        row = con.execute(sql, (run_id,) if run_id else ()).fetchone()
        return dict(row) if row else {}
    finally:
        con.close()


def _stored_steps(db: Path, run_id: int) -> int:
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT COUNT(*) FROM steps WHERE run_id=?", (run_id,)).fetchone()[0]
    finally:
        con.close()


# -- the parent dies (a kernel restart) ------------------------------------------------------------------
_PARENT = textwrap.dedent("""
    import sys
    import tcbench as tc
    tc.run(tc.JobSpec.from_json(sys.argv[1]))
""")


def _parent(db: Path, spec: JobSpec) -> subprocess.Popen:
    env = {**os.environ, "TCBENCH_DB": str(db), "TCBENCH_HOME": str(home())}
    return subprocess.Popen([sys.executable, "-c", _PARENT, spec.to_json()], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _sigkill_parent(tmp_path: Path, spec: JobSpec, when_steps: int) -> tuple[dict, int, int]:
    """Start a parent process running ``spec``, SIGKILL it once the store holds ``when_steps`` steps of its
    run (0: as soon as its job process exists, i.e. while it loads); (the row after reconciling, steps stored
    at the kill, steps stored after)."""
    db = tmp_path / "parent.db"
    Store(db)
    parent = _parent(db, spec)
    try:
        row = _wait_for(lambda: (r := _row(db)) and r.get("worker_pid") and r, 120, "the job process starting")
        run_id = row["run_id"]
        if when_steps:
            _wait_for(lambda: _stored_steps(db, run_id) >= when_steps, 180, f"{when_steps} stored steps")
        at_kill = _stored_steps(db, run_id)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    finally:
        if parent.poll() is None:
            parent.kill()
    row = _row(db, run_id)
    assert not _wait_gone(row["artifacts"]), "the job outlived its parent"
    assert row["status"] == "running"   # nothing has looked at the store yet
    runs = tc.runs(Store(db))           # opening the store reconciles the run whose process is gone
    after = runs.set_index("run_id").loc[run_id]
    return after.to_dict(), at_kill, _stored_steps(db, run_id)


def test_sigkill_of_the_parent_during_training(tmp_path):
    row, at_kill, after = _sigkill_parent(tmp_path, TINY.replace(steps=100_000), when_steps=5)
    assert row["status"] == "interrupted" and "ended without reporting" in row["error"]
    assert after >= at_kill >= 5   # every step the store had is still there (steps lost: 0)


def test_sigkill_of_the_parent_during_a_silent_phase(tmp_path):
    """Killed while its job loads torch and the model (no step yet): the job is gone within 5 s."""
    row, at_kill, after = _sigkill_parent(tmp_path, TINY.replace(steps=100_000), when_steps=0)
    assert row["status"] == "interrupted" and at_kill == 0 and after == 0


def test_a_running_row_of_another_host_is_interrupted_only_when_its_heartbeat_is_stale(tmp_path):
    store = Store(tmp_path / "t.db")
    fresh = store.insert_run(TINY, host="elsewhere", pid=1)
    stale = store.insert_run(TINY, host="elsewhere", pid=1)
    con = sqlite3.connect(store.path)
    con.execute("UPDATE runs SET heartbeat=? WHERE run_id=?", (time.time() - STALE_S - 60, stale))
    con.commit()
    con.close()
    assert Store(store.path).reconcile() == []   # the open already did it
    rows = tc.runs(store).set_index("run_id")
    assert rows.loc[fresh, "status"] == "running"
    assert rows.loc[stale, "status"] == "interrupted" and "no heartbeat" in rows.loc[stale, "error"]


def test_a_comparison_left_running_by_a_dead_process_is_interrupted(tmp_path):
    store = Store(tmp_path / "t.db")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    cid = store.insert_comparison("compare", TINY, ["eager", "inductor"], 1, {})
    con = sqlite3.connect(store.path)
    con.execute("UPDATE comparisons SET pid=? WHERE comparison_id=?", (dead.pid, cid))
    con.commit()
    con.close()
    live = store.insert_comparison("compare", TINY, ["eager", "inductor"], 1, {})   # this process: alive
    rows = tc.comparisons(Store(store.path)).set_index("comparison_id")
    assert rows.loc[cid, "status"] == "interrupted" and rows.loc[live, "status"] == "running"


# -- the store cannot be written -------------------------------------------------------------------------
def test_a_store_locked_longer_than_its_busy_timeout_loses_no_step(tmp_path, monkeypatch):
    """Another process holds the write lock from step 3 to after the job: steps are kept, spooled, merged."""
    from tcbench.runner import process as _runner

    monkeypatch.setattr(_runner, "_FINAL_WAIT_S", 1.0)
    store = Store(tmp_path / "locked.db")
    locker: dict = {}

    def observer(e):
        if isinstance(e, tc.events.StepMeasured) and e.record.step == 3 and "con" not in locker:
            con = locker["con"] = sqlite3.connect(store.path, isolation_level=None, check_same_thread=False)
            con.execute("BEGIN IMMEDIATE")   # held until the job has ended

    with pytest.warns(RuntimeWarning, match="could not be written.*merged when the store is next opened"):
        r = tc.run(TINY.replace(steps=40), observer, store=store)
    assert r.status == "ok" and len(r.records) == 40 and r.extra.spooled
    assert _stored_steps(store.path, r.run_id) < 40   # the lock really kept them out
    locker["con"].execute("ROLLBACK")
    locker["con"].close()
    merged = tc.get_run(r.run_id, Store(store.path))   # the next open merges the spool
    assert merged.status == "ok" and len(merged.records) == 40 and merged.figures == r.figures
    assert not Path(r.extra.spooled).exists()
    assert not _left_behind(r.artifacts)


@contextlib.contextmanager
def _tmpfs(path: Path, size: str):
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {done.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def _fill(folder: Path) -> Path:
    filler = folder / "filler"
    with open(filler, "wb") as f:
        with contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 65536)
                f.flush()
    return filler


def test_a_full_disk_loses_no_step(tmp_path):
    """The store's disk fills up at step 3 (a 3 MB tmpfs): the rest is spooled elsewhere and merged later."""
    with _tmpfs(tmp_path / "disk", "3m") as disk:
        store = Store(disk / "full.db")
        filled: list[Path] = []
        observer = (lambda e: filled.append(_fill(disk)) if isinstance(e, tc.events.StepMeasured) and e.record.step == 3
                    and not filled else None)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            r = tc.run(TINY.replace(steps=40), observer, store=store)
        assert r.status == "ok" and len(r.records) == 40
        spooled = Path(r.extra.spooled)
        assert not spooled.is_relative_to(disk)   # beside the store was full too: the temp folder took it
        assert any("full" in str(w.message) and str(spooled) in str(w.message) for w in caught)
        filled[0].unlink()
        merged = tc.get_run(r.run_id, Store(disk / "full.db"))
        assert merged.status == "ok" and len(merged.records) == 40
        assert not spooled.exists() and not _left_behind(r.artifacts)


@contextlib.contextmanager
def _readonly_copy(tmp_path: Path, db: Path):
    """A copy of the store in a folder this process may not write (a read-only mount when root)."""
    if os.getuid() != 0:
        folder = tmp_path / "ro"
        folder.mkdir()
        shutil.copy(db, folder / db.name)
        (folder / db.name).chmod(0o444)
        folder.chmod(0o555)
        try:
            yield folder / db.name
        finally:
            folder.chmod(0o755)
        return
    with _tmpfs(tmp_path / "ro", "8m") as folder:
        shutil.copy(db, folder / db.name)
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        yield folder / db.name


def test_a_read_only_store_opens_for_history_reports_and_exports(tmp_path):
    store = Store(tmp_path / "w.db")
    cmp = tc.compare(TINY.replace(steps=8, warmup_steps=2), backends=["eager"], rounds=1, store=store)
    with _readonly_copy(tmp_path, store.path) as path:
        ro = Store(path)
        assert ro.readonly
        loaded = tc.load_comparison(cmp.comparison_id, store=ro)
        assert len(loaded.results) == 2 and "<table" in loaded.to_html()
        assert len(tc.runs(ro)) == 2 and len(tc.steps(cmp.results[0].run_id, ro)) == 8
        with pytest.raises(tc.StoreError, match="read-only"):
            tc.run(TINY, store=ro)
        out = subprocess.run([sys.executable, "-m", "tcbench.cli", "runs"], capture_output=True, text=True,
                             env={**os.environ, "TCBENCH_DB": str(path)})
        assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr


# -- the job misbehaves ----------------------------------------------------------------------------------
def test_modules_named_like_standard_ones_in_the_callers_folder_do_not_break_a_catalog_job(tmp_path, monkeypatch):
    # torch imports cProfile, which imports profile; the caller's folder is on the job's path (its own modules)
    for name in ("profile", "code", "pdb"):
        (tmp_path / f"{name}.py").write_text(f"raise ImportError('the caller\\'s {name}.py was imported')\n")
    monkeypatch.chdir(tmp_path)
    res = tc.run(TINY.replace(steps=4, warmup_steps=1))
    assert res.ok, res.error


def test_sigint_to_the_job_is_interrupted():
    """Jupyter's "Interrupt kernel" signals the kernel; a SIGINT that reaches the job itself is `interrupted`."""
    store = Store()

    def observer(e):
        if isinstance(e, tc.events.StepMeasured) and e.record.step == 3:
            os.kill(int(store.run_row(e.run_id)["worker_pid"]), signal.SIGINT)

    r = tc.run(TINY.replace(steps=400), observer, store=store)
    assert r.status == "interrupted" and "KeyboardInterrupt" in r.error
    assert len(tc.steps(r.run_id)) == len(r.records) >= 4 and not _left_behind(r.artifacts)


def test_a_stalled_job_is_stopped_and_keeps_its_steps():
    """SIGSTOP freezes the job after step 3: the stall clock stops it. stall_s=20 rather than less: the job is
    forked from this file's warm launcher (its earlier tests started it), so its one silent phase is building the
    model, a few seconds on a busy machine; a job started as a new process would also load torch in it."""
    store = Store()

    def observer(e):
        if isinstance(e, tc.events.StepMeasured) and e.record.step == 3:
            os.kill(int(store.run_row(e.run_id)["worker_pid"]), signal.SIGSTOP)

    r = tc.run(TINY.replace(steps=400, stall_s=20.0), observer, store=store)
    assert r.status == "interrupted" and r.error.startswith("stalled: no report for") and "while measuring" in r.error
    assert len(tc.steps(r.run_id)) == len(r.records) >= 4
    assert not _left_behind(r.artifacts)


def test_a_total_cap_ends_a_job_that_keeps_reporting():
    """20 s: the job is forked from this file's warm launcher and reports its first steps within a few seconds on
    a busy machine; the cap must leave it time to report some (a new process would first load torch: 10-20 s)."""
    r = tc.run(TINY.replace(steps=100_000, timeout_s=20.0))
    assert r.status == "interrupted" and r.error.startswith("timed out after timeout_s=20 s")
    assert len(tc.steps(r.run_id)) == len(r.records) > 0 and not _left_behind(r.artifacts)


_LINGER = textwrap.dedent("""
    import os, subprocess
    args = open("/proc/self/cmdline", "rb").read().split(b"\\0")
    if os.environ.get("TCBENCH_TEST_LINGER") and b"tcbench.job.worker" in args:
        fd = int(args[args.index(b"tcbench.job.worker") + 2])
        subprocess.Popen(["sleep", "120"], pass_fds=(fd,))   # holds the job's pipe open after the job exits
""")


def test_the_wait_ends_when_the_job_exits_even_if_its_pipe_is_held(tmp_path, monkeypatch):
    """A process the job started keeps the job's pipe open: run() still returns when the job exits, and the
    helper (in the job's process group) is ended with it."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(_LINGER)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path / "site"),
                                                                    os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("TCBENCH_TEST_LINGER", "1")
    t0 = time.monotonic()
    r = tc.run(TINY.replace(steps=6, warmup_steps=2))
    assert r.status == "ok", (r.error, r.log_tail)
    assert time.monotonic() - t0 < 110   # not the 120 s the helper holds the pipe
    assert not _left_behind(r.artifacts)


def test_ctrl_c_in_a_terminal_is_one_line_exit_130_and_an_interrupted_run(tmp_path):
    """Ctrl-C signals the terminal's foreground process group: the CLI's (the job has a group of its own)."""
    db = tmp_path / "cli.db"
    Store(db)
    cli = subprocess.Popen([sys.executable, "-m", "tcbench.cli", "run", "--model", "gpt2", "--size", "tiny",
                            "--seq-len", "32", "--steps", "100000", "--threads", "1"],
                           env={**os.environ, "TCBENCH_DB": str(db)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, start_new_session=True,
                           # a terminal's process has SIGINT at its default; a background CI job may have it ignored
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        run_id = _wait_for(lambda: (r := _row(db)) and _stored_steps(db, r["run_id"]) >= 3 and r["run_id"], 180,
                           "3 stored steps")
        os.killpg(cli.pid, signal.SIGINT)
        out, err = cli.communicate(timeout=60)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.communicate()
    last = err.strip().splitlines()[-1]
    assert cli.returncode == 130 and last.startswith("tcbench: interrupted") and "Traceback" not in err, err[-2000:]
    row = _row(db, run_id)
    assert row["status"] == "interrupted" and _stored_steps(db, run_id) >= 3
    assert not _left_behind(row["artifacts"])


def test_an_observer_that_raises_stops_the_job_and_keeps_its_steps():
    """A bug in the caller's observer (a plot callback) must not leave the job running or lose its steps."""
    store = Store()

    def observer(e):
        if isinstance(e, tc.events.StepMeasured) and e.record.step == 3:
            raise RuntimeError("a plotting callback broke")

    with pytest.raises(RuntimeError, match="plotting callback"):
        tc.run(TINY.replace(steps=400), observer, store=store)
    row = store.run_row(int(tc.runs(store).iloc[-1]["run_id"]))
    assert row["status"] == "interrupted" and "RuntimeError: a plotting callback broke" in row["error"]
    assert len(tc.steps(int(row["run_id"]), store)) >= 4 and not _left_behind(row["artifacts"])
