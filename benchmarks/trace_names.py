"""What naming every traced line costs a compile (issue 46, item 2: a warm compile at most 10 % of cold).

Dynamo (torch 2.9, Python ≥ 3.11) names the function of every line it puts into a graph, for its ``trace_call``
debug log, whether that log is on or not, and names a file by tokenizing all of it in Python
(``torch._dynamo.funcname_cache``). tcbench's Inductor jobs ask for the names only while a trace log is on
(``tcbench.job.backends.inductor.trace_log_names_on_demand``). This measures both ways on the demo's model (gpt2 tiny,
batch 8, seq 64, 1 thread, the fused AdamW left eager, as tcbench's compiled job has it), each in fresh processes on
one Inductor cache, after one cold process has filled it: ``torch`` (Dynamo as it is) and ``on demand``, alternating
their order pair by pair. Per process: the first step's seconds (the compile, warm), Dynamo's trace
(``bytecode_tracing``) and the first three losses (the compiled program must be the same). Inductor's vector-ISA
check is replayed from its record in both, as in tcbench's jobs (``vec_isa_checked_once``).

Reproduce: ``.venv/bin/python benchmarks/trace_names.py`` (about 3 minutes on 2 cores: one cold compile of 30-40 s,
then 5 pairs); writes ``benchmarks/trace_names.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WAYS = ("torch", "on demand")

CHILD = r'''
import json, sys, time
sys.path.insert(0, sys.argv[2])
import torch
torch.set_num_threads(1)
from tcbench.job.backends.inductor import trace_log_names_on_demand, vec_isa_checked_once
from tcbench.job.models import build_model
vec_isa_checked_once()
if sys.argv[1] == "on demand":
    trace_log_names_on_demand()
model = build_model("gpt2", "tiny", seed=0).train()
opt = torch.optim.AdamW(model.parameters(), lr=2e-3, fused=True)
forward = torch.compile(model)
ids = torch.randint(7, 1000, (8, 64), generator=torch.Generator().manual_seed(0))
batch = dict(input_ids=ids, attention_mask=torch.ones_like(ids), labels=ids)
losses, first = [], None
for i in range(3):
    t = time.perf_counter()
    loss = forward(**batch).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    losses.append(round(loss.item(), 5))
    first = first or time.perf_counter() - t
from torch._dynamo.utils import compile_times
names, values = compile_times(repr="csv", aggregate=True)
took = {n: float(v) for n, v in zip(names, values)}
print(json.dumps(dict(first_step_s=first, dynamo_trace_s=took.get("bytecode_tracing"), losses=losses)))
'''


def one(way: str, env: dict[str, str]) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, way, ROOT], env=env, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "trace_names"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
        rows = [dict(way="on demand", cache="cold", **one("on demand", env))]
        for i in range(args.pairs):
            for way in (WAYS if i % 2 == 0 else WAYS[::-1]):
                rows.append(dict(way=way, cache="warm", pair=i, **one(way, env)))
    cold = rows[0]["first_step_s"]
    lines = ["| way | cache | processes | first step (the compile), s | Dynamo's trace, s | ÷ cold | losses |",
             "|---|---|---|---|---|---|---|",
             f"| on demand | cold | 1 | {cold:.2f} | {rows[0]['dynamo_trace_s']:.2f} | 1 | "
             f"{', '.join(map(str, rows[0]['losses']))} |"]
    summary = {}
    for way in WAYS:
        warm = [r for r in rows if r["way"] == way and r["cache"] == "warm"]
        firsts, traces = [r["first_step_s"] for r in warm], [r["dynamo_trace_s"] for r in warm]
        med = statistics.median(firsts)
        summary[way] = dict(first_step_s=med, dynamo_trace_s=statistics.median(traces), of_cold=med / cold)
        lines.append(f"| {way} | warm | {len(warm)} | {med:.2f} ({min(firsts):.2f}–{max(firsts):.2f}) | "
                     f"{statistics.median(traces):.2f} ({min(traces):.2f}–{max(traces):.2f}) | {med / cold:.3f} | "
                     f"{', '.join(sorted({', '.join(map(str, r['losses'])) for r in warm}))} |")
    pairs = [(a["first_step_s"], b["first_step_s"]) for a in rows if a.get("way") == "torch"
             for b in rows if b.get("way") == "on demand" and b.get("pair") == a.get("pair")]
    saved = [a - b for a, b in pairs]
    lines.append(f"\nper pair, torch − on demand: median {statistics.median(saved):.2f} s "
                 f"({min(saved):.2f}–{max(saved):.2f}) over {len(saved)} pairs")
    with open(args.out + ".json", "w") as f:
        json.dump(dict(torch=__import__("torch").__version__, rows=rows, summary=summary, saved_s=saved), f, indent=1)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
