"""A job against itself (A/A), with every round its own launcher: how often does the 95 % interval exclude 1?

    .venv/bin/python benchmarks/aa_coverage.py               # 10 quiet + 10 beside a bursty process (~15 min)
    .venv/bin/python benchmarks/aa_coverage.py --pairs 20    # the 40 the issue asks for (~30 min)
    .venv/bin/python benchmarks/aa_coverage.py --pairs 20 --rounds default --out benchmarks/aa_coverage_default
                                                             # compare's default rule: ±5 % or 60 s (~40 min)

The A/A spec of benchmarks/trust.py (tiny GPT-2, 30 steps, 1 thread, dropout 0), 3 fixed rounds per comparison,
``--pairs`` comparisons on a quiet machine and ``--pairs`` beside trust.py's bursty busy process (busy and idle in
random 0.2-1.5 s spells), all in one store, so nothing but each comparison's own rounds makes its interval. Reported:
the share of intervals that exclude 1 (goal: at most 5 %), the verdicts, the median half-width (goal ≤ ±5 %) and the
rounds and seconds a comparison took. ``--rounds default`` runs ``tc.compare``'s default rule instead of fixed rounds
(rounds until ±5 % or 60 s), as a user who gives no ``rounds`` gets it.
Writes benchmarks/aa_coverage.md and .json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from trust import coverage  # noqa: E402   (A/A comparisons, quiet or beside the bursty process)


def _line(name: str, rows: list[dict]) -> str:
    out = sum(1 for r in rows if r["low"] is not None and (r["low"] > 1 or r["high"] < 1))
    kinds = {k: sum(1 for r in rows if r["verdict_kind"] == k)
             for k in ("faster", "slower", "no measurable difference", "inconclusive")}
    res = [r["resolution"] for r in rows if r["resolution"] is not None]
    noisy = sum(1 for r in rows if r["noisy_jobs"])
    rounds = [r["rounds"] for r in rows]
    return (f"| {name} | {len(rows)} | **{out} ({out / len(rows):.0%})** | " + " / ".join(map(str, kinds.values())) +
            f" | ±{statistics.median(res):.1%} (±{min(res):.1%}–±{max(res):.1%}) | {statistics.median(rounds):g} "
            f"({min(rounds)}–{max(rounds)}) | {statistics.median(r['seconds'] for r in rows):.0f} s | {noisy} |")


def _rounds_words(rounds: int | None) -> str:
    return (f"{rounds} rounds per comparison" if rounds else
            "compare's default rule per comparison (rounds until every interval is within ±5 % or 60 s have passed)")


def markdown(data: dict) -> str:
    quiet, load = data["quiet"], data["load"]
    return "\n".join([
        f"Measured {data['date']} on {data['machine']}; tiny GPT-2, batch 8, seq 64, 30 steps (5 warmup), 1 thread, "
        f"dropout 0, eager against itself, {_rounds_words(data.get('rounds', 3))}, every round its own launcher, "
        "one store.", "",
        "| A/A | comparisons | intervals excluding 1 (goal ≤ 5 %) | faster / slower / no measurable difference / "
        "inconclusive | half-width (median, min–max; goal ≤ ±5 %) | rounds (median, min–max) | seconds (median) "
        "| with a disturbed job |",
        "|---|---|---|---|---|---|---|---|",
        _line("quiet machine", quiet), _line("beside a bursty busy process", load), _line("all", quiet + load)]) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=10, help="A/A comparisons per condition (default 10)")
    ap.add_argument("--rounds", default="3", help="rounds per comparison, or 'default' for compare's own rule "
                    "(default 3)")
    ap.add_argument("--out", default=str(HERE / "aa_coverage"))
    args = ap.parse_args()
    if args.pairs < 2:
        ap.error(f"--pairs {args.pairs}: at least 2")
    if args.rounds != "default" and not (args.rounds.isdigit() and int(args.rounds) >= 2):
        ap.error(f"--rounds {args.rounds}: a whole number of at least 2, or 'default'")
    rounds = None if args.rounds == "default" else int(args.rounds)
    os.environ["TCBENCH_DB"] = str(Path(tempfile.mkdtemp()) / "aa.db")
    data = dict(date=time.strftime("%Y-%m-%d"), machine=f"{platform.machine()}, {os.cpu_count()} cores",
                rounds=rounds, quiet=coverage(args.pairs, 0, rounds), load=coverage(args.pairs, 1, rounds))
    Path(args.out + ".json").write_text(json.dumps(data, indent=1, default=str))
    Path(args.out + ".md").write_text(markdown(data))
    print(markdown(data))


if __name__ == "__main__":
    main()
