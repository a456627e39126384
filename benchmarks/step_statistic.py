"""Which of a job's steps a round's ratio should read: the median, or the fast steps the machine left alone?

    .venv/bin/python benchmarks/step_statistic.py            # 10 rounds quiet + 10 beside a bursty process (~5 min)
    .venv/bin/python benchmarks/step_statistic.py --rounds 16

The demo's spec (tiny GPT-2, batch 8, seq 64, 40 steps of which 5 warmup, 1 thread), eager against Inductor, fixed
rounds, each round its own launcher (``tc.compare``), once on a quiet machine and once beside trust.py's bursty busy
process (busy and idle in random 0.2-1.5 s spells). The same jobs' steady steps are then read by several statistics:
per statistic, the ratio native ÷ compiled with its 95 % t-interval over the rounds, and the spread of the per-round
log ratio (what sets how many rounds a verdict needs). ``tcbench.measure.interval.fast_step`` is the 10th percentile.
Writes benchmarks/step_statistic.md and .json.
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

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import tcbench as tc  # noqa: E402
from tcbench.measure.interval import log_interval  # noqa: E402
from tcbench.measure.metrics import steady  # noqa: E402
from trust import DEMO, Bursty  # noqa: E402

STATISTICS = {"median": 0.5, "25th percentile": 0.25, "10th percentile (tcbench)": 0.10, "minimum": 0.0}


def run(rounds: int, load: int) -> dict:
    store = tc.Store(os.path.join(tempfile.mkdtemp(prefix="tcbench-stepstat-"), "s.db"))
    t0 = time.monotonic()
    with Bursty(load):
        cmp = tc.compare(DEMO, backends=["inductor"], rounds=rounds, store=store)
    pairs = [([s.step_s for s in steady(a.records)], [s.step_s for s in steady(b.records)])
             for a, b in cmp.complete_pairs("inductor")]
    out = {"rounds": len(pairs), "seconds": time.monotonic() - t0, "verdict": cmp.row("inductor").verdict,
           "statistics": {}}
    for name, q in STATISTICS.items():
        logs = [math.log(float(np.quantile(a, q)) / float(np.quantile(b, q))) for a, b in pairs]
        point, lo, hi = log_interval(logs)
        out["statistics"][name] = dict(logs=logs, spread=statistics.stdev(logs), point=point, low=lo, high=hi)
    return out


def markdown(data: dict) -> str:
    lines = [f"Measured {data['date']} on {data['machine']}; `{data['command']}`. The demo's spec, eager against "
             "Inductor, each round its own launcher; the same jobs' steady steps read by each statistic.", "",
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
    ap.add_argument("--out", default=str(HERE / "step_statistic"))
    args = ap.parse_args()
    data = {"date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "command": "python benchmarks/step_statistic.py" + (f" --rounds {args.rounds}" * (args.rounds != 10)),
            "conditions": {}}
    for cond, load in (("quiet", 0), ("beside a bursty busy process", 1)):
        data["conditions"][cond] = run(args.rounds, load)
        print(cond, {k: round(v["spread"], 4) for k, v in data["conditions"][cond]["statistics"].items()}, flush=True)
    Path(args.out + ".json").write_text(json.dumps(data, indent=1))
    Path(args.out + ".md").write_text(markdown(data))


if __name__ == "__main__":
    main()
