"""Processes on this machine, through psutil: whether a recorded job's process still runs, and ending what a
dead job left behind (only processes of its process group working for its run folder)."""

from __future__ import annotations

import os
import signal
from typing import Any

import psutil


def pid_alive(pid: Any) -> bool:
    """True when a process with this pid runs on this host (another user's counts; a zombie does not)."""
    try:
        proc = psutil.Process(int(pid))
        return proc.status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except (ValueError, TypeError, OverflowError, psutil.NoSuchProcess):
        return False
    except psutil.AccessDenied:
        return True


def _leftovers(pgid: int, run_dir: str) -> list[int]:
    """Processes of a job's process group that still run for that job's folder (checked in their environment)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.environ().get("TCBENCH_RUN_DIR") == run_dir:
                found.append(proc.pid)
        except (OSError, psutil.Error):
            continue
    return found


def end_leftovers(worker_pid: Any, run_dir: Any) -> int:
    """SIGKILL what a dead job left running (its process group, only processes working for its run folder)."""
    if not worker_pid or not run_dir:
        return 0
    pids = _leftovers(int(worker_pid), str(run_dir))
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return len(pids)
