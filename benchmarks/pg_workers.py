"""Trials per minute with 1, 2 and 3 local workers on one retune study in PostgreSQL, and the time to recover a
dead worker's trial.

By default the job runner is replaced by a fake job that sleeps ``--job-s`` seconds and reports ``--steps`` losses
(no training: what is measured is the study's own cost — Optuna's sampler, the claim, heartbeats, the database —
and how well the workers overlap). ``--real``: every trial is a real tiny BERT job (1 thread, ``--real-steps``
steps). ``--kill``: two workers on fake jobs of ``--job-s`` seconds; the first job to reach its third step SIGKILLs
its own worker; printed: the seconds from that kill to the start of the retried trial (the heartbeat's grace period
decides it: ``tcbench.tuning.storage.GRACE_PERIOD_S``). Starts its own server as tests/pgserver.py does (Debian's
postgresql, as root or the postgres user). Prints one JSON row per measurement, with the duplicated and lost trials
(goal: 0).

    .venv/bin/python benchmarks/pg_workers.py [--trials 24] [--job-s 0.5] [--workers 1,2,3]
    .venv/bin/python benchmarks/pg_workers.py --real --trials 9
    .venv/bin/python benchmarks/pg_workers.py --kill --job-s 20 --trials 4
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def _fake(job_s: float, kill_marker: Path | None = None):
    import os
    import signal

    from tcbench.core.results import JobResult, StepRecord

    def run(spec, observer=None, stop=None, store=None, comparison_id=None, round=0, job=None, label=""):
        res = JobResult(spec=spec, status="ok", run_id=round)
        for step in range(spec.steps):
            if kill_marker is not None and step == 2:
                try:   # the first job here records the time and kills its own worker (as a lost machine would)
                    fd = os.open(kill_marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                    os.write(fd, str(time.time()).encode())
                    os.close(fd)
                    os.kill(os.getpid(), signal.SIGKILL)
                except FileExistsError:
                    pass
            time.sleep(job_s / spec.steps)
            rec = StepRecord(step=step, step_s=job_s / spec.steps, samples_s=1.0, tokens_s=1.0, mem_bytes=0,
                             loss=1.0 / (1 + step * spec.lr * 100))
            res.records.append(rec)
            (observer or (lambda e: None))({"type": "step", "record": rec, "run_id": round})
        res.extra.eval_loss = res.records[-1].loss
        return res
    return run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=24)
    ap.add_argument("--job-s", type=float, default=0.5, help="each fake job's duration (sleeps: no CPU)")
    ap.add_argument("--workers", default="1,2,3")
    ap.add_argument("--real", action="store_true", help="real tiny BERT jobs instead of the fake")
    ap.add_argument("--real-steps", type=int, default=20)
    ap.add_argument("--kill", action="store_true", help="measure the recovery of a SIGKILLed worker's trial")
    a = ap.parse_args()

    import optuna

    import tcbench.runner.process as runner
    from pgserver import missing, server
    from tcbench import JobSpec, Store
    from tcbench.tuning.lr.retune import retune_lr

    if missing():
        print(f"skipped: {missing()}")
        return 1
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    spec = JobSpec(model="bert-base-cased", size="tiny", batch_size=8, seq_len=32, steps=10, warmup_steps=1,
                   lr=1e-3, threads=1)
    if a.real:
        spec = spec.replace(steps=a.real_steps)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        marker = Path(tmp) / "killed" if a.kill else None
        if not a.real:
            runner.run = _fake(a.job_s, marker)   # forked workers inherit it
        gen = server()
        url = next(gen)
        try:
            if a.kill:
                retune_lr(spec, 32, n_trials=a.trials, storage=url, study_name="bench-kill", noise=False,
                          budget="equal_steps", pruner="none", store=Store(Path(tmp) / "kill.db"), n_workers=2)
                killed_at = float(marker.read_text())
                trials = optuna.load_study(study_name="bench-kill", storage=url.replace(
                    "postgresql://", "postgresql+psycopg2://")).get_trials()
                dead = [t for t in trials if t.state.name == "FAIL"]
                again = [t for t in trials if dead and t.system_attrs.get("failed_trial") == dead[0].number]
                rows.append(dict(measure="recovery", killed_trial=dead[0].number if dead else None,
                                 retried_as=again[0].number if again else None,
                                 recovered_after_s=round(again[0].datetime_start.timestamp() - killed_at, 1)
                                 if again else None, complete=sum(t.state.name == "COMPLETE" for t in trials),
                                 n_trials=a.trials))
                print(json.dumps(rows[-1]), flush=True)
                return 0
            for n in [int(x) for x in a.workers.split(",")]:
                t0 = time.monotonic()
                retune_lr(spec, 32, n_trials=a.trials, storage=url, study_name=f"bench-{n}", noise=False,
                          budget="equal_steps", pruner="none", store=Store(Path(tmp) / f"s{n}.db"), n_workers=n)
                wall = time.monotonic() - t0
                trials = optuna.load_study(study_name=f"bench-{n}", storage=url.replace(
                    "postgresql://", "postgresql+psycopg2://")).get_trials()
                done = [t for t in trials if t.state.name == "COMPLETE"]
                rows.append(dict(workers=n, trials=len(done), wall_s=round(wall, 2),
                                 trials_per_min=round(60 * len(done) / wall, 1),
                                 job="real tiny BERT, %d steps" % a.real_steps if a.real else f"fake {a.job_s} s",
                                 extra_trials=max(0, len(trials) - a.trials), lost=max(0, a.trials - len(done))))
                print(json.dumps(rows[-1]), flush=True)
        finally:
            gen.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
