"""How many rounds Stein's pilot should have: simulated adaptive comparisons under ``RoundsRule.resolved`` (±5 %),
per pilot size, per-round spread, true ratio and round cap (the budget, in rounds).

    .venv/bin/python benchmarks/pilot_size.py        # ~2 min on one core; writes benchmarks/pilot_size.md and .json

Each comparison draws normal per-round log ratios (no machine involved) and adds rounds until the rule says the
verdict at ±5 % is decided or the cap is reached; reported: the share of 95 % intervals that cover the truth, the
share of decided verdicts (faster, slower or no measurable difference) and the mean number of rounds. A cap of 6 is
compare()'s default 60 s of 9 s lock-step rounds; 12 is `make demo`'s 150 s less xla's rounds.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tcbench.measure.interval import EQUIVALENCE_CONFIDENCE, RoundsRule, half_width  # noqa: E402

N = 2000
RESOLVE = 0.05


def one(truth: float, sd: float, pilot: int, cap: int, rng: np.random.Generator) -> tuple[bool, bool, int]:
    rule = RoundsRule(resolve=RESOLVE, pilot=pilot, max_rounds=cap)
    logs: list[float] = []
    while True:
        logs.append(float(rng.normal(math.log(truth), sd)))
        if (len(logs) >= pilot and rule.resolved(logs)) or len(logs) >= cap:
            break
    m = statistics.fmean(logs)
    p = pilot if len(logs) >= pilot else None
    w, w90 = half_width(logs, p), half_width(logs, p, EQUIVALENCE_CONFIDENCE)
    decided = m - w > 0 or m + w < 0 or abs(m) + w90 < math.log1p(RESOLVE)
    return m - w <= math.log(truth) <= m + w, decided, len(logs)


def main() -> None:
    rows = []
    for cap in (6, 12):
        for sd in (0.015, 0.025, 0.035, 0.05):
            for truth in (1.0, 1.02, 1.03, 1.05):
                for pilot in (4, 5, 6):
                    if pilot > cap:
                        continue
                    rng = np.random.default_rng(7)
                    res = np.array([one(truth, sd, pilot, cap, rng) for _ in range(N)], float)
                    rows.append(dict(cap=cap, sd=sd, truth=truth, pilot=pilot, coverage=res[:, 0].mean(),
                                     decided=res[:, 1].mean(), rounds=res[:, 2].mean()))
                    print(rows[-1], flush=True)
    Path(HERE / "pilot_size.json").write_text(json.dumps(dict(date=time.strftime("%Y-%m-%d"), n=N, rows=rows),
                                                          indent=1))
    lines = [f"Simulated {time.strftime('%Y-%m-%d')}: {N} adaptive comparisons per cell, rounds added until the "
             "verdict at ±5 % is decided (`RoundsRule.resolved`) or the cap; per cell: coverage of the 95 % interval "
             "/ decided verdicts / mean rounds.", "",
             "| cap | per-round spread | true ratio | pilot 4 | pilot 5 | pilot 6 |", "|---|---|---|---|---|---|"]
    for cap in (6, 12):
        for sd in (0.015, 0.025, 0.035, 0.05):
            for truth in (1.0, 1.02, 1.03, 1.05):
                cells = {r["pilot"]: r for r in rows if (r["cap"], r["sd"], r["truth"]) == (cap, sd, truth)}
                text = [f"{c['coverage']:.1%} / {c['decided']:.1%} / {c['rounds']:.1f}" if (c := cells.get(p)) else "—"
                        for p in (4, 5, 6)]
                lines.append(f"| {cap} | {sd} | {truth:.2f}× | " + " | ".join(text) + " |")
    (HERE / "pilot_size.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
