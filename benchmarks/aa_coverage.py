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
(rounds until ±5 % or 60 s), as a user who gives no ``rounds`` gets it. ``--rejudge DB`` runs nothing: it judges the
comparisons of ``--out``'s .json again, from their store DB, with the code as it is now (after a change to the verdict
rules; the intervals are the same data).
Writes benchmarks/aa_coverage.md and .json.
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
        f"dropout 0, eager against itself, {_rounds_words(data.get('rounds', 3))}, "
        f"{data.get('pairing', 'sequential')} rounds, every round its own launcher, one store."
        + (f" Verdicts judged again on {data['rejudged']} with the code of that day (`--rejudge`; the intervals are "
           "the same data)." if data.get("rejudged") else ""), "",
        "| A/A | comparisons | intervals excluding 1 (goal ≤ 5 %) | faster / slower / no measurable difference / "
        "inconclusive | half-width (median, min–max; goal ≤ ±5 %) | rounds (median, min–max) | seconds (median) "
        "| with a disturbed job |",
        "|---|---|---|---|---|---|---|---|",
        _line("quiet machine", quiet), _line("beside a bursty busy process", load), _line("all", quiet + load)]) + "\n"


def rejudge(out: Path, db: Path) -> None:
    """Each comparison of ``out``.json judged again from its store with the code as it is now (verdicts only: the
    intervals are the same data); comparisons written before the rows kept their id are taken in store order."""
    import tcbench as tc

    data = json.loads(out.with_suffix(".json").read_text())
    store = tc.Store(db)
    rows = data["quiet"] + data["load"]
    ids = [r.get("comparison_id") for r in rows]
    if None in ids:
        ids = sorted(int(c) for c in store.comparisons()["comparison_id"])[-len(rows):]
    for row, cmp_id in zip(rows, ids):
        cmp = tc.load_comparison(cmp_id, store)
        judged = cmp.row(cmp.backends[1])
        assert math.isclose(judged.speedup_ci_low or 0.0, row["low"] or 0.0, rel_tol=1e-9), (cmp_id, judged, row)
        row.update(verdict_kind=judged.verdict_kind, verdict=judged.verdict, comparison_id=cmp_id)
    data["rejudged"] = time.strftime("%Y-%m-%d")
    out.with_suffix(".json").write_text(json.dumps(data, indent=1, default=str))
    out.with_suffix(".md").write_text(markdown(data))
    print(markdown(data))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=10, help="A/A comparisons per condition (default 10)")
    ap.add_argument("--rounds", default="3", help="rounds per comparison, or 'default' for compare's own rule "
                    "(default 3)")
    ap.add_argument("--out", default=str(HERE / "aa_coverage"))
    ap.add_argument("--rejudge", metavar="DB", help="no new comparisons: judge those of --out's .json again with "
                    "the current code, from DB, the store they were written to (its path is in the .json)")
    args = ap.parse_args()
    if args.rejudge:
        rejudge(Path(args.out), Path(args.rejudge))
        return
    if args.pairs < 2:
        ap.error(f"--pairs {args.pairs}: at least 2")
    if args.rounds != "default" and not (args.rounds.isdigit() and int(args.rounds) >= 2):
        ap.error(f"--rounds {args.rounds}: a whole number of at least 2, or 'default'")
    rounds = None if args.rounds == "default" else int(args.rounds)
    os.environ["TCBENCH_DB"] = str(Path(tempfile.mkdtemp()) / "aa.db")
    data = dict(store=os.environ["TCBENCH_DB"], date=time.strftime("%Y-%m-%d"),
                machine=f"{platform.machine()}, {os.cpu_count()} cores",
                rounds=rounds, quiet=coverage(args.pairs, 0, rounds), load=coverage(args.pairs, 1, rounds))
    data["pairing"] = " and ".join(sorted({r.get("pairing", "sequential") for r in data["quiet"] + data["load"]}))
    Path(args.out + ".json").write_text(json.dumps(data, indent=1, default=str))
    Path(args.out + ".md").write_text(markdown(data))
    print(markdown(data))


if __name__ == "__main__":
    main()
