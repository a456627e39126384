"""tune_compile on a small model within a wall-clock budget: the configurations it tried, the fastest that kept loss
parity, and that configuration's speedup over native and over the default compiled configuration from the
confirmation's alternating rounds (95 % intervals).

    .venv/bin/python benchmarks/tune_compile.py                 # small BERT, 1 thread, budget 600 s (~11 min)
    .venv/bin/python benchmarks/tune_compile.py --model gpt2 --size tiny --budget-s 300

A fresh TCBENCH_HOME (``--home``, default a new temporary folder) so every configuration compiles cold, as on a
user's first search; dropout off (a tight parity check). Writes benchmarks/tune_compile.md and .json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="bert-base-cased")
    ap.add_argument("--size", default="small")
    ap.add_argument("--budget-s", type=float, default=600.0)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--home", default=None, help="TCBENCH_HOME (default: a new temporary folder: cold compiles)")
    a = ap.parse_args()
    os.environ["TCBENCH_HOME"] = a.home or tempfile.mkdtemp(prefix="tcb-tune-compile-")
    os.environ.pop("TCBENCH_DB", None)
    import tcbench as tc
    from tcbench.host.env import static_env

    spec = tc.JobSpec(model=a.model, size=a.size, dropout=0.0, threads=1, lr=a.lr)
    t0 = time.monotonic()

    def progress(e: dict) -> None:
        if e.get("type") == "compile-trial" and e["status"] != "start":
            print(f"{time.monotonic() - t0:6.0f} s  trial {e['number']} {e['label']}: {e['status']}", flush=True)

    res = tc.tune_compile(spec, budget_s=a.budget_s, observer=progress)
    wall = time.monotonic() - t0
    env = static_env()
    table = res.table()[["number", "label", "state", "median_step_ms", "step_iqr_ms", "compile_s", "parity", "reason"]]
    lines = [f"Measured {time.strftime('%Y-%m-%d')} on {env.get('cpu')}, {env.get('cores')} cores; torch "
             f"{env.get('torch')}; {a.model} ({a.size}), batch {spec.batch_size}, seq {spec.seq_len}, {spec.steps} "
             f"steps ({spec.warmup_steps} warmup), 1 thread, dropout 0, lr {a.lr:g}; budget {a.budget_s:.0f} s, "
             f"took {wall:.0f} s; a fresh compile cache (every configuration compiled cold).",
             "", f"`{' '.join(['.venv/bin/python', 'benchmarks/tune_compile.py', *sys.argv[1:]])}`", "",
             f"**Answer**: {res.answer()}", "", f"Search: {res.stop_reason}.", "",
             *[f"Note: {n}" for n in res.notes], "",
             "| trial | configuration | state | median step ms | IQR ms | compile s | parity | reason |",
             "|---|---|---|---|---|---|---|---|"]
    for r in table.itertuples():
        num = lambda v, f: "" if v is None or v != v else format(v, f)  # noqa: E731
        lines.append(f"| {r.number} | {r.label} | {r.state} | {num(r.median_step_ms, '.1f')} | "
                     f"{num(r.step_iqr_ms, '.1f')} | {num(r.compile_s, '.1f')} | {r.parity} | {r.reason or ''} |")
    (HERE / "tune_compile.md").write_text("\n".join(lines) + "\n")
    (HERE / "tune_compile.json").write_text(json.dumps({"env": env, "wall_s": wall, "result": res.to_dict()},
                                                        indent=1, default=str))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
