"""Several worker processes on one retune study: ``retune_lr(..., n_workers=N)`` and ``tcbench tune-worker``.

A study on a database server (PostgreSQL) is shared by every process that opens its URL. Each worker runs the
study's loop (``tcbench.tuning.lr.study.optimize``): count the trials that count, start the next one while some are
missing, wait while the missing ones run elsewhere. What keeps N workers from doing too much:

- the rule and prediction trials are enqueued once, by the ``retune_lr`` call that creates or resumes the study
  (under the claim below); workers only take waiting trials, and PostgreSQL hands each to one of them (the row is
  locked ``FOR UPDATE`` while its state changes to RUNNING);
- the claim: a PostgreSQL advisory lock on the study, held from counting the trials until the new trial is
  RUNNING, so N workers never start more trials than are missing.

A dead worker's trial is failed and retried by the heartbeat (``tcbench.tuning.storage``). Several workers on
SQLite are refused: SQLite has no row locks, and Optuna can hand one waiting trial to two processes there
(optuna#4002), so a rule trial could run twice. An in-memory study is not shared at all.

The ``n_workers`` local workers are forked from the calling process (they inherit its job runner and store); the caller
waits for them and sets their common stop event when its own ``stop`` is set. Their job and trial events come back
through a pipe per worker (no lock shared with a process that may be killed) and reach the caller's observer in the
caller's process, as they happen (a notebook's live figure, the CLI's progress lines); an event that cannot be pickled
(a job built by a local function) is not shown. A worker runs torch (Optuna's GPSampler) on one thread: a thread pool
the caller used before the fork does not exist in the child, and waiting for it would hang the worker (as PyTorch's
DataLoader workers do, for the same reason). The GPSampler's autograd cannot run in a child at all when the caller's
autograd engine started device threads (a GPU backward, or with torch 2.14 a backward after any torch.compile in the
caller, GPU or not): ``check_fork`` refuses that before any worker starts, with what to do instead.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from typing import Any, Callable

from tcbench.core.events import Event, Observer
from tcbench.core.spec import JobSpec, SpecError
from tcbench.runner.session import comparison_session
from tcbench.core.errors import first_line
from tcbench.job.process_tools import thread_names
from tcbench.store.postgres import advisory_lock, advisory_unlock, mask
from tcbench.tuning.storage import heartbeat_on, open_storage
from tcbench.tuning.lr.study import (BudgetedHalving, StudyContext, counts, make_pruner, make_sampler, min_resource,
                                  objective, optimize, prune_until, study_id, trials_frame)
from tcbench.store.api import Store

SETTINGS_ATTR = "tcbench:worker"   # study user attr: what a joining worker needs beyond retune's stored settings
LOCK_SPACE = 0x7463                # the advisory lock's first key ("tc"); the second is the study's id
SHARED = "a PostgreSQL URL (postgresql://user@host:port/db): every worker opens it"


def is_postgres(storage: Any) -> bool:
    """Is this an Optuna RDB storage on PostgreSQL?"""
    engine = getattr(storage, "engine", None)
    return engine is not None and engine.dialect.name == "postgresql"


class Claim:
    """One worker at a time counts the study's trials and starts the next one (see the module docstring).

    A context manager around the count; ``release()`` (idempotent) ends it early, as soon as the new trial is
    RUNNING. On anything but PostgreSQL it does nothing (one process: nothing to share)."""

    def __init__(self, storage: Any = None, study_id: int = 0) -> None:
        self.engine = storage.engine if is_postgres(storage) else None
        self.key, self.con, self.held = int(study_id), None, False

    def _session(self) -> Any:
        if self.con is None:   # its own session: the lock belongs to it and ends with it if the process dies
            self.con = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        return self.con

    def __enter__(self) -> "Claim":
        if self.engine is not None and not self.held:
            advisory_lock(self._session(), LOCK_SPACE, self.key)
            self.held = True
        return self

    def release(self) -> None:
        if self.held:
            self.held = False
            advisory_unlock(self._session(), LOCK_SPACE, self.key)

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def close(self) -> None:
        if self.con is not None:
            self.con.close()
            self.con, self.held = None, False


def check_workers(n_workers: Any, storage: Any, backend: Any, shown: str | None, what: str = "n_workers > 1") -> None:
    """Refuse what cannot share a study between processes (before any job starts). Raises SpecError."""
    if isinstance(n_workers, bool) or not isinstance(n_workers, int) or n_workers < 1:
        raise SpecError("n_workers", n_workers, "a whole number >= 1",
                        f"n_workers={n_workers!r} is not allowed; allowed: a whole number >= 1")
    if n_workers == 1 and what == "n_workers > 1":
        return
    if backend is None or not isinstance(storage, str):
        why = "a study kept in memory is not shared" if backend is None else "a storage object is not a URL"
        raise SpecError("storage", shown, SHARED, f"storage={shown!r} is not allowed with {what}: {why}; "
                                                  f"allowed: {SHARED}")
    if backend.engine.dialect.name == "sqlite":
        raise SpecError("storage", shown, SHARED, f"storage={shown!r} is not allowed with {what}: on SQLite several "
                        "processes can take the same waiting trial and run a rule guess twice (optuna#4002); "
                        f"allowed: {SHARED}")
    if not is_postgres(backend):
        raise SpecError("storage", shown, SHARED, f"storage={shown!r} is not allowed with {what}: tcbench shares a "
                        f"study between workers through PostgreSQL's advisory locks; allowed: {SHARED}")


def remember(study: Any, **settings: Any) -> None:
    """Store what ``tune_worker`` needs to join the study (n_trials, sampler, pruner, seed, report_every)."""
    if study.user_attrs.get(SETTINGS_ATTR) != settings:
        study.set_user_attr(SETTINGS_ATTR, settings)


def autograd_fork_problem() -> str:
    """Why torch's autograd cannot run in a process forked from this one ("" when it can, or where it cannot be told:
    no ``/proc``). Its engine has started device threads here (``pt_autograd_<n>``), so a forked child refuses every
    backward ("Unable to handle autograd's threading in combination with fork-based multiprocessing"). They start at
    the process's first backward if a device then counts: a GPU, or with torch 2.14 (not 2.9) the stand-in CUDA device
    that torch.compile's fake tensors set where there is none."""
    try:
        names = thread_names()
    except OSError:
        return ""
    n = sum(name.startswith("pt_autograd_") for name in names)
    return (f"torch's autograd engine runs {n} device threads in this process (it ran a backward after torch.compile "
            "or on a GPU), and autograd refuses to run in a process forked from it") if n else ""


def check_fork(sampler: Any, n_workers: int) -> None:
    """Refuse forked workers that would need autograd where it cannot run (``autograd_fork_problem``): Optuna's
    GPSampler (``sampler``: it, or its name "gp") fits its Gaussian process with autograd in each worker. Raises
    SpecError naming ``n_workers``."""
    import optuna

    problem = autograd_fork_problem() if n_workers > 1 else ""
    if problem and (sampler == "gp" or isinstance(sampler, optuna.samplers.GPSampler)):
        allowed = ("n_workers=1, sampler='tpe', or the study run from a process that has not compiled and trained "
                   "(a fresh kernel, `tcbench retune`, or `tcbench tune-worker` processes beside it)")
        raise SpecError("n_workers", n_workers, allowed, f"n_workers={n_workers} with sampler='gp' is not allowed "
                        f"here: {problem}, and the GPSampler needs it in each forked worker; allowed: {allowed}")


def run_workers(study: Any, ctx: StudyContext, n_trials: int, n_workers: int, storage: Any,
                make_objective: Callable[[StudyContext], Callable]) -> None:
    """Run the study's loop here (``n_workers == 1``) or in ``n_workers`` forked processes, and wait for them.

    ``storage``: the URL each worker opens again (no database connection crosses a fork). Raises RuntimeError
    when workers failed and the study still misses trials."""
    import multiprocessing

    if n_workers == 1:
        return optimize(study, make_objective(ctx), ctx, n_trials)
    check_fork(study.sampler, n_workers)
    mp = multiprocessing.get_context("fork")   # the workers inherit the job runner (and a test's fakes)
    stop, errors = mp.Event(), mp.SimpleQueue()
    pipes = [mp.Pipe(duplex=False) for _ in range(n_workers)]   # (the caller's end, the worker's end)
    ctx.claim.close()
    ctx.storage.engine.dispose()   # the parent's pooled connections are not the children's to use
    procs = [mp.Process(target=_worker, name=f"tcbench-tune-worker-{i}",
                        args=(i, storage, ctx, study.study_name, study.sampler, study.pruner, make_objective,
                              n_trials, stop, errors, pipes[i][1],
                              [c for j, pair in enumerate(pipes) for c in pair if c is not pipes[i][1]]))
             for i in range(n_workers)]
    for p in procs:
        p.start()
    readers = [r for r, w in pipes]
    for _, w in pipes:
        w.close()   # the workers hold theirs: a reader sees EOF once its worker has ended
    _wait_for(procs, readers, stop, ctx.stop, ctx.observer)
    failed = []
    while not errors.empty():
        failed.append(errors.get())
    failed += [f"worker {i} (pid {p.pid}) was killed by signal {-p.exitcode}" for i, p in enumerate(procs)
               if p.exitcode is not None and p.exitcode < 0]
    done = sum(counts(t) for t in study.get_trials(deepcopy=False))
    if failed and done < n_trials and not stop.is_set():
        raise RuntimeError(f"the study {study.study_name!r} has {done} of {n_trials} trials; its workers ended: "
                           + "; ".join(failed))


def _wait_for(procs: list, readers: list, stop: Any, user: Any, observer: Observer) -> None:
    """Wait for the workers, their events to ``observer`` as they come; the user's stop (or a KeyboardInterrupt
    here) sets theirs (``stop``)."""
    from multiprocessing.connection import wait

    def show(ready: list, deliver: bool = True) -> None:   # the workers' events, to the caller's observer here
        for r in ready:
            while True:
                try:
                    if not r.poll():
                        break
                    event = r.recv()
                except Exception:   # EOF: the worker ended (perhaps mid-write, killed)
                    readers.remove(r)
                    r.close()
                    break
                if deliver:
                    observer(event)

    try:
        pending = {p.sentinel: p for p in procs}
        while pending:
            ready = wait(list(pending) + readers, timeout=1.0)   # a worker's events or its end, or 1 s for `stop`
            show([r for r in ready if r in readers])
            for s in ready:
                if s in pending:
                    pending.pop(s).join()
            if user is not None and user.is_set():
                stop.set()
        show(list(readers))
    except BaseException:   # KeyboardInterrupt here: the workers stop their trials (not counted) and end
        stop.set()
        deadline = time.monotonic() + 60
        while any(p.is_alive() for p in procs) and time.monotonic() < deadline:
            show(list(readers), deliver=False)   # a worker blocked on a full pipe could not end: dropped
            wait([p.sentinel for p in procs if p.is_alive()] + readers, timeout=0.2)
        for p in procs:
            if p.exitcode is None:
                p.kill()
            p.join()
        raise


def _forward(conn: Any) -> Observer:
    """A worker's observer: each event to the caller (pickled first, so one that cannot be is dropped here)."""
    from multiprocessing.reduction import ForkingPickler

    def send(event: Event) -> None:
        try:
            data = ForkingPickler.dumps(event)
        except Exception:   # not picklable (a job built by a local function): not shown live
            return
        conn.send_bytes(data)
    return send


def _worker(i: int, storage: str, ctx: StudyContext, study_name: str, sampler: Any, pruner: Any,
            make_objective: Callable[[StudyContext], Callable], n_trials: int, stop: Any, errors: Any, events: Any,
            not_mine: list) -> None:
    """One forked worker: its own connections, the shared stop event, the study's loop; events to the caller.

    ``not_mine``: the other pipe ends this fork inherited, closed here, so a worker that dies mid-write leaves its
    pipe at EOF for the caller (and not half a message that nobody will finish)."""
    import sys

    import optuna

    for conn in not_mine:
        conn.close()
    if "torch" in sys.modules:   # the caller ran torch's thread pool (Optuna's GPSampler, a notebook's own work):
        sys.modules["torch"].set_num_threads(1)   # it does not survive a fork; a pool used here would hang forever
    try:
        backend, _ = open_storage(storage, ctx.store.url())
        if i:   # worker 0 keeps the seed; the others draw their own learning rates
            sampler.reseed_rng()
        if isinstance(pruner, BudgetedHalving):   # it writes its decisions through this worker's own connections
            pruner = BudgetedHalving(pruner.rung, pruner.n_trials, backend)
        study = optuna.load_study(study_name=study_name, storage=backend, sampler=sampler, pruner=pruner)
        mine = dataclasses.replace(ctx, storage=backend, stop=stop, claim=Claim(backend, study_id(backend, study)),
                                   lost=threading.Event(), observer=_forward(events))
        optimize(study, make_objective(mine), mine, n_trials)
    except BaseException as exc:   # one line for the parent; the password masked
        errors.put(f"worker {i} (pid {os.getpid()}): {mask(first_line(exc))}")
        raise SystemExit(1) from None


def tune_worker(study_name: str, storage: str, n_workers: int = 1, store: Any = None,
                observer: Observer | None = None, stop: Any = None) -> Any:
    """Join a retune study that ``retune_lr`` created on a PostgreSQL ``storage``: run its trials (here, in
    ``n_workers`` processes) until it holds its ``n_trials``. The job, the batch, the range, the sampler and the
    pruner come from the study; each trial's job is a run of this machine's store. Returns the study's trials
    (``study.trials_frame``). Raises SpecError for a storage or study that cannot be joined."""
    import optuna

    from tcbench.runner.preflight import check as preflight

    store = store or Store()
    backend, shown = open_storage(storage, store.url())
    check_workers(n_workers, storage, backend, shown, what="tune-worker")
    attrs, settings = _joinable(backend, shown, study_name)
    spec, steps, n_trials = preflight(JobSpec.from_json(attrs["spec"])), int(attrs["steps"]), settings["n_trials"]
    sampler = make_sampler(settings["sampler"], settings["seed"], n_trials)
    sampler.reseed_rng()   # its own draws, not the starting process's
    study = optuna.load_study(study_name=study_name, storage=backend, sampler=sampler,
                              pruner=make_pruner(settings["pruner"], steps, n_trials, backend))
    info = dict(study_name=study_name, storage=shown, worker=True, steps=steps, new_batch_size=attrs["new_batch_size"],
                low=attrs["low"], high=attrs["high"], budget=attrs["budget"])
    with comparison_session(store, "retune", spec, [spec.backend], n_trials, info, stop,
                            error_status="interrupted") as session:
        session.finish_info.update(study_name=study_name, storage=shown, worker=True)
        claim = Claim(backend, study_id(backend, study))
        ctx = StudyContext(low=attrs["low"], high=attrs["high"], new_batch=attrs["new_batch_size"], steps=steps,
                           eval_batches=attrs["eval_batches"], report_every=settings["report_every"],
                           first_rung=min_resource(steps), last_prune_step=prune_until(settings["pruner"], steps),
                           store=store, comparison_id=session.comparison_id, observer=observer or (lambda e: None),
                           storage=backend, heartbeat=heartbeat_on(backend), stop=stop, claim=claim)
        try:
            run_workers(study, ctx, n_trials, n_workers, storage, lambda c: objective(spec, c))
        finally:
            claim.close()
    return trials_frame(study)[0]


def _joinable(backend: Any, shown: str | None, study_name: str) -> tuple[dict, dict]:
    """(the study's user attrs, the settings ``retune_lr`` stored for workers); SpecError when it cannot be joined."""
    import optuna

    names = [s.study_name for s in optuna.get_all_study_summaries(backend, include_best_trial=False)]
    if study_name not in names:
        allowed = f"a study in {shown}: {', '.join(map(repr, names[:20])) or 'there is none'}"
        raise SpecError("study", study_name, allowed, f"study={study_name!r} is not allowed: {shown} holds no such "
                                                      f"study; allowed: {allowed}")
    attrs = optuna.load_study(study_name=study_name, storage=backend).user_attrs
    settings = attrs.get(SETTINGS_ATTR) or {}
    if not settings or not attrs.get("spec") or settings.get("sampler") is None or settings.get("pruner") is None:
        why = ("it was started with a sampler or pruner object (join it from Python with retune_lr's n_workers)"
               if settings else "it was not started by this tcbench's retune_lr (its settings are not stored)")
        raise SpecError("study", study_name, "a study started by retune_lr with a named sampler and pruner",
                        f"study={study_name!r} cannot be joined: {why}")
    return attrs, settings
