"""Shared retune studies on PostgreSQL: retune_lr on a server URL, several worker processes on one study (no
trial lost or run twice, the rule trials once), a SIGKILLed worker's trial retried, `tcbench tune-worker` joining
from elsewhere, and the errors for what cannot be shared or reached.

The server is the session's own (the ``pg_url`` fixture, tests/pgserver.py; the tests marked ``postgres`` skip
without PostgreSQL's binaries). No real training job runs: the job runner is a fake (as in test_retune.py) that
logs each job's start to a file, since the workers are forked processes.
"""

from __future__ import annotations

import math
import os
import sys
import signal
import socket
import time
from pathlib import Path

import pytest

import tcbench.tuning.storage as ts
import tcbench as tc
from tcbench import JobSpec
from tcbench.core.results import JobResult, StepRecord
from tcbench.core.spec import SpecError
from tcbench.tuning.lr.retune import retune_lr, rule_lrs

SPEC = JobSpec(model="bert-base-cased", size="tiny", batch_size=8, seq_len=32, steps=10, warmup_steps=1, lr=1e-3,
               dropout=0.0, threads=1)
KW = dict(noise=False, budget="equal_steps", pruner="none", sampler="tpe", seed=0)   # the study mechanics
RULES = dict(zip(("linear", "sqrt", "original"), (*rule_lrs(1e-3, 8, 32), 1e-3)))
postgres = pytest.mark.postgres


def _fake_run(log: Path, kill_once: Path | None = None, overlap: bool = False):
    """A stand-in for tcbench.runner.process.run: a loss curve best near lr 3e-3, one line per job in ``log``.

    ``overlap``: the first job waits (up to 2 min) until a second job has started (several workers provably run
    at once). ``kill_once``: the first job to reach step 2 writes its label there and SIGKILLs its own worker process."""
    def run(spec, observer=None, stop=None, store=None, comparison_id=None, round=0, job=None, label="", draw=None):
        with open(log, "a") as f:
            f.write(f"{os.getpid()} trial#{round}\n")   # the runner's round is the trial number
        notify = observer or (lambda e: None)
        res = JobResult(spec=spec, status="ok", run_id=round)
        if overlap and len(log.read_text().splitlines()) == 1:
            deadline = time.monotonic() + 120
            while len(log.read_text().splitlines()) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
        rate, loss = 0.25 * math.exp(-math.log10(spec.lr / 3e-3) ** 2), 0.7
        for step in range(spec.steps):
            if stop is not None and stop.is_set():
                res.status, res.error = "interrupted", "stopped"
                return res
            if kill_once is not None and step == 2:
                try:
                    fd = os.open(kill_once, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                except FileExistsError:
                    pass
                else:
                    os.write(fd, str(round).encode())
                    os.close(fd)
                    os.kill(os.getpid(), signal.SIGKILL)
            loss = 0.05 + (loss - 0.05) * (1 - rate)
            rec = StepRecord(step=step, step_s=0.01, samples_s=100.0, tokens_s=1e3, mem_bytes=0, loss=loss)
            res.records.append(rec)
            notify(tc.events.StepMeasured(job="job", backend=spec.backend, label=spec.backend, run_id=res.run_id, record=rec))
            time.sleep(0.01)
        res.extra.eval_loss = loss + 0.02
        return res
    return run


@pytest.fixture
def jobs(monkeypatch, tmp_path):
    """The fake runner; returns the log of started jobs ("pid trial#N" lines)."""
    import tcbench.runner.process as runner

    log = tmp_path / "jobs.log"
    log.touch()
    monkeypatch.setattr(runner, "run", _fake_run(log))
    return log


def _started(log: Path) -> list[tuple[int, str]]:
    return [(int(pid), label) for pid, label in (line.split() for line in log.read_text().splitlines())]


def _study(url: str, name: str):
    import optuna

    # Optuna's own URL handling, the URL as a user pastes it: SQLAlchemy 2.1 reads postgresql:// as psycopg (3)
    return optuna.load_study(study_name=name, storage=url)


def _counted(trials) -> list:
    return [t for t in trials if t.state.name in ("COMPLETE", "PRUNED")
            or (t.state.name == "FAIL" and t.user_attrs.get("status") not in (None, "", "interrupted"))]


def _rules_once(trials) -> None:
    """Each rule guess is one counted trial at its own lr."""
    for rule, lr in RULES.items():
        hits = [t for t in _counted(trials) if t.user_attrs.get("rule") == rule]
        assert len(hits) == 1 and hits[0].params["lr"] == pytest.approx(lr), (rule, hits)


def _with_password(url: str) -> str:
    return url.replace("postgres@", "postgres:secret@")   # trust auth: the server ignores it


@postgres
def test_retune_lr_on_postgresql_resumes_and_never_shows_the_password(pg_url, jobs, store):
    url = _with_password(pg_url)
    res = retune_lr(SPEC, 32, n_trials=4, storage=url, study_name="single", store=store, **KW)
    assert "secret" not in res.storage and ":***@127.0.0.1" in res.storage
    assert "secret" not in store.comparisons().info_json.str.cat()
    again = retune_lr(SPEC, 32, n_trials=6, storage=url, study_name="single", store=store, **KW)
    trials = _study(pg_url, "single").get_trials()
    assert len(_counted(trials)) == 6 and len(_started(jobs)) == 6   # the resume ran only the 2 missing trials
    _rules_once(trials)
    assert again.best_lr is not None and len(again.trials) == 6


@postgres
def test_find_max_batch_keeps_its_probes_in_a_postgresql_study_and_a_second_search_runs_none(pg_url, store, monkeypatch):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "batch"))
    from test_maxbatch import _fake_runs

    from tcbench.tuning.batch.search import find_max_batch

    ran = _fake_runs(monkeypatch, limit=24)
    url = _with_password(pg_url)
    first = find_max_batch(SPEC, backends=["eager", "inductor"], max_batch=64, storage=url, study_name="maxbatch",
                           store=store, memory_budget_gb=1.0)
    assert first.max_batch == {"eager": 24, "inductor": 24} and "secret" not in first.storage
    assert "secret" not in store.comparisons().info_json.str.cat()
    n = len(ran)
    again = find_max_batch(SPEC, backends=["eager", "inductor"], max_batch=64, storage=url, study_name="maxbatch",
                           store=store, memory_budget_gb=1.0)
    assert again.max_batch == first.max_batch and len(ran) == n and again.probes().reused.all()
    assert _study(pg_url, "maxbatch").best_value == 24


@postgres
def test_three_workers_share_one_study_without_losing_or_repeating_a_trial(pg_url, jobs, store, monkeypatch):
    import tcbench.runner.process as runner

    monkeypatch.setattr(runner, "run", _fake_run(jobs, overlap=True))
    seen: list = []   # the caller's observer: called here, in the caller's process, with every worker's events
    res = retune_lr(SPEC, 32, n_trials=12, storage=pg_url, study_name="three", store=store, n_workers=3,
                    observer=lambda e: seen.append((os.getpid(), e)), **KW)
    trials = _study(pg_url, "three").get_trials()
    assert {pid for pid, _ in seen} == {os.getpid()}
    assert (sorted(e.number for _, e in seen if isinstance(e, tc.events.TrialEnded))
            == sorted(t.number for t in trials))
    steps = [e for _, e in seen if isinstance(e, tc.events.StepMeasured)]
    assert len(steps) == 12 * SPEC.steps and all(isinstance(e.record, StepRecord) for e in steps)
    started = _started(jobs)
    assert len({pid for pid, _ in started}) >= 2 and os.getpid() not in {pid for pid, _ in started}
    labels = sorted(label for _, label in started)
    assert labels == sorted(f"trial#{t.number}" for t in trials)      # one job per trial, none twice, none lost
    assert len(trials) == 12 and all(t.state.name == "COMPLETE" for t in trials)   # never more than n_trials
    _rules_once(trials)
    assert res.best_lr is not None and len(res.trials) == 12


@postgres
def test_workers_forked_after_torch_used_its_threads_do_not_hang(pg_url, jobs, store):
    """The Gaussian-process sampler runs torch in the caller (a first retune, a notebook's own work) and then in
    every forked worker: torch's thread pool does not survive a fork, and a worker that waits for it hangs. The
    workers are killed after 4 minutes so that a regression fails here instead of hanging the suite."""
    import multiprocessing
    import threading

    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        torch.randn(256, 256) @ torch.randn(256, 256)   # the pool exists now, in this (the parent) process
        guard = threading.Timer(240, lambda: [p.kill() for p in multiprocessing.active_children()])
        guard.start()
        try:
            res = retune_lr(SPEC, 32, n_trials=6, storage=pg_url, study_name="gp-after-torch", store=store,
                            n_workers=2, **{**KW, "sampler": "gp"})
        finally:
            guard.cancel()
    finally:
        torch.set_num_threads(threads)
    assert res.sampler == "gp" and len(res.trials) == 6 and res.best_lr is not None


# a process that compiles (fake tensors) and then trains, without a GPU; then a forked child trains: with torch 2.14
# its autograd refuses (the engine started device threads for the stand-in CUDA device), with torch 2.9 it runs
FORK_AFTER_COMPILE = """
import json, os, sys, torch
from tcbench.tuning.lr.workers import autograd_fork_problem
before = autograd_fork_problem()
x = torch.randn(4, requires_grad=True)
torch.compile(lambda t: (t * 2).sin().sum(), backend="eager")(x.detach())
(x * 3).sum().backward()
after = autograd_fork_problem()
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    try:
        y = torch.randn(4, requires_grad=True); (y * 2).sum().backward(); ok = True
    except RuntimeError as exc:   # None: refused because of the fork; anything else is shown
        ok = None if "fork" in str(exc) else str(exc)
    os.write(w, json.dumps(ok).encode()); os._exit(0)
os.waitpid(pid, 0)
print(json.dumps({"before": before, "after": after, "child": json.loads(os.read(r, 4096))}))
"""


def test_the_fork_check_says_exactly_when_a_forked_child_cannot_use_autograd():
    """``autograd_fork_problem`` against torch itself, in a fresh process: nothing before any backward; after a
    compile and a backward, a reason exactly when the forked child's backward is refused (torch 2.14, not 2.9)."""
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", FORK_AFTER_COMPILE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["before"] == "" and seen["child"] in (True, None), seen
    assert bool(seen["after"]) == (seen["child"] is None), seen


def test_forked_gp_workers_are_refused_by_name_where_autograd_cannot_run_in_them(monkeypatch):
    """Where the caller's autograd engine has device threads, workers with the GPSampler are refused before any
    starts (each trial would fail), with what to do instead; the TPE sampler and one worker need no autograd there."""
    import optuna

    import tcbench.tuning.lr.workers as tw

    monkeypatch.setattr(tw, "autograd_fork_problem", lambda: "torch's autograd engine runs 8 device threads")
    for sampler in ("gp", optuna.samplers.GPSampler(seed=0)):
        with pytest.raises(SpecError) as e:
            tw.check_fork(sampler, 2)
        assert e.value.field == "n_workers" and "8 device threads" in str(e.value) and "sampler='tpe'" in str(e.value)
    tw.check_fork("tpe", 2)
    tw.check_fork(optuna.samplers.TPESampler(seed=0), 2)
    tw.check_fork("gp", 1)


@postgres
def test_a_sigkilled_workers_trial_is_failed_retried_and_the_study_completes(pg_url, tmp_path, store, monkeypatch):
    import tcbench.runner.process as runner

    monkeypatch.setattr(ts, "HEARTBEAT_INTERVAL_S", 1)   # inherited by the forked workers
    monkeypatch.setattr(ts, "GRACE_PERIOD_S", 2)
    log, marker = tmp_path / "jobs.log", tmp_path / "killed"
    log.touch()
    monkeypatch.setattr(runner, "run", _fake_run(log, kill_once=marker))
    res = retune_lr(SPEC, 32, n_trials=6, storage=pg_url, study_name="killed", store=store, n_workers=3, **KW)
    killed = int(marker.read_text())
    trials = _study(pg_url, "killed").get_trials()
    dead = trials[killed]
    assert dead.state.name == "FAIL" and not dead.user_attrs.get("status")
    again = [t for t in trials if t.system_attrs.get("failed_trial") == killed]
    assert len(again) == 1 and again[0].state.name == "COMPLETE" and again[0].params["lr"] == dead.params["lr"]
    assert again[0].user_attrs.get("rule") == dead.user_attrs.get("rule")
    assert len(_counted(trials)) == 6 and not [t for t in trials if t.state.name in ("RUNNING", "WAITING")]
    _rules_once(trials)
    assert f"retried as trial {again[0].number}" in res.trials.set_index("number").reason[killed]


@postgres
def test_tune_worker_joins_a_study_from_another_terminal(pg_url, jobs, store, tmp_path, monkeypatch, capsys):
    import threading

    from tcbench import Store
    from tcbench.cli import app as cli

    stop = threading.Event()
    first = retune_lr(SPEC, 32, n_trials=5, storage=pg_url, study_name="joined", store=store, stop=stop,
                      observer=lambda e: isinstance(e, tc.events.TrialEnded) and stop.set(), **KW)   # stops after one trial
    assert len(_counted(_study(pg_url, "joined").get_trials())) == 1
    monkeypatch.setenv("TCBENCH_DB", str(tmp_path / "worker.db"))
    url = _with_password(pg_url)
    assert cli.main(["tune-worker", "joined", "--storage", url]) == 0
    out = capsys.readouterr()
    assert "study 'joined': 5 trials (5 complete)" in out.out and "secret" not in out.out + out.err
    trials = _study(pg_url, "joined").get_trials()
    assert len(_counted(trials)) == 5 and len(_started(jobs)) == 5
    _rules_once(trials)
    assert all(first.low <= t.params["lr"] <= first.high for t in trials)   # the range the study was started with
    worker = Store(tmp_path / "worker.db").comparisons()
    assert len(worker) == 1 and worker.status.iloc[0] == "done" and "secret" not in worker.info_json.iloc[0]
    assert cli.main(["tune-worker", "nope", "--storage", url]) == 2
    err = capsys.readouterr().err
    assert "study='nope'" in err and "'joined'" in err and "secret" not in err and len(err.strip().splitlines()) == 1


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]   # nothing listens there once the socket is closed


def test_an_unreachable_server_is_one_named_line_without_the_password(jobs, store, capsys, tmp_path, monkeypatch):
    """Named as unreachable at once, not after silent retries (issue 36), and not "not allowed": the URL may be
    right."""
    pytest.importorskip("psycopg")
    from tcbench.cli import app as cli
    from tcbench.store.base import StoreUnreachable

    monkeypatch.setattr(ts, "BACKOFF_S", 0.01)
    port = _closed_port()
    url = f"postgresql://u:secret@127.0.0.1:{port}/db"
    with pytest.raises(StoreUnreachable) as err:
        retune_lr(SPEC, 32, n_trials=2, storage=url, store=store, **KW)
    text = str(err.value)
    assert f"at 127.0.0.1:{port} does not answer" in text, text
    assert "not allowed" not in text and "is its server running" in text
    assert "Connection refused" in text and "secret" not in text + repr(err.value) and "\n" not in text
    monkeypatch.setenv("TCBENCH_DB", str(tmp_path / "cli.db"))
    for args in (["tune-worker", "s", "--storage", url],
                 ["retune-lr", "--seq-len", "32", "--steps", "10", "--lr", "1e-3", "--threads", "1",
                  "--new-batch-size", "32", "--workers", "2", "--storage", url]):
        capsys.readouterr()
        assert cli.main(args) == 2
        out = capsys.readouterr()
        lines = out.err.strip().splitlines()
        assert len(lines) == 1 and f"127.0.0.1:{port}" in lines[0] and "Connection refused" in lines[0], out.err
        assert "secret" not in out.out + out.err and "Traceback" not in out.err
    assert _started(jobs) == [] and store.comparisons().empty


@pytest.mark.parametrize("storage,why", [(None, "a study kept in memory is not shared"),
                                         ("sqlite:///{tmp}/s.db", "optuna#4002")])
def test_several_workers_need_a_shared_server(storage, why, jobs, store, tmp_path):
    storage = storage and storage.replace("{tmp}", str(tmp_path))
    with pytest.raises(SpecError) as err:
        retune_lr(SPEC, 32, n_trials=2, storage=storage, store=store, n_workers=2, **KW)
    assert err.value.field == "storage" and why in str(err.value) and "allowed: a PostgreSQL URL" in str(err.value)
    with pytest.raises(SpecError, match="n_workers=0 is not allowed"):
        retune_lr(SPEC, 32, n_trials=2, store=store, n_workers=0, **KW)
    assert _started(jobs) == [] and store.comparisons().empty
