"""Which jobs the warm launcher forks and what the runner does when it cannot: no launcher and no training here
(the launcher's own behaviour is tests/job/test_zygote.py's, real forked jobs tests/runner/test_launcher.py's)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tcbench import JobSpec
from tcbench.job.backends import backend_class
from tcbench.runner import zygote_client as zc

TINY = JobSpec(model="gpt2", size="tiny", batch_size=8, seq_len=32, steps=6, warmup_steps=2, threads=1)


@pytest.mark.parametrize("spec, forked", [
    (TINY, True), (TINY.replace(backend="inductor"), True), (TINY.replace(backend="xla"), True),
    (TINY.replace(debug=True), False), (TINY.replace(nproc=2), False),
    (JobSpec(script="train.py"), False)])
def test_only_plain_worker_jobs_are_forked(spec, forked):
    assert zc.forkable(spec, backend_class(spec.backend)) is forked


def _start(spec: JobSpec, tmp_path: Path):
    """start_job for a stand-in command that exits at once; (the process, the log's text)."""
    log_path = tmp_path / "worker.log"
    read_fd, write_fd = os.pipe()
    with open(log_path, "w") as log:
        proc = zc.start_job(spec, backend_class(spec.backend), [sys.executable, "-c", "pass"], str(tmp_path),
                            dict(os.environ), write_fd, log, tmp_path)
    os.close(write_fd)
    os.close(read_fd)
    assert proc.wait(timeout=60) == 0
    return proc, log_path.read_text()


@pytest.fixture
def launcher_fails(monkeypatch):
    asked = []

    def fork(request, fds, ready_s, draw=None, spare_cpus=None, spare_waits=False):
        asked.append({**request, "draw": draw})
        raise zc.LaunchError("it could not import torch")

    monkeypatch.setattr(zc._LAUNCHER, "fork", fork)
    return asked


def test_a_job_the_launcher_cannot_start_starts_as_a_new_process_and_its_log_says_why(tmp_path, launcher_fails,
                                                                                   monkeypatch):
    monkeypatch.delenv(zc.LAUNCHER_ENV, raising=False)
    proc, log = _start(TINY, tmp_path)
    assert isinstance(proc, subprocess.Popen) and len(launcher_fails) == 1
    assert "the warm launcher could not start this job (it could not import torch); it starts as a new process" in log


@pytest.mark.parametrize("spec, mode", [(TINY, "spawn"), (TINY.replace(debug=True), "fork"),
                                        (JobSpec(script="train.py"), "fork")])
def test_spawn_mode_and_ineligible_jobs_never_ask_the_launcher(spec, mode, tmp_path, launcher_fails, monkeypatch):
    monkeypatch.setenv(zc.LAUNCHER_ENV, mode)
    proc, log = _start(spec, tmp_path)
    assert isinstance(proc, subprocess.Popen) and launcher_fails == [] and log == ""


@pytest.mark.parametrize("mode, shared", [("fork", False), ("shared", True)])
def test_shared_mode_forks_every_draw_from_one_launcher(mode, shared, tmp_path, launcher_fails, monkeypatch):
    """``shared``: a round's draw is dropped, so every round forks from the one launcher of its environment."""
    monkeypatch.setenv(zc.LAUNCHER_ENV, mode)
    draw = object()
    log_path = tmp_path / "worker.log"
    read_fd, write_fd = os.pipe()
    with open(log_path, "w") as log:
        proc = zc.start_job(TINY, backend_class(TINY.backend), [sys.executable, "-c", "pass"], str(tmp_path),
                            dict(os.environ), write_fd, log, tmp_path, draw=draw)
    os.close(write_fd)
    os.close(read_fd)
    assert proc.wait(timeout=60) == 0 and len(launcher_fails) == 1
    assert launcher_fails[0]["draw"] is (None if shared else draw)


def test_an_unknown_launcher_mode_is_named_in_the_log_and_the_job_spawned(tmp_path, launcher_fails, monkeypatch):
    monkeypatch.setenv(zc.LAUNCHER_ENV, "forkserver")
    proc, log = _start(TINY, tmp_path)
    assert isinstance(proc, subprocess.Popen) and launcher_fails == []
    assert "TCBENCH_LAUNCHER='forkserver' is none of 'fork', 'shared' and 'spawn'" in log


def test_the_launcher_is_keyed_on_the_import_time_environment_not_on_per_job_paths():
    env = {"PYTHONPATH": "/a", "OMP_NUM_THREADS": "1", "TCBENCH_RUN_DIR": "/runs/1",
           "TORCHINDUCTOR_CACHE_DIR": "/cache/1", "TCBENCH_LAUNCHER": "fork"}
    same = {**env, "TCBENCH_RUN_DIR": "/runs/2", "TORCHINDUCTOR_CACHE_DIR": "/tmp/cold", "TCBENCH_LAUNCHER": "spawn"}
    assert zc._key(env) == zc._key(same)
    for change in ({"OMP_NUM_THREADS": "2"}, {"PYTHONPATH": "/b"}, {"USE_TORCH_XLA": "1"}, {"TORCH_LOGS": "+dynamo"}):
        assert zc._key({**env, **change}) != zc._key(env), change


def test_a_forked_handle_waits_like_a_popen():
    job = zc.Forked(4242)
    assert job.poll() is None and job.returncode is None
    with pytest.raises(subprocess.TimeoutExpired):
        job.wait(timeout=0.01)
    job.ended(-9)
    assert job.poll() == -9 and job.wait() == -9 and job.wait(timeout=0) == -9


@pytest.mark.parametrize("threads, usable, steps_on, free", [
    (1, {0, 1}, (1,), (0,)), (2, {0, 1}, None, None), (1, {0, 1, 2, 3}, (3,), (0, 1, 2)), (2, {4, 5, 6}, (5, 6), (4,)),
])
def test_the_next_rounds_launcher_imports_on_the_cpus_the_jobs_leave_free(threads, usable, steps_on, free,
                                                                           monkeypatch):
    from tcbench.job.process_tools import job_cpus

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(usable))
    monkeypatch.delenv("TCBENCH_PIN", raising=False)
    assert job_cpus(threads, 1) == steps_on and zc.free_cpus(threads) == free
    assert zc.free_cpus(1, world_size=2) is None
    monkeypatch.setenv("TCBENCH_PIN", "0")
    assert zc.free_cpus(1) is None


def test_a_jobs_named_pipes_are_removed_with_it_and_nothing_else(tmp_path):
    from tcbench.runner.process import _remove_pipes

    os.mkfifo(tmp_path / "channel.fifo")
    (tmp_path / "worker.log").write_text("kept\n")
    (tmp_path / "sub").mkdir()
    _remove_pipes(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sub", "worker.log"]
    _remove_pipes(tmp_path / "gone")   # a run folder that was never made: nothing to do, no error


class _FakeZygote:
    """A launcher that is ready at once and forks nothing: which launchers start, in which order, on which CPUs."""

    started: list = []

    def __init__(self, key, env, starter, cpus=None):
        self.key, self.cpus, self.draw = key, cpus, None
        self.served = self.dead = False
        self.broken = ""
        _FakeZygote.started.append(self)

    def fork(self, request, fds, ready_s):
        self.served = True
        return zc.Forked(4242, 4243)

    def retire(self):
        self.dead = True


@pytest.mark.parametrize("waits", [False, True])
def test_the_next_rounds_launcher_starts_after_this_ones_imports_or_after_the_rounds_compiles(waits, monkeypatch):
    """A spare's imports never run beside the launcher it follows (the first round's imports); an XLA one's
    (``spare_waits``) wait for ``start_spares``, which the runner calls once the round's jobs have compiled."""
    monkeypatch.setattr(zc, "_Zygote", _FakeZygote)
    monkeypatch.setattr(_FakeZygote, "started", [])
    launchers = zc._Launcher()
    request = {"spec": "{}", "run_dir": "/x", "cwd": "/", "env": {"A": "1"}}
    first, second = object(), object()
    launchers.fork(request, (0, 1), 1.0, draw=first, spare_cpus=(0,), spare_waits=waits)
    current, *spares = _FakeZygote.started
    assert current.cpus is None and current.served and current.draw is first
    assert [s.cpus for s in spares] == ([] if waits else [(0,)])
    launchers.start_spares()
    assert len(_FakeZygote.started) == 2 and _FakeZygote.started[1].cpus == (0,)
    launchers.start_spares()   # nothing more asked for: nothing more started
    launchers.fork(request, (0, 1), 1.0, draw=first, spare_cpus=(0,), spare_waits=waits)   # the same round's job
    assert len(_FakeZygote.started) == 2
    spare = _FakeZygote.started[1]
    launchers.fork(request, (0, 1), 1.0, draw=second, spare_cpus=(0,), spare_waits=waits)   # the next round
    assert spare.served and spare.draw is second and current.dead
    assert len(_FakeZygote.started) == (2 if waits else 3)
