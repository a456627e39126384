"""Does a co-runner move a lock-step answer? Eager against Inductor beside a bursty busy process, against the same
comparisons on a quiet machine and a long truth (issue 44's bias check of the shared-disturbance rule).

    .venv/bin/python benchmarks/cobias.py                       # 3 + 3 comparisons of 8 rounds, truth of 16 (~22 min)
    .venv/bin/python benchmarks/cobias.py --pairs 1 --rounds 3 --truth-rounds 2

A/A comparisons (benchmarks/aa_coverage.py) show that an interval covers 1 when both sides run the same program;
they cannot show whether two different programs suffer unequally from a co-runner (shared cache, memory bandwidth).
In lock-step rounds a moderate disturbance (each share at most 25 %: ``tcbench.measure.metrics.shared_noise``) is a
warning, not a void, so the answer beside a co-runner must be the quiet machine's. Here ``--pairs`` times: a quiet
lock-step comparison of ``--rounds`` fixed rounds on the demo's spec, then the same beside trust.py's bursty process
(busy and idle in random 0.2-1.5 s spells), each on a store of its own with the shared warm compile caches; then the
truth: ``--truth-rounds`` alternating sequential rounds of 150 steps, every job a new process
(``first_comparisons.truth``). Reported: every comparison, how many of its jobs were flagged disturbed and how many of
those the shared rule kept, each condition's pooled estimate (inverse-variance, from the comparisons' rounds), the
difference bursty − quiet with its standard error, and each pooled estimate's distance from the truth.
Writes benchmarks/cobias.md and .json.
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import tcbench as tc  # noqa: E402
from tcbench.measure.interval import log_ratios  # noqa: E402
from tcbench.measure.metrics import shared_noise, steady  # noqa: E402
from first_comparisons import truth  # noqa: E402
from trust import DEMO, Bursty  # noqa: E402

CONDITIONS = (("quiet", 0), ("beside a bursty busy process", 1))


def one(rounds: int, load: int) -> dict:
    """One lock-step comparison of ``rounds`` rounds on a store of its own, beside ``load`` bursty processes."""
    store = tc.Store(os.path.join(tempfile.mkdtemp(prefix="tcbench-cobias-"), "s.db"))
    t0 = time.monotonic()
    with Bursty(load):
        cmp = tc.compare(DEMO, backends=["inductor"], rounds=rounds, store=store, pairing="lockstep")
    row = cmp.row("inductor")
    pairs = cmp.ratio_pairs("inductor")
    noisy = [r for r in cmp.results if r.noisy]
    return dict(seconds=time.monotonic() - t0, speedup=row.speedup, low=row.speedup_ci_low, high=row.speedup_ci_high,
                verdict_kind=row.verdict_kind, verdict=row.verdict, jobs=len(cmp.results), noisy=len(noisy),
                shared=sum(shared_noise(r.figures) for r in noisy),
                max_wait=max((r.wait_share or 0.0) for r in cmp.results),
                max_others=max((r.others_share or 0.0) for r in cmp.results),
                logs=log_ratios([([s.step_s for s in steady(a.records)], [s.step_s for s in steady(b.records)])
                                 for a, b in pairs]))


def pooled(rows: list[dict]) -> tuple[float, float]:
    """The inverse-variance pooled log ratio of ``rows`` and its standard error."""
    est = [(statistics.fmean(r["logs"]), statistics.variance(r["logs"]) / len(r["logs"])) for r in rows
           if len(r["logs"]) >= 2]
    w = [1 / v for _, v in est]
    return sum(wi * m for wi, (m, _) in zip(w, est)) / sum(w), math.sqrt(1 / sum(w))


def markdown(data: dict) -> str:
    lines = [f"Measured {data['date']} on {data['machine']}; `{data['command']}`. The demo's spec (tiny GPT-2, "
             f"batch 8, seq 64, 40 steps, 1 thread), eager against Inductor, lock-step rounds, {data['rounds']} fixed "
             "rounds per comparison, each on a store of its own, quiet and beside a bursty busy process in turn.", "",
             "| # | condition | speedup (95 % interval) | verdict | jobs flagged disturbed (kept by the shared rule) "
             "| largest wait / others' share | seconds |", "|---|---|---|---|---|---|---|"]
    for i, r in enumerate(data["comparisons"], 1):
        lines.append(f"| {i} | {r['condition']} | {r['speedup']:.3f} ({r['low']:.3f}–{r['high']:.3f}) | "
                     f"{r['verdict_kind']} | {r['noisy']} of {r['jobs']} ({r['shared']}) | "
                     f"{r['max_wait']:.0%} / {r['max_others']:.0%} | {r['seconds']:.0f} |")
    lines += ["", "| | pooled speedup (standard error in log units) | from the truth (standard errors) |",
              "|---|---|---|"]
    tr = data["truth"]
    for cond, p in data["pooled"].items():
        far = (f"{(p['log'] - math.log(tr['speedup'])) / math.hypot(p['se'], tr['se']):+.1f}" if tr else "–")
        lines.append(f"| {cond} | {math.exp(p['log']):.3f} ({p['se']:.4f}) | {far} |")
    d = data["difference"]
    lines += ["", f"Bursty − quiet: {d['log']:+.4f} in log units (a ratio of {math.exp(d['log']):.3f}), standard error "
              f"{d['se']:.4f}: {d['log'] / d['se']:+.1f} standard errors."]
    if tr:
        lines.append(f"Truth: {tr['rounds']} sequential rounds of 150 steps, every job a new process: "
                     f"{tr['speedup']:.3f} ({tr['low']:.3f}–{tr['high']:.3f}) in {tr['seconds']:.0f} s.")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3, help="quiet and bursty comparisons each (default 3)")
    ap.add_argument("--rounds", type=int, default=8, help="fixed rounds per comparison (default 8)")
    ap.add_argument("--truth-rounds", type=int, default=16, help="sequential rounds of the truth (0: none)")
    ap.add_argument("--out", default=str(HERE / "cobias"))
    args = ap.parse_args()
    for name in ("pairs", "rounds"):
        if getattr(args, name) < (1 if name == "pairs" else 2):
            ap.error(f"--{name} {getattr(args, name)}: too few")
    rows = []
    for i in range(args.pairs):
        for cond, load in CONDITIONS:
            rows.append({"condition": cond, **one(args.rounds, load)})
            r = rows[-1]
            print(f"{i + 1} {cond}: {r['speedup']:.3f} [{r['low']:.3f}, {r['high']:.3f}] noisy {r['noisy']}/{r['jobs']}"
                  f" shared {r['shared']}", flush=True)
    tr = truth(args.truth_rounds, dict(os.environ))
    if tr:
        tr["se"] = statistics.stdev(tr["logs"]) / math.sqrt(len(tr["logs"]))
    pools = {cond: dict(zip(("log", "se"), pooled([r for r in rows if r["condition"] == cond])))
             for cond, _ in CONDITIONS}
    q, b = pools[CONDITIONS[0][0]], pools[CONDITIONS[1][0]]
    data = {"date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "command": "python benchmarks/cobias.py " + " ".join(sys.argv[1:]), "rounds": args.rounds,
            "comparisons": rows, "truth": tr, "pooled": pools,
            "difference": {"log": b["log"] - q["log"], "se": math.hypot(b["se"], q["se"])}}
    Path(args.out + ".json").write_text(json.dumps(data, indent=1, default=str))
    Path(args.out + ".md").write_text(markdown(data))
    print(markdown(data))


if __name__ == "__main__":
    main()
