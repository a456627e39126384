"""What every round's own launcher costs, and whether starting the next one disturbs the measured job.

    .venv/bin/python benchmarks/launchers.py              # ~8 min on 2 cores
    .venv/bin/python benchmarks/launchers.py --launchers 4 --jobs 4 --pairs 6

1. Luck per launcher: ``--launchers`` launchers (each a Python process of its own), ``--jobs`` eager jobs of the demo's
   spec forked from each; and the same with every job spawned (``TCBENCH_LAUNCHER=spawn``). Reported: the spread of
   the eager median step within a launcher and between launchers (one-way ANOVA on log step times, F test), so how
   much of a job's luck its launcher decides (the intraclass correlation).
2. Start cost: how long a launcher takes to import (``tcbench.job.zygote.preload`` in a new process), and what a
   job costs start to end when forked and when spawned.
3. Disturbance: eager jobs forked from one launcher, alternately quiet and beside a launcher importing on the CPU the
   job leaves free (as the next round's launcher does): the paired ratio of their median steps and how many were
   flagged noisy.

Writes benchmarks/launchers.md and benchmarks/launchers.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import tcbench as tc  # noqa: E402

DEMO = tc.JobSpec(model="gpt2", size="tiny", batch_size=8, seq_len=64, steps=40, warmup_steps=5, lr=2e-3, threads=1)

JOBS = r'''
import json, sys, time
import tcbench as tc
spec, n = tc.JobSpec.from_json(sys.argv[1]), int(sys.argv[2])
store = tc.Store(sys.argv[3])
out = []
for _ in range(n):
    t0 = time.monotonic()
    r = tc.run(spec, store=store)
    out.append(dict(ms=r.median_step_s * 1e3, seconds=time.monotonic() - t0, launcher=r.extra.launcher_pid,
                    noisy=r.noisy))
print("RESULT " + json.dumps(out))
'''

IMPORTER = "from tcbench.job.zygote import preload; preload()"


def _jobs(n: int, env: dict) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([sys.executable, "-c", JOBS, DEMO.to_json(), str(n), str(Path(tmp) / "l.db")],
                             capture_output=True, text=True, env=env)
    lines = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
    if out.returncode or not lines:
        raise SystemExit(f"jobs failed: {out.stderr[-1500:]}")
    return json.loads(lines[-1].removeprefix("RESULT "))


def anova(groups: list[list[float]]) -> dict:
    """One-way ANOVA of log step times by launcher: within and between sd, ICC, F and its p-value."""
    from scipy import stats

    logs = [[math.log(x) for x in g] for g in groups]
    k, n = len(logs), min(len(g) for g in logs)
    logs = [g[:n] for g in logs]
    grand = statistics.fmean(x for g in logs for x in g)
    msb = n * sum((statistics.fmean(g) - grand) ** 2 for g in logs) / (k - 1)
    msw = sum(sum((x - statistics.fmean(g)) ** 2 for x in g) for g in logs) / (k * (n - 1))
    between = max(0.0, (msb - msw) / n)
    return dict(groups=k, per_group=n, sd_within=math.sqrt(msw), sd_between=math.sqrt(between),
                icc=between / (between + msw), f=msb / msw, p=float(stats.f.sf(msb / msw, k - 1, k * (n - 1))))


def luck(launchers: int, jobs: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TCBENCH_LAUNCHER"}
    forked = [_jobs(jobs, env) for _ in range(launchers)]
    spawned = [_jobs(jobs, {**env, "TCBENCH_LAUNCHER": "spawn"}) for _ in range(max(2, launchers // 2))]
    for name, groups in (("forked", forked), ("spawned", spawned)):
        print(name, [[round(j["ms"], 1) for j in g] for g in groups], flush=True)
    # the first forked job of each process waits for its launcher's imports: its start-to-end time is the launcher's
    return dict(forked=forked, spawned=spawned,
                forked_anova=anova([[j["ms"] for j in g[1:]] for g in forked]),
                spawned_anova=anova([[j["ms"] for j in g] for g in spawned]),
                forked_job_s=statistics.median(j["seconds"] for g in forked for j in g[1:]),
                first_job_s=statistics.median(g[0]["seconds"] for g in forked),
                spawned_job_s=statistics.median(j["seconds"] for g in spawned for j in g))


def import_seconds(n: int = 3) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-c", IMPORTER], check=True, capture_output=True, cwd=HERE.parent)
        out.append(time.monotonic() - t0)
    return out


def disturbance(pairs: int) -> dict:
    """Quiet and beside an importing launcher on the free CPU, alternating, jobs forked from one launcher."""
    from tcbench.runner.zygote_client import free_cpus

    cpus = free_cpus(DEMO.threads or 1)
    store = tc.Store(Path(tempfile.mkdtemp()) / "d.db")
    tc.run(DEMO, store=store)   # the launcher is up
    quiet, busy, flagged = [], [], 0
    for k in range(pairs):
        for side in ((False, True) if k % 2 == 0 else (True, False)):
            importer = None
            if side:
                importer = subprocess.Popen(["taskset", "-c", ",".join(map(str, cpus or (0,))), sys.executable, "-c",
                                             IMPORTER], cwd=HERE.parent, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL)
            r = tc.run(DEMO, store=store)
            (busy if side else quiet).append(r.median_step_s * 1e3)
            if importer is not None:
                flagged += r.noisy
                importer.wait()
    logs = [math.log(b / q) for q, b in zip(quiet, busy)]
    from scipy import stats

    hw = stats.t.ppf(0.975, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    mean = statistics.fmean(logs)
    return dict(quiet=quiet, busy=busy, cpus=list(cpus or ()), ratio=math.exp(mean), low=math.exp(mean - hw),
                high=math.exp(mean + hw), flagged=flagged)


def markdown(data: dict) -> str:
    lk, dist = data["luck"], data["disturbance"]
    fa, sa = lk["forked_anova"], lk["spawned_anova"]
    imp = data["import_s"]
    out = [f"Measured {data['date']} on {data['machine']}; the demo's spec (tiny GPT-2, eager, batch 8, seq 64, 40 "
           "steps, 1 thread).", "",
           "| jobs | groups × jobs | sd within (log) | sd between (log) | share decided by the group (ICC) | "
           "F test p |",
           "|---|---|---|---|---|---|",
           f"| forked from one launcher per group | {fa['groups']} × {fa['per_group']} | {fa['sd_within']:.3f} | "
           f"{fa['sd_between']:.3f} | {fa['icc']:.0%} | {fa['p']:.3f} |",
           f"| each spawned (a new process) | {sa['groups']} × {sa['per_group']} | {sa['sd_within']:.3f} | "
           f"{sa['sd_between']:.3f} | {sa['icc']:.0%} | {sa['p']:.3f} |", "",
           "Eager median step per job (ms), one line per launcher: " + "; ".join(
               ", ".join(f"{j['ms']:.1f}" for j in g) for g in lk["forked"]) + ".", "",
           f"Start cost: a launcher imports in {statistics.median(imp):.1f} s ({min(imp):.1f}–{max(imp):.1f}); a job "
           f"start to end takes {lk['forked_job_s']:.1f} s forked from a ready launcher, {lk['spawned_job_s']:.1f} s "
           f"spawned, and {lk['first_job_s']:.1f} s when it waits for its launcher's imports.", "",
           f"Disturbance: {len(dist['quiet'])} pairs of eager jobs, quiet and beside a launcher importing on CPU "
           f"{','.join(map(str, dist['cpus']))} (the job steps on the other): beside ÷ quiet "
           f"**{dist['ratio']:.3f}** (95 % interval {dist['low']:.3f}–{dist['high']:.3f}); "
           f"{dist['flagged']} of {len(dist['busy'])} jobs beside it were flagged noisy."]
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--launchers", type=int, default=6, help="launchers (processes) for the luck table (default 6)")
    ap.add_argument("--jobs", type=int, default=5, help="jobs per launcher (default 5; the first waits for imports)")
    ap.add_argument("--pairs", type=int, default=10, help="quiet/beside pairs for the disturbance (default 10)")
    ap.add_argument("--out", default=str(HERE / "launchers"))
    args = ap.parse_args()
    for name in ("launchers", "jobs", "pairs"):
        if getattr(args, name) < 3:
            ap.error(f"--{name} {getattr(args, name)}: at least 3")
    data = dict(date=time.strftime("%Y-%m-%d"), machine=f"{platform.machine()}, {os.cpu_count()} cores",
                luck=luck(args.launchers, args.jobs), import_s=import_seconds(), disturbance=disturbance(args.pairs))
    Path(args.out + ".json").write_text(json.dumps(data, indent=1))
    Path(args.out + ".md").write_text(markdown(data))
    print(markdown(data))


if __name__ == "__main__":
    main()
