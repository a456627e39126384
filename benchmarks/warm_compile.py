"""A warm compile against a cold one, in tcbench's own jobs (issue 46's target: at most 10 % of cold on this CPU).

Per spec, in one fresh ``TCBENCH_HOME``: a job on an empty compile cache of its own (``cache="cold"``), then
``--warm`` jobs on the shared cache, the first of which fills it (left out: it is as cold); each job's compile
latency (the warmup's excess over its steady steps), how its loss was compiled (``precompiled``: on torch ≥ 2.14
loaded untraced, ``tcbench.job.precompiled``) and its first losses. Specs: the demo's (gpt2 tiny, batch 8, seq 64,
1 thread) and small BERT (batch 8, seq 128, 2 threads), dropout off.

Reproduce: ``.venv/bin/python benchmarks/warm_compile.py`` (torch 2.9, about 5 minutes on 2 cores) and
``.venv-latest/bin/python benchmarks/warm_compile.py --out benchmarks/warm_compile_latest`` (the newest torch, the
CI leg's ``make setup-latest``); each writes its ``.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--warm", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "warm_compile"))
    ap.add_argument("--table", action="store_true", help="print the table of --out's JSON, run nothing")
    args = ap.parse_args()
    if args.table:
        print(table(args.out + ".json"))
        return
    home = tempfile.mkdtemp(prefix="tcbench-warm-compile-")
    os.environ["TCBENCH_HOME"] = home
    sys.path.insert(0, ROOT)
    import torch

    import tcbench as tc

    specs = {"gpt2 tiny, b8 s64, 1 thread": tc.JobSpec(model="gpt2", size="tiny", backend="inductor", batch_size=8,
                                                       seq_len=64, steps=12, threads=1, dropout=0.0),
             "bert small, b8 s128, 2 threads": tc.JobSpec(model="bert-base-cased", size="small", backend="inductor",
                                                          batch_size=8, seq_len=128, steps=8, threads=2,
                                                          dropout=0.0)}
    rows = []
    for name, spec in specs.items():
        jobs = [("cold", tc.run(dataclasses.replace(spec, cache="cold")))]
        jobs += [("filling" if i == 0 else "warm", tc.run(spec)) for i in range(args.warm + 1)]
        for kind, r in jobs:
            rows.append(dict(spec=name, kind=kind, status=r.status, compile_s=r.compile_latency_s,
                             cache_state=r.cache_state, precompiled=r.precompiled,
                             losses=[round(s.loss, 5) for s in r.records[:3]], error=r.error[-300:]))
            print(json.dumps(rows[-1]), flush=True)
    with open(args.out + ".json", "w") as f:
        json.dump(dict(torch=torch.__version__, rows=rows, summary=summary(rows)), f, indent=1)
    print(table(args.out + ".json"))


def how(state: str | None) -> str:
    """How a job's loss was compiled, in short."""
    state = state or ""
    if state.startswith("loaded"):
        return "loaded untraced"
    return "traced (torch.compile)" if state.startswith("not used") else state.split(" (")[0]


def summary(rows: list[dict]) -> dict:
    out = {}
    for name in dict.fromkeys(r["spec"] for r in rows):
        mine = [r for r in rows if r["spec"] == name and r["status"] == "ok"]
        cold = next(r for r in mine if r["kind"] == "cold")["compile_s"]
        warm = statistics.median(r["compile_s"] for r in mine if r["kind"] == "warm")
        out[name] = dict(cold_s=cold, warm_s=warm, ratio=warm / cold)
    return out


def table(path: str) -> str:
    """The markdown table of a run's JSON."""
    with open(path) as f:
        run = json.load(f)
    lines = [f"torch {run['torch']}", "", "| spec | cold compile, s | warm compile, s (median, range) | warm ÷ cold | "
             "the warm jobs' loss | first losses, cold; warm |", "|---|---|---|---|---|---|"]
    for name, fig in run["summary"].items():
        mine = [r for r in run["rows"] if r["spec"] == name and r["status"] == "ok"]
        cold = next(r for r in mine if r["kind"] == "cold")
        warm = [r for r in mine if r["kind"] == "warm"]
        ws = [r["compile_s"] for r in warm]
        lines.append(f"| {name} | {fig['cold_s']:.2f} | {fig['warm_s']:.2f} ({min(ws):.2f}–{max(ws):.2f}) | "
                     f"{fig['ratio']:.3f} | {', '.join(sorted({how(r['precompiled']) for r in warm}))} | "
                     f"{cold['losses']}; {' / '.join(sorted({str(r['losses']) for r in warm}))} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
