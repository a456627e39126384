"""Where a round's spread comes from, and what each design of issue 44 could cancel of it.

    .venv/bin/python benchmarks/noise_components.py               # ~5 min on 2 cores
    .venv/bin/python benchmarks/noise_components.py --rounds 4 --steps 80 --pair-s 6

1. **Per-process luck against step noise.** ``--rounds`` rounds as ``compare()`` runs them (each round forks its
   jobs from a launcher of its own): an eager and an Inductor job of the demo's spec with ``--steps`` measured
   steps. Per backend: the spread of the jobs' median steps between jobs (log units), and the spread that the
   steps' own noise predicts for a job's median (the spread of its 20-step blocks' medians ÷ √blocks). When the
   first is far above the second, each process draws a speed of its own that no number of steps averages away;
   only more processes (rounds) do.
2. **Do two cores see the same machine at the same moment?** (the premise of duet rounds: both jobs at once, one per
   core, their ratio taken block by block). Two plain training loops of the same spec run together, each pinned to
   a core of its own, for ``--pair-s`` seconds, then two run one after the other on one core. Reported: the
   correlation of their medians over half-second windows, and the spread of the log ratio of those windows
   together and apart. A correlation near 0 means that the speed the machine gives one core is not the speed it
   gives the other: pairing in time cancels nothing.
3. **Steps or rounds** (Kalibera & Jones, "Rigorous Benchmarking in Reasonable Time", ISMM 2013): with the
   between-process variance ``a`` and the step noise ``b`` (a job of ``n`` steps: ``a + b/n`` per side), a round's
   fixed cost ``c0`` (its wall time less its measured steps) and a step's cost, the steps per job that minimise
   the time to a given interval: ``n* = √(c0·b / (c_step·a))``.

Writes benchmarks/noise_components.md and .json.
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

BLOCK = 20   # steps per block when a job's own step noise is estimated

# a plain loop of the demo's spec (the catalog's tiny GPT-2), timing each step with its wall clock
LOOP = r'''
import json, sys, time
import torch
from tcbench.job.models import build_model
torch.set_num_threads(1)
torch.manual_seed(0)
model = build_model("gpt2", "tiny").train()
opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
ids = torch.randint(0, 4096, (8, 64))
def step():
    opt.zero_grad()
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
for _ in range(5):
    step()
print("READY", flush=True)
sys.stdin.readline()                 # both loops start together
end, out = time.time() + float(sys.argv[1]), []
while time.time() < end:
    t = time.perf_counter()
    step()
    out.append((time.time(), time.perf_counter() - t))
print(json.dumps(out), flush=True)
'''


def _log_sd(values: list[float]) -> float:
    return statistics.stdev(math.log(v) for v in values)


def luck(rounds: int, steps: int) -> dict:
    """Part 1: per backend, each round's job median and its within-job predicted spread."""
    from tcbench.store.api import Store

    store = Store(os.path.join(tempfile.mkdtemp(prefix="tcbench-noise-"), "noise.db"))
    jobs: dict[str, list[dict]] = {"eager": [], "inductor": []}
    for rnd in range(rounds):
        draw = object()   # a launcher of its own, as compare()'s rounds
        for backend in ("eager", "inductor") if rnd % 2 == 0 else ("inductor", "eager"):
            spec = tc.JobSpec(model="gpt2", size="tiny", backend=backend, batch_size=8, seq_len=64,
                              steps=steps + 5, warmup_steps=5, lr=2e-3, threads=1)
            t0 = time.monotonic()
            r = tc.run(spec, store=store, draw=draw)
            wall = time.monotonic() - t0
            if not r.ok:
                raise SystemExit(f"{backend} round {rnd} failed: {r.error}")
            x = [s.step_s for s in r.records if not s.warmup]
            k = len(x) // BLOCK
            blocks = [statistics.median(x[i * BLOCK:(i + 1) * BLOCK]) for i in range(k)]
            # the job's own wall time: compare() starts the next round's launcher while a round runs, so no round
            # waits for one; here the first job of each round does (``waited_s``)
            jobs[backend].append(dict(median_ms=statistics.median(x) * 1e3, wall_s=r.wall_s, waited_s=wall,
                                      steps_s=sum(x), compile_s=r.compile_latency_s or 0.0,
                                      within=_log_sd(blocks) / math.sqrt(k)))
            print(f"  round {rnd} {backend}: {jobs[backend][-1]['median_ms']:.1f} ms, {wall:.1f} s", flush=True)
    out = {}
    for backend, rows in jobs.items():
        between = _log_sd([j["median_ms"] for j in rows])
        within = statistics.fmean(j["within"] for j in rows)
        out[backend] = dict(jobs=rows, between=between, within=within,
                            luck=math.sqrt(max(0.0, between ** 2 - within ** 2)))
    return out


def _windows(series: list[tuple[float, float]], t0: float, width: float = 0.5) -> list[float | None]:
    n = int((series[-1][0] - t0) // width)
    out = []
    for k in range(n):
        inside = [d for t, d in series if t0 + k * width <= t < t0 + (k + 1) * width]
        out.append(statistics.median(inside) if inside else None)
    return out


def _loops(cpus: list[int], seconds: float) -> list[list[tuple[float, float]]]:
    from tcbench.runner.process import ALLOCATOR_ENV   # the allocator's thresholds a tcbench job runs with

    procs = [subprocess.Popen(["taskset", "-c", str(c), sys.executable, "-c", LOOP, str(seconds)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              env={**ALLOCATOR_ENV, **os.environ})
             for c in cpus]
    for p in procs:
        assert p.stdout.readline().strip() == "READY"
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    return [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]


def _paired(a: list[tuple[float, float]], b: list[tuple[float, float]], shift: float) -> dict:
    wa = _windows(a, a[0][0] + 0.5)
    wb = _windows(b, b[0][0] + 0.5)
    pairs = [(x, y) for x, y in zip(wa, wb) if x and y]
    la, lb = [math.log(x) for x, _ in pairs], [math.log(y) for _, y in pairs]
    return dict(windows=len(pairs), correlation=statistics.correlation(la, lb),
                ratio_sd=statistics.stdev(x - y for x, y in zip(la, lb)), each_sd=statistics.fmean(
                    [statistics.stdev(la), statistics.stdev(lb)]), shift_s=shift)


def cores(seconds: float) -> dict:
    """Part 2: two loops at once on two cores, then one after the other on one core."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return {}
    together = _loops(cpus[-2:], seconds)
    first = _loops([cpus[-1]], seconds)[0]
    second = _loops([cpus[-1]], seconds)[0]
    return dict(together=_paired(*together, shift=0.0),
                apart=_paired(first, second, shift=second[0][0] - first[0][0]))


def allocation(parts: dict) -> dict:
    """Part 3: Kalibera & Jones's steps per job from part 1's components and costs."""
    e, i = parts["eager"], parts["inductor"]
    rows = e["jobs"] + i["jobs"]
    step_s = statistics.fmean(j["steps_s"] for j in rows) / parts["steps"]   # one measured step, either side
    c0 = statistics.median(a["wall_s"] - a["steps_s"] + b["wall_s"] - b["steps_s"]
                           for a, b in zip(e["jobs"], i["jobs"]))             # a round's fixed cost, both jobs
    a = e["luck"] ** 2 + i["luck"] ** 2                                       # per round, both sides
    b = (e["within"] ** 2 + i["within"] ** 2) * parts["steps"]                # step noise of one step, both sides
    n_star = math.sqrt(c0 * b / (2 * step_s * a)) if a > 0 else math.inf
    return dict(c0_s=c0, step_s=step_s, a=a, b=b, n_star=n_star)


def markdown(data: dict) -> str:
    p, c, k = data["luck"], data["cores"], data["allocation"]
    lines = [f"Measured {data['date']} on {data['machine']}; the demo's spec (tiny GPT-2, batch 8, seq 64, 1 thread), "
             "warm compile caches. `benchmarks/noise_components.py` (its docstring says what each part does).", "",
             f"**1. Per-process luck** ({data['rounds']} rounds, each forked from a launcher of its own; "
             f"{data['steps']} measured steps per job):", "",
             "| backend | job medians (ms) | spread between jobs (log) | spread the steps predict (log) | "
             "per-process luck (log) |", "|---|---|---|---|---|"]
    for backend in ("eager", "inductor"):
        r = p[backend]
        meds = ", ".join(f"{j['median_ms']:.1f}" for j in r["jobs"])
        lines.append(f"| {backend} | {meds} | {r['between']:.3f} | {r['within']:.3f} | {r['luck']:.3f} |")
    if c:
        t, a = c["together"], c["apart"]
        lines += ["", f"**2. Two cores at the same moment** (plain loops of the same spec, {t['windows']} half-second "
                  "windows):", "", "| loops | correlation of their window medians | spread of the window log ratio | "
                  "spread of one loop's windows |", "|---|---|---|---|",
                  f"| together, a core each | {t['correlation']:+.2f} | {t['ratio_sd']:.3f} | {t['each_sd']:.3f} |",
                  f"| one after the other, one core ({a['shift_s']:.0f} s apart) | {a['correlation']:+.2f} | "
                  f"{a['ratio_sd']:.3f} | {a['each_sd']:.3f} |"]
    # a round's first job waits for its launcher to import (compare() starts it during the previous round; this
    # script does not): the second job of each round after the first (eager in odd rounds, Inductor in even ones)
    beyond = {b: sorted(j["wall_s"] - j.get("compile_s", 0.0) - j["steps_s"]
                        for i, j in enumerate(p[b]["jobs"]) if i >= 1 and i % 2 == (b == "eager"))
              for b in ("eager", "inductor")}
    over = {b: f"{statistics.median(v):.2f} s ({v[0]:.2f}–{v[-1]:.2f})" for b, v in beyond.items()}
    lines += ["", "**What a job costs beyond its steps** (median and range over the jobs that ran second in their "
              "round, after the first round, as in compare(), whose launchers import during the previous round: the "
              "job's wall time less its compile latency and its measured steps; issue 44's target: at most 1 s for a "
              f"warm compiled job): eager {over['eager']}, Inductor {over['inductor']}."]
    lines += ["", f"**3. Steps or rounds:** a round's fixed cost c0 = {k['c0_s']:.1f} s (both jobs' wall time less "
              f"their measured steps), a measured step {k['step_s'] * 1e3:.1f} ms; per round, between processes "
              f"a = {k['a']:.5f} and step noise b = {k['b']:.4f} (log², both sides, b per step): "
              f"**n\\* = {k['n_star']:.0f} measured steps per job** (Kalibera & Jones)."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--steps", type=int, default=160)
    ap.add_argument("--pair-s", type=float, default=12.0)
    ap.add_argument("--out", default=str(HERE / "noise_components"))
    ap.add_argument("--render", action="store_true", help="only write the .md again from the .json")
    args = ap.parse_args()
    if args.render:
        data = json.loads(Path(args.out + ".json").read_text())
    else:
        parts = luck(args.rounds, args.steps)
        parts["steps"] = args.steps
        data = dict(date=time.strftime("%Y-%m-%d"), rounds=args.rounds, steps=args.steps,
                    machine=f"{platform.machine()}, {os.cpu_count()} cores ({_cpu_name()})", luck=parts,
                    cores=cores(args.pair_s), allocation=allocation(parts))
        Path(args.out + ".json").write_text(json.dumps(data, indent=1))
    Path(args.out + ".md").write_text(markdown(data))
    print(markdown(data))


def _cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


if __name__ == "__main__":
    main()
