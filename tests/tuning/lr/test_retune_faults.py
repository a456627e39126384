"""Retune studies survive their workers: heartbeat-stale trials retried, live ones untouched, stops not counted,
storage URLs refused by name before any job, passwords never stored or printed.

The fast tests run the study logic against a fake job; the one integration test SIGKILLs a real study process
mid-trial (tiny BERT, seq 32, eager, dropout off, 1 thread) and resumes the study here.
"""

from __future__ import annotations

import math
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import pytest

import tcbench.tuning.storage as ts
import tcbench as tc
from tcbench import JobSpec, Store
from tcbench.core.results import JobResult, StepRecord
from tcbench.core.spec import SpecError
from tcbench.tuning.lr.retune import retune_lr, rule_lrs

LEGACY = dict(noise=False, budget="equal_steps")   # the study mechanics: the rules first, every trial `steps` long

SPEC = JobSpec(model="bert-base-cased", size="tiny", batch_size=8, seq_len=32, steps=20, warmup_steps=1, lr=1e-3,
               dropout=0.0, threads=1)
LINEAR, SQRT = rule_lrs(1e-3, 8, 32)
ENGINE = {"connect_args": {"timeout": 60}}


def _noise_job(spec):
    """The noise-scale job of the fake: B_noise far above the batches, so the prediction is the square-root rule."""
    from tcbench.tuning.lr.noise import NoiseScale

    res = JobResult(spec=spec, status="ok", run_id=999)
    res.extra.noise_scale = NoiseScale(b_simple=1e5, low=5e4, high=2e5, tr_sigma=1.0, g2=1e-5,
                                          batch_size=spec.batch_size, micro_batch=spec.batch_size // 2, steps=10)
    return res


def _fake_run(calls: list, interrupt_call: int | None = None):
    """A stand-in for tcbench.runner.process.run: a loss curve best near lr 3e-3; honours the stop event like the runner.

    interrupt_call=n: the n-th job raises KeyboardInterrupt at its step 3 (the runner re-raises it, run recorded)."""
    def run(spec, observer=None, stop=None, store=None, comparison_id=None, round=0, job=None, label="", draw=None):
        if spec.noise_micro_batches:   # a prediction's noise-scale job (not counted in calls)
            return _noise_job(spec)
        calls.append(spec)
        notify = observer or (lambda e: None)
        res = JobResult(spec=spec, status="ok", run_id=len(calls))
        rate, loss = 0.25 * math.exp(-math.log10(spec.lr / 3e-3) ** 2), 0.7
        for step in range(spec.steps):
            if stop is not None and stop.is_set():
                res.status, res.error = "interrupted", "stopped by the user; the steps measured so far are kept"
                return res
            if len(calls) == interrupt_call and step == 3:
                raise KeyboardInterrupt
            loss = 0.05 + (loss - 0.05) * (1 - rate)
            rec = StepRecord(step=step, step_s=0.01, samples_s=100.0, tokens_s=1e3, mem_bytes=0, loss=loss)
            res.records.append(rec)
            notify(tc.events.StepMeasured(job="job", backend=spec.backend, label=spec.backend, run_id=res.run_id, record=rec))
        res.extra.eval_loss = loss + 0.02
        return res
    return run


@pytest.fixture
def fake(monkeypatch):
    import tcbench.runner.process as runner

    calls: list = []
    monkeypatch.setattr(runner, "run", _fake_run(calls))
    return calls


@pytest.fixture
def short_grace(monkeypatch):
    """Heartbeat every 1 s, stale after 2 s: the fast tests wait for a dead trial's grace period to pass."""
    monkeypatch.setattr(ts, "HEARTBEAT_INTERVAL_S", 1)
    monkeypatch.setattr(ts, "GRACE_PERIOD_S", 2)


def _counted(trials) -> int:
    """Trials that count toward n_trials, read straight from Optuna's FrozenTrials."""
    return sum(t.state.name in ("COMPLETE", "PRUNED") or (t.state.name == "FAIL" and t.user_attrs.get("status")
                                                          not in (None, "", "interrupted")) for t in trials)


def _other_worker(url: str, name: str, low: float, high: float, beat: bool = True):
    """What another study process does when it starts a trial: pop the next waiting trial, suggest, beat."""
    import optuna

    storage = optuna.storages.RDBStorage(url, engine_kwargs=ENGINE)
    study = optuna.load_study(study_name=name, storage=storage)
    trial = study.ask()
    trial.suggest_float("lr", low, high, log=True)
    if beat:
        storage.set_trial_system_attr(trial._trial_id, ts.BEAT_ATTR, True)
        storage.record_heartbeat(trial._trial_id)
    return storage, study, trial


def test_dead_workers_trial_is_failed_as_stale_and_retried(fake, store, tmp_path, short_grace):
    import optuna

    url = f"sqlite:///{tmp_path / 'study.db'}"
    kw = dict(storage=url, study_name="s", seed=0, pruner="none", store=store)
    first = retune_lr(SPEC, 32, **LEGACY, n_trials=1, **kw)          # the linear rule ran; the sqrt rule is waiting
    _, _, dead = _other_worker(url, "s", first.low, first.high)
    dead.report(0.5, 2)                                    # ... and that worker is killed mid-trial
    res = retune_lr(SPEC, 32, **LEGACY, n_trials=3, **kw)
    trials = optuna.load_study(study_name="s", storage=url).get_trials()
    was = trials[dead.number]
    assert was.state.name == "FAIL" and was.user_attrs["rule"] == "sqrt" and was.params["lr"] == pytest.approx(SQRT)
    again = [t for t in trials if t.system_attrs.get("failed_trial") == dead.number]
    assert len(again) == 1 and again[0].state.name == "COMPLETE", trials
    assert again[0].user_attrs["rule"] == "sqrt" and again[0].params["lr"] == was.params["lr"]
    reason = res.trials.set_index("number").reason[dead.number]
    assert "no heartbeat" in reason and f"retried as trial {again[0].number}" in reason
    assert _counted(trials) == 3 and not [t for t in trials if t.state.name in ("RUNNING", "WAITING")]
    assert len(fake) == 3 and fake[-1].lr == pytest.approx(SQRT)   # linear, one sampled, the sqrt retry
    assert res.sqrt_value is not None and res.grid_steps == 3 * 20


def test_trial_left_running_without_a_heartbeat_is_failed_after_the_grace_period(fake, store, tmp_path, short_grace):
    """A RUNNING trial with no heartbeat at all (an older tcbench, or ask() outside optimize) cannot hang a resume."""
    url = f"sqlite:///{tmp_path / 'study.db'}"
    first = retune_lr(SPEC, 32, **LEGACY, n_trials=3, storage=url, study_name="s", seed=0, store=store)
    _other_worker(url, "s", first.low, first.high, beat=False)
    again = retune_lr(SPEC, 32, **LEGACY, n_trials=6, storage=url, study_name="s", seed=0, store=store)
    t = again.trials
    assert len(t) == 7 and (t.state == "FAIL").sum() == 1, t
    assert "without a heartbeat" in t[t.state == "FAIL"].reason.iloc[0]
    assert list(t.number[:3]) == list(first.trials.number) and list(t.lr[:3]) == list(first.trials.lr)
    assert len(fake) == 3 + 3          # only the missing trials ran; the rules were not run twice
    with pytest.raises(ValueError, match="other settings"):
        retune_lr(SPEC, 64, **LEGACY, n_trials=6, storage=url, study_name="s", store=store)


def test_a_live_trial_of_another_process_survives_a_resume(fake, store, tmp_path):
    """Shipped heartbeat settings: the other process beats; the resume neither fails nor duplicates its trial,
    runs only its own share and waits for the other's last trial."""
    url = f"sqlite:///{tmp_path / 'study.db'}"
    kw = dict(storage=url, study_name="s", seed=0, pruner="none", store=store)
    first = retune_lr(SPEC, 32, **LEGACY, n_trials=1, **kw)
    storage, study, live = _other_worker(url, "s", first.low, first.high)   # the sqrt rule, running elsewhere
    errors: list = []

    def other_process() -> None:
        try:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:       # beat until this process's own trial is done
                storage.record_heartbeat(live._trial_id)
                if sum(t.state.name == "COMPLETE" for t in study.get_trials()) >= 2:
                    break
                time.sleep(0.2)
            live.report(0.3, 10)                     # raises UpdateFinishedTrialError if it was failed
            study.tell(live, 0.1)
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    beat = threading.Thread(target=other_process)
    beat.start()
    try:
        res = retune_lr(SPEC, 32, **LEGACY, n_trials=3, **kw)
    finally:
        beat.join(timeout=400)
    assert not errors, errors
    t = res.trials.set_index("number")
    assert t.state[live.number] == "COMPLETE" and t.value[live.number] == 0.1 and res.sqrt_value == 0.1
    assert (t.rule == "sqrt").sum() == 1 and len(t) == 3 and (t.state == "COMPLETE").all(), t
    assert len(fake) == 2                             # the first call's linear rule and this call's own trial


def test_a_trial_another_process_took_for_dead_is_left_to_it(fake, store, tmp_path):
    """Another process failed and retried this process's running trial (as if its heartbeat had stalled): the
    next trial.report raises UpdateFinishedTrialError there; the job is stopped, and the study goes on."""
    import optuna

    url = f"sqlite:///{tmp_path / 'study.db'}"
    taken: list = []
    steps: dict = {}

    def take_over_at_step_4(event: tc.events.Event) -> None:
        if not isinstance(event, tc.events.StepMeasured):
            return
        steps[event.run_id] = steps.get(event.run_id, 0) + 1
        if event.record.step == 4 and not taken:
            other = optuna.storages.RDBStorage(url, engine_kwargs=ENGINE)
            study = optuna.load_study(study_name="s", storage=other)
            (trial,) = study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
            other.set_trial_state_values(trial._trial_id, optuna.trial.TrialState.FAIL)
            with warnings.catch_warnings():   # "experimental"
                warnings.simplefilter("ignore")
                optuna.storages.RetryHeartbeatStaleTrialCallback()(study, other.get_trial(trial._trial_id))
            taken.append(trial.number)

    res = retune_lr(SPEC, 32, **LEGACY, n_trials=3, storage=url, study_name="s", seed=0, pruner="none", store=store,
                    observer=take_over_at_step_4)
    trials = optuna.load_study(study_name="s", storage=url).get_trials()
    assert taken == [0] and trials[0].state.name == "FAIL" and "status" not in trials[0].user_attrs
    assert steps[1] < 20                              # its job was stopped soon after, not run to the end
    assert _counted(trials) == 3 and len(fake) == 1 + 3 and res.linear_value is not None
    assert [t.system_attrs.get("failed_trial") for t in trials if t.user_attrs.get("rule") == "linear"] == [None, 0]
    assert store.comparison_row(res.comparison_id)["status"] == "done"


def test_a_stopped_trial_does_not_count_and_its_rule_guess_runs_again(fake, store, tmp_path):
    import optuna

    url = f"sqlite:///{tmp_path / 'study.db'}"
    stop = threading.Event()

    def stop_at_step_4(event: tc.events.Event) -> None:
        if isinstance(event, tc.events.StepMeasured) and event.record.step == 4:
            stop.set()

    kw = dict(storage=url, study_name="s", seed=0, pruner="none", store=store)
    first = retune_lr(SPEC, 32, **LEGACY, n_trials=3, stop=stop, observer=stop_at_step_4, **kw)
    t = first.trials.set_index("number")
    assert t.state[0] == "FAIL" and t.status[0] == "interrupted" and "does not count" in t.reason[0], t
    assert len(fake) == 1 and first.grid_steps == 0
    waiting = t[t.state == "WAITING"]
    assert ((waiting.rule == "linear") & (waiting.lr == LINEAR)).sum() == 1, t    # enqueued again at once
    assert store.comparison_row(first.comparison_id)["status"] == "interrupted"
    res = retune_lr(SPEC, 32, **LEGACY, n_trials=3, **kw)
    trials = optuna.load_study(study_name="s", storage=url).get_trials()
    assert _counted(trials) == 3 and len(fake) == 1 + 3
    assert res.linear_value is not None and (res.trials.rule == "linear").sum() == 2
    assert store.comparison_row(res.comparison_id)["status"] == "done"


def test_a_keyboard_interrupt_does_not_count_and_its_rule_guess_runs_again(store, tmp_path, monkeypatch):
    import optuna

    import tcbench.runner.process as runner

    calls: list = []
    monkeypatch.setattr(runner, "run", _fake_run(calls, interrupt_call=1))
    url = f"sqlite:///{tmp_path / 'study.db'}"
    kw = dict(storage=url, study_name="s", seed=0, pruner="none", store=store)
    with pytest.raises(KeyboardInterrupt):
        retune_lr(SPEC, 32, **LEGACY, n_trials=2, **kw)
    trials = optuna.load_study(study_name="s", storage=url).get_trials()
    assert trials[0].state.name == "FAIL" and trials[0].user_attrs["status"] == "interrupted"
    assert "KeyboardInterrupt" in trials[0].user_attrs["reason"]
    assert [(t.user_attrs["rule"], t.state.name) for t in trials[1:]] == [("sqrt", "WAITING"), ("original", "WAITING"),
                                                                          ("linear", "WAITING")]
    assert store.comparisons().status.tolist() == ["interrupted"]
    res = retune_lr(SPEC, 32, **LEGACY, n_trials=2, **kw)
    assert len(calls) == 1 + 2 and res.sqrt_value is not None and res.value_of("original") is not None
    assert _counted(optuna.load_study(study_name="s", storage=url).get_trials()) == 2


def test_storage_store_and_in_memory_still_work(fake, store):
    res = retune_lr(SPEC, 32, **LEGACY, n_trials=2, storage="store", study_name="s", store=store)
    assert res.storage == f"sqlite:///{store.path}"
    again = retune_lr(SPEC, 32, **LEGACY, n_trials=3, storage="store", study_name="s", store=store)
    assert len(again.trials) == 3 and len(fake) == 3
    mem = retune_lr(SPEC, 32, **LEGACY, n_trials=2, storage=None, pruner="none", store=store)
    assert mem.storage is None and len(mem.trials[mem.trials.state == "COMPLETE"]) == 2


BAD_URLS = [
    ("mysql://u:secret@127.0.0.1:1/db", "is not installed"),   # the driver missing (an unreachable server is tried
    # again and then named unreachable, not "not allowed": tests/tuning/lr/test_pg_studies.py)
    ("foo://u:secret@host/db", "knows no database kind 'foo'"),
    ("nonsense", "not a database URL"),
    ("sqlite:////nonexistent/dir/x.db", "the folder '/nonexistent/dir' does not exist"),
    ("sqlite:///file:/nonexistent/dir/x.db?uri=true&password=secret", "does not exist"),
    ("sqlite:///:memory:", "use storage=None"),
    ("sqlite:///{tmp}", "is a folder"),
    ("sqlite:///{tmp}/junk.db", "cannot be opened"),
]


@pytest.mark.parametrize("url,why", BAD_URLS)
def test_bad_storage_url_is_a_named_error_before_anything_starts(url, why, fake, store, tmp_path):
    (tmp_path / "junk.db").write_text("not a database, but a file with text in it" * 100)
    url = url.replace("{tmp}", str(tmp_path))
    with pytest.raises(SpecError) as err:
        retune_lr(SPEC, 32, **LEGACY, n_trials=2, storage=url, store=store)
    exc, text = err.value, str(err.value)
    assert isinstance(exc, ValueError) and exc.field == "storage" and text.startswith("storage=")
    assert why in text and "allowed: None (in memory), 'store'" in text and "\n" not in text, text
    assert "secret" not in text and "secret" not in repr(exc) and "secret" not in str(exc.value)
    assert ("***" in text) == ("secret" in url), text
    assert fake == [] and store.comparisons().empty and store.runs().empty   # nothing started, nothing stored


def test_the_password_is_never_stored_or_printed(fake, store, tmp_path, capsys, monkeypatch):
    from tcbench.cli import app as cli

    url = f"sqlite:///file:{tmp_path / 'study.db'}?uri=true&password=secret"   # SQLite ignores the password
    res = retune_lr(SPEC, 32, **LEGACY, n_trials=2, storage=url, study_name="s", store=store)
    assert res.storage == f"sqlite:///file:{tmp_path / 'study.db'}?uri=true&password=***"
    assert "secret" not in repr(res) and "secret" not in str(res.summary())
    info = store.comparisons().info_json.iloc[0]
    assert "password=***" in info and "secret" not in info
    assert b"secret" not in (tmp_path / "study.db").read_bytes()
    cli_store = tmp_path / "cli.db"
    monkeypatch.setenv("TCBENCH_DB", str(cli_store))
    capsys.readouterr()
    args = ["retune-lr", "--seq-len", "32", "--steps", "20", "--warmup", "1", "--lr", "1e-3", "--dropout", "0",
            "--threads", "1", "--new-batch-size", "32", "--trials", "3", "--study-name", "c", "--storage"]
    assert cli.main(args + [url]) == 0
    out = capsys.readouterr()
    assert "password=***" in out.out and "secret" not in out.out + out.err
    assert "secret" not in Store(cli_store).comparisons().info_json.str.cat()
    assert cli.main(args + ["postgresql://u:secret@127.0.0.1:1/db"]) == 2
    out = capsys.readouterr()
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tcbench: storage='postgresql://u:***@127.0.0.1:1/db'"), out.err
    assert "secret" not in out.out + out.err and "Traceback" not in out.err
    assert len(fake) == 2 + 3          # the API's two trials, the CLI's three; none for the refused URL


# -- a real study process SIGKILLed mid-trial (eager, tiny BERT, seq 32, dropout off, 1 thread) ---------------
TASK = JobSpec(model="bert-base-cased", size="tiny", batch_size=8, seq_len=32, steps=30, warmup_steps=1, lr=1e-3,
               seed=0, dropout=0.0, threads=1)
HUGE_LR = 1e4   # AdamW's decoupled weight decay multiplies weights by (1 - lr·0.01) = -99 per step: overflow, NaN


def _proc(pid: int | str) -> tuple[list[str], int]:
    """(command line, parent pid) of a process; OSError when it is gone."""
    d = Path("/proc") / str(pid)
    args = [a.decode(errors="replace") for a in (d / "cmdline").read_bytes().split(b"\0") if a]
    return args, int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])


def _workers(parent: int | None = None, folder: str | None = None) -> dict[int, str]:
    """Job processes: pid -> run folder. A spawned job is ``python -m tcbench.job.worker ... <run folder>``, a child
    of the runner; a forked one is a child of the runner's warm launcher (``tcbench.job.zygote``), its run folder in
    its environment."""
    found = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            args, ppid = _proc(d.name)
            if "tcbench.job.worker" in args:
                owner, run_dir = ppid, args[-1]
            elif "tcbench.job.zygote" in args and "tcbench.job.zygote" in _proc(ppid)[0]:
                owner = _proc(ppid)[1]
                env = dict(v.split(b"=", 1) for v in (d / "environ").read_bytes().split(b"\0") if b"=" in v)
                run_dir = env.get(b"TCBENCH_RUN_DIR", b"").decode(errors="replace")
            else:
                continue
        except (OSError, IndexError, ValueError):
            continue   # gone meanwhile, or a zombie
        if (parent is None or owner == parent) and (folder is None or folder in run_dir):
            found[int(d.name)] = run_dir
    return found


def _trial_numbers(path: Path, state: str) -> list[int]:
    """The numbers of the study's trials in `state`, read-only and cheap enough to poll every few milliseconds."""
    if not path.exists():
        return []
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            return [n for (n,) in con.execute("SELECT number FROM trials WHERE state=? ORDER BY number", (state,))]
        finally:
            con.close()
    except sqlite3.Error:   # tables not created yet, or locked for a moment
        return []


def _kill_mid_trial(proc: subprocess.Popen, db: Path, deadline: float) -> tuple[int, str]:
    """After >= 1 finished trial, SIGKILL the study process (only it) while a trial and its job run.

    A later trial of this study lasts about half a second (a forked eager job pruned at step 5), so the watch polls
    every 20 ms with two cheap reads (the study's table, read-only; /proc) instead of loading the study each time."""
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
        if not _trial_numbers(db, "COMPLETE"):   # read-only until then: never races the child's schema setup
            continue
        running = _trial_numbers(db, "RUNNING")
        jobs = _workers(parent=proc.pid) if running else {}
        if running and jobs:
            os.kill(proc.pid, signal.SIGKILL)
            return running[0], next(iter(jobs.values()))
    raise AssertionError("no trial was running with its job before the deadline")


@pytest.mark.integration
def test_study_whose_worker_is_sigkilled_mid_trial_retries_it_and_leaves_nothing_behind(tmp_path, short_grace):
    """4 trials of 16 steps, TPE seed 0, with a huge extra guess that diverges (FAIL, the study goes on).

    The study process is SIGKILLed mid-trial; its job dies with it. The resume here fails the dead trial once its
    heartbeat is older than the grace period (2 s in this process instead of the shipped 60 s: the rule is the
    same, the suite waits less), retries it (same lr and rule), and ends with 4 counted trials."""
    import optuna

    db = tmp_path / "study.db"
    url = f"sqlite:///{db}"
    kw = dict(n_trials=4, storage=url, study_name="killed", steps=16, eval_batches=2, seed=0, extra_lrs=[HUGE_LR])
    script = textwrap.dedent(f"""
        from tcbench import JobSpec, Store
        from tcbench.tuning.lr.retune import retune_lr
        retune_lr(JobSpec.from_json({TASK.to_json()!r}), 16, noise=False, budget='equal_steps', store=Store({str(tmp_path / 't.db')!r}), **{kw!r})
    """)
    log = open(tmp_path / "child.log", "w")
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True, stdout=log, stderr=log)
    try:
        killed, run_dir = _kill_mid_trial(proc, db, time.monotonic() + 300)
    except AssertionError:
        raise AssertionError("child log: " + (tmp_path / "child.log").read_text()[-3000:]) from None
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        log.close()
    deadline = time.monotonic() + 120
    while _workers(folder=run_dir) and time.monotonic() < deadline:   # PR_SET_PDEATHSIG: the job dies too
        time.sleep(0.5)
    assert not _workers(folder=run_dir), f"the killed study's job outlived it: {_workers(folder=run_dir)}"
    before = optuna.load_study(study_name="killed", storage=url).get_trials()
    assert before[killed].state.name == "RUNNING"                   # killed mid-trial, left RUNNING
    done = {(t.number, t.params["lr"], t.value) for t in before if t.state.name == "COMPLETE"}
    assert 1 <= len(done) < 4

    res = retune_lr(TASK, 16, **LEGACY, store=Store(tmp_path / "t2.db"), **kw)
    trials = optuna.load_study(study_name="killed", storage=url).get_trials()
    dead = trials[killed]
    assert dead.state.name == "FAIL" and not dead.user_attrs.get("status"), dead
    again = [t for t in trials if t.system_attrs.get("failed_trial") == killed]
    assert len(again) == 1 and again[0].params["lr"] == dead.params["lr"], trials
    assert again[0].user_attrs.get("rule") == dead.user_attrs.get("rule")
    assert again[0].state.name in ("COMPLETE", "PRUNED") or again[0].user_attrs.get("status")   # it ran and counts
    t = res.trials
    assert f"retried as trial {again[0].number}" in t.set_index("number").reason[killed]
    wrongly_failed = [x.number for x in trials if x.state.name == "FAIL" and not x.user_attrs.get("status")
                      and x.number != killed]
    assert not wrongly_failed and not [x for x in trials if x.state.name == "RUNNING"], t
    assert _counted(trials) == 4                                     # only the missing trials ran
    assert done <= {(r.number, r.lr, r.value) for r in t.itertuples() if r.state == "COMPLETE"}
    huge = t[(t.rule == "extra0") & (t.status == "diverged")]
    assert len(huge) == 1 and huge.state.iloc[0] == "FAIL" and "loss became" in huge.reason.iloc[0], t
    assert t.number.max() > huge.number.iloc[0]                     # the study went on after the NaN trial
    assert res.linear_value is not None
    assert not _workers(parent=os.getpid()) and not _workers(folder=run_dir)
