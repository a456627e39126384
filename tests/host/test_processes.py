"""host.processes: a recorded job's process is looked up and its leftovers ended through psutil."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from tcbench.host.processes import end_leftovers, pid_alive


def _sleeper(run_dir: str) -> subprocess.Popen:
    env = {**os.environ, "TCBENCH_RUN_DIR": run_dir}
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env, start_new_session=True)


def test_pid_alive_tells_a_running_process_from_a_reaped_one_and_from_nonsense():
    proc = _sleeper("/nowhere")
    try:
        assert pid_alive(proc.pid) and pid_alive(str(proc.pid))
    finally:
        proc.kill()
        proc.wait()
    assert not pid_alive(proc.pid)
    assert not pid_alive(None) and not pid_alive("x") and not pid_alive(2**80)


def test_a_zombie_is_not_alive():
    proc = _sleeper("/nowhere")
    proc.kill()
    deadline = time.monotonic() + 30
    while pid_alive(proc.pid) and time.monotonic() < deadline:   # killed, not yet reaped: a zombie
        time.sleep(0.05)
    assert not pid_alive(proc.pid)
    proc.wait()


def test_end_leftovers_kills_only_the_dead_jobs_group_working_for_its_folder(tmp_path):
    mine, other = _sleeper(str(tmp_path / "run")), _sleeper(str(tmp_path / "other"))
    try:
        assert end_leftovers(mine.pid, tmp_path / "other") == 0           # right group, another folder
        assert end_leftovers(None, tmp_path / "run") == 0
        assert end_leftovers(mine.pid, tmp_path / "run") == 1
        assert mine.wait(timeout=30) == -9
        assert other.poll() is None
    finally:
        for p in (mine, other):
            p.kill()
            p.wait()
