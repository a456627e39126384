"""Sequential against lock-step rounds, alternating, on one warm store: the per-round spread of the log ratio, the
time a round takes and the verdict, for the demo's spec (tiny GPT-2, eager vs inductor, 1 thread).

    .venv/bin/python benchmarks/pairing.py --pairs 3 --rounds 6   # ~5 min on 2 cores; writes benchmarks/pairing.md

Each pair runs a sequential comparison then a lock-step one of ``--rounds`` fixed rounds, so both see the same hour
of the machine. The first comparison also fills the compile cache (its cold compile is in its time)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=3, help="sequential/lock-step pairs (default 3)")
    ap.add_argument("--rounds", type=int, default=6, help="fixed rounds per comparison (default 6)")
    ap.add_argument("--out", default=str(HERE / "pairing"), help="where the .md and .json go")
    args = ap.parse_args()
    os.environ.setdefault("TCBENCH_HOME", tempfile.mkdtemp(prefix="tcbench-pairing-"))
    import tcbench as tc
    from tcbench.measure.interval import log_ratios
    from tcbench.measure.metrics import steady

    spec = tc.JobSpec(model="gpt2", size="tiny", batch_size=8, seq_len=64, steps=40, warmup_steps=5, lr=2e-3,
                      threads=1)
    rows = []
    for i in range(args.pairs):
        for pairing in ("sequential", "lockstep"):
            t = time.monotonic()
            cmp = tc.compare(spec, backends=("inductor",), rounds=args.rounds, pairing=pairing)
            seconds = time.monotonic() - t
            logs = log_ratios([([s.step_s for s in steady(a.records)], [s.step_s for s in steady(b.records)])
                               for a, b in cmp.ratio_pairs("inductor")])
            row = cmp.row("inductor")
            rows.append(dict(pair=i + 1, pairing=pairing, seconds=seconds, logs=logs, sd=statistics.stdev(logs),
                             speedup=row.speedup, low=row.speedup_ci_low, high=row.speedup_ci_high,
                             verdict_kind=row.verdict_kind, noisy=[r.name for r in cmp.results if r.noisy]))
            print(f"{pairing}: {seconds:.0f} s, spread {rows[-1]['sd']:.3f}, {row.speedup:.3f} "
                  f"({row.speedup_ci_low:.3f}-{row.speedup_ci_high:.3f}) {row.verdict_kind}", flush=True)
    data = dict(date=time.strftime("%Y-%m-%d"), rounds=args.rounds, rows=rows)
    Path(args.out + ".json").write_text(json.dumps(data, indent=1))
    Path(args.out + ".md").write_text(markdown(data))
    print(markdown(data))


def markdown(data: dict) -> str:
    lines = [f"Measured {data['date']}: the demo's spec, eager vs inductor, {data['rounds']} fixed rounds per "
             "comparison, a sequential and a lock-step comparison in turn on one warm store.", "",
             "| pair | pairing | time | a round | per-round spread (log) | speedup (95 % interval) | verdict |",
             "|---|---|---|---|---|---|---|"]
    for r in data["rows"]:
        lines.append(f"| {r['pair']} | {r['pairing']} | {r['seconds']:.0f} s | {r['seconds'] / data['rounds']:.1f} s "
                     f"| {r['sd']:.3f} | {r['speedup']:.3f} ({r['low']:.3f}–{r['high']:.3f}) | {r['verdict_kind']} |")
    for pairing in ("sequential", "lockstep"):
        sds = [r["sd"] for r in data["rows"] if r["pairing"] == pairing]
        lines.append("")
        lines.append(f"{pairing}: median per-round spread {statistics.median(sds):.3f} ({min(sds):.3f}–{max(sds):.3f})")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
