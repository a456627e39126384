"""Which of a job's steps a round's ratio should read: the median, or the fast steps the machine left alone?

    .venv/bin/python benchmarks/step_statistic.py            # 10 lock-step rounds quiet + 10 beside a bursty process
    .venv/bin/python benchmarks/step_statistic.py --rounds 16 --out benchmarks/step_statistic_lockstep   # ~12 min
    .venv/bin/python benchmarks/step_statistic.py --pairing sequential   # benchmarks/step_statistic.md (2026-11-28)
    .venv/bin/python benchmarks/step_statistic.py --aa-store DB --out benchmarks/step_statistic_aa   # no jobs

The demo's spec (tiny GPT-2, batch 8, seq 64, 40 steps of which 5 warmup, 1 thread), eager against Inductor, fixed
rounds (``--pairing``: lock-step, compare's default on a CPU, or sequential), each round its own launcher
(``tc.compare``), once on a quiet machine and once beside trust.py's bursty busy process (busy and idle in random
0.2-1.5 s spells). The same jobs' steady steps are then read by several statistics: per statistic, the ratio native ÷
compiled with its 95 % t-interval over the rounds, and the spread of the per-round log ratio (what sets how many
rounds a verdict needs). ``tcbench.measure.interval.fast_step`` is the 10th percentile; "turn-paired" reads a
lock-step round turn by turn (each native turn against the compiled turn next to it).

``--aa-store DB`` runs nothing: it reads every comparison of an A/A store (``benchmarks/aa_coverage.py`` writes one
and names it in its .json; the truth is 1) and gives, per statistic, how many intervals exclude 1 and their median
half-width; and, for tcbench's statistic, the round's spread split in two (Kalibera and Jones): the variance of the
per-round log ratio between rounds, against the variance within a round, from its steps alone (a bootstrap that
resamples whole turns, the pairs of blocks next to each other in time). Where the two are equal, the processes add
nothing to the spread: it is the steps', and more steps per round narrow it as much as more rounds.
Writes ``--out``.md and .json (default benchmarks/step_statistic).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import tcbench as tc  # noqa: E402
from tcbench.measure.interval import log_interval  # noqa: E402
from tcbench.measure.metrics import steady  # noqa: E402
from trust import DEMO, Bursty  # noqa: E402

QUANTILES = {"median": 0.5, "25th percentile": 0.25, "10th percentile (tcbench)": 0.10, "minimum": 0.0}
BLOCK = 5   # tcbench.runner.turns.BLOCK: a lock-step turn's steps


def _quantile(q: float) -> Callable[[list[float], list[float]], float]:
    return lambda a, b: math.log(float(np.quantile(a, q)) / float(np.quantile(b, q)))


def _block_paired(a: list[float], b: list[float]) -> float:
    """The median over turns of log(native's fastest step in its turn ÷ the compiled job's in the turn next to it):
    each turn's ratio from two blocks a fraction of a second apart (lock-step pairs them in time)."""
    turns = [math.log(min(a[i:i + BLOCK]) / min(b[i:i + BLOCK])) for i in range(0, min(len(a), len(b)), BLOCK)
             if len(a[i:i + BLOCK]) == len(b[i:i + BLOCK]) == BLOCK]
    return statistics.median(turns)


STATISTICS = {**{name: _quantile(q) for name, q in QUANTILES.items()},
              "mean": lambda a, b: math.log(statistics.fmean(a) / statistics.fmean(b)),
              "turn-paired median": _block_paired}


def run(rounds: int, load: int, pairing: str, steps: int) -> dict:
    store = tc.Store(os.path.join(tempfile.mkdtemp(prefix="tcbench-stepstat-"), "s.db"))
    t0 = time.monotonic()
    with Bursty(load):
        cmp = tc.compare(DEMO.replace(steps=steps), backends=["inductor"], rounds=rounds, store=store,
                         pairing=pairing)
    pairs = [([s.step_s for s in steady(a.records)], [s.step_s for s in steady(b.records)])
             for a, b in cmp.ratio_pairs("inductor")]
    out = {"rounds": len(pairs), "seconds": time.monotonic() - t0, "verdict": cmp.row("inductor").verdict,
           "pairing": cmp.pairing, "steps": steps, "statistics": {}}
    for name, stat in STATISTICS.items():
        logs = [stat(a, b) for a, b in pairs]
        point, lo, hi = log_interval(logs)
        out["statistics"][name] = dict(logs=logs, spread=statistics.stdev(logs), point=point, low=lo, high=hi)
    return out


def aa_store(db: str, boots: int = 200) -> dict:
    """Every complete A/A comparison of ``db`` (at least 3 rounds of at least 10 steady steps a job) read by each
    statistic; and tcbench's statistic's spread between rounds against its spread within them."""
    import random

    from tcbench.measure.interval import fast_step

    rng = random.Random(0)
    store = tc.Store(db)
    out = {name: {"hw": [], "excluding": 0, "spread": []} for name in STATISTICS}
    between, within, steps, pairings = [], [], [], set()
    for cid in sorted(int(c) for c in store.comparisons()["comparison_id"]):
        cmp = tc.load_comparison(cid, store)
        pairs = [([s.step_s for s in steady(a.records)], [s.step_s for s in steady(b.records)])
                 for a, b in cmp.ratio_pairs(cmp.backends[1])]
        pairs = [(a, b) for a, b in pairs if min(len(a), len(b)) >= 10]
        if len(pairs) < 3:
            continue
        pairings.add(cmp.pairing)
        for name, stat in STATISTICS.items():
            logs = [stat(a, b) for a, b in pairs]
            _, lo, hi = log_interval(logs)
            out[name]["hw"].append(math.log(hi / lo) / 2)
            out[name]["spread"].append(statistics.stdev(logs))
            out[name]["excluding"] += lo > 1 or hi < 1
        logs = [math.log(fast_step(a) / fast_step(b)) for a, b in pairs]
        between.append(statistics.variance(logs))
        boot = []
        for a, b in pairs:   # resample whole turns: a block of each job, next to each other in time
            turns = [(a[i:i + BLOCK], b[i:i + BLOCK]) for i in range(0, min(len(a), len(b)), BLOCK)]
            draws = [[rng.choice(turns) for _ in turns] for _ in range(boots)]
            boot.append(statistics.variance([math.log(fast_step([x for t in d for x in t[0]])
                                                      / fast_step([x for t in d for x in t[1]])) for d in draws]))
        within.append(statistics.fmean(boot))
        steps.append(statistics.fmean(len(a) for a, _ in pairs))
    return {"comparisons": len(between), "pairing": " and ".join(sorted(pairings)), "steps": statistics.fmean(steps),
            "between": statistics.fmean(between), "within": statistics.fmean(within),
            "statistics": {name: {"excluding": r["excluding"], "half_width": statistics.median(r["hw"]),
                                  "spread": statistics.median(r["spread"])} for name, r in out.items()}}


def aa_markdown(data: dict) -> str:
    r = data["aa"]
    lines = [f"Read {data['date']} on {data['machine']}; `{data['command']}`: {r['comparisons']} A/A comparisons "
             f"(eager against itself, {r['pairing']} rounds, about {r['steps']:.0f} steady steps a job; half of "
             "them beside a bursty busy process), their steps read by each statistic (the truth is 1).", "",
             "| statistic | intervals excluding 1 | median half-width | median per-round spread (log) |",
             "|---|---|---|---|"]
    for name, s in r["statistics"].items():
        lines.append(f"| {name} | {s['excluding']} of {r['comparisons']} | ±{math.expm1(s['half_width']):.1%} "
                     f"| {s['spread']:.3f} |")
    lines += ["", f"The 10th percentile's per-round log ratio: variance between rounds {r['between']:.5f} (spread "
              f"{math.sqrt(r['between']):.3f}), within a round from its steps alone {r['within']:.5f} (spread "
              f"{math.sqrt(r['within']):.3f}; a bootstrap of whole turns, the mean over the rounds). "
              + ("Within and between agree: a round's spread is its steps', the processes add nothing beyond them."
                 if abs(r["between"] - r["within"]) <= 0.25 * r["between"] else
                 "The processes add the difference to a round's spread.")]
    return "\n".join(lines) + "\n"


def markdown(data: dict) -> str:
    lines = [f"Measured {data['date']} on {data['machine']}; `{data['command']}`. The demo's spec, eager against "
             f"Inductor, {data['pairing']} rounds of {data['steps']} steps (5 of them warmup), each round its own "
             "launcher; the same jobs' steady steps read by each statistic.", "",
             "| condition | rounds | statistic | speedup (95 % interval) | half-width | per-round spread (log) |",
             "|---|---|---|---|---|---|"]
    for cond, r in data["conditions"].items():
        for name, s in r["statistics"].items():
            hw = math.log(s["high"] / s["low"]) / 2
            lines.append(f"| {cond} | {r['rounds']} | {name} | {s['point']:.3f}× ({s['low']:.3f}–{s['high']:.3f}) "
                         f"| ±{math.expm1(hw):.1%} | {s['spread']:.3f} |")
    lines += ["", "The comparison's own verdicts (the 10th percentile):", ""]
    lines += [f"- {cond}: {r['verdict']}" for cond, r in data["conditions"].items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--pairing", choices=("lockstep", "sequential"), default="lockstep")
    ap.add_argument("--steps", type=int, default=DEMO.steps)
    ap.add_argument("--quiet-only", action="store_true", help="no run beside the bursty process")
    ap.add_argument("--aa-store", metavar="DB", help="run nothing: read the A/A comparisons of this store")
    ap.add_argument("--out", default=str(HERE / "step_statistic"))
    args = ap.parse_args()
    if args.aa_store:
        data = {"date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
                "command": "python benchmarks/step_statistic.py --aa-store DB "
                           + " ".join(a for a in sys.argv[1:] if a != args.aa_store and a != "--aa-store"),
                "aa": aa_store(args.aa_store)}
        Path(args.out + ".json").write_text(json.dumps(data, indent=1))
        Path(args.out + ".md").write_text(aa_markdown(data))
        print(aa_markdown(data))
        return
    data = {"date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "command": "python benchmarks/step_statistic.py " + " ".join(sys.argv[1:]),
            "pairing": args.pairing, "steps": args.steps, "conditions": {}}
    for cond, load in (("quiet", 0), ("beside a bursty busy process", 1))[:1 if args.quiet_only else 2]:
        data["conditions"][cond] = run(args.rounds, load, args.pairing, args.steps)
        print(cond, {k: round(v["spread"], 4) for k, v in data["conditions"][cond]["statistics"].items()}, flush=True)
    Path(args.out + ".json").write_text(json.dumps(data, indent=1))
    Path(args.out + ".md").write_text(markdown(data))


if __name__ == "__main__":
    main()
