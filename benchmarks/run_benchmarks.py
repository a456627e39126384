"""Reproduce the README's figures in one run (ratios are measured within this run: the machine is shared).

    .venv/bin/python benchmarks/run_benchmarks.py                 # all four configurations, 3 rounds each (~45 min on 2 cores)
    .venv/bin/python benchmarks/run_benchmarks.py --quick         # bert-base-cased tiny only
    .venv/bin/python benchmarks/run_benchmarks.py --overhead-only   # harness overhead only (6 rounds)
    .venv/bin/python benchmarks/run_benchmarks.py --no-overhead     # backend rows only

Per model and size: eager, inductor and xla with a warm (persistent) compile cache, plus a cold-cache job per
compiled backend for the cold compile latency; then the harness overhead: tcbench's eager job against a
minimal hand-written loop of the same model, batch, data and steps (target: within 3%).
Writes benchmarks/results.md (the README's table) and benchmarks/results.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import tcbench as tc  # noqa: E402
from tcbench.runner.process import ALLOCATOR_ENV  # noqa: E402

THREADS = 1   # one thread per job: honest on a shared machine (--threads to change)
ROUNDS = 3   # A B A B A B per configuration: the speedup is the median of the per-round ratios

HAND_LOOP = r'''
import json, os, statistics, sys, time
import torch
from tcbench.job import data as _data
from tcbench.job.models import build_model, model_task
spec = json.loads(sys.argv[1])
torch.set_num_threads(spec["threads"])
task = model_task(spec["model"])
ex = _data.load_examples("builtin", "train")
tok = _data.load_tokenizer()
model = build_model(spec["model"], spec["size"], num_labels=_data.num_labels(ex), seed=spec["seed"]).train()
opt = torch.optim.AdamW(model.parameters(), lr=spec["lr"], fused=True)
it = _data.batches(task, ex, tok, spec["batch_size"], spec["seq_len"], "max_length", spec["seed"])
times = []
for step in range(spec["steps"]):
    batch = next(it)
    t0 = time.perf_counter()
    loss = model(**batch).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    times.append(time.perf_counter() - t0)
    loss.item()
print(json.dumps({"median_step_s": statistics.median(times[spec["warmup_steps"]:])}))
'''


def hand_loop(spec: tc.JobSpec) -> float:
    # the allocator's thresholds a tcbench job runs with (tcbench.runner.process.ALLOCATOR_ENV): the same process
    env = {**ALLOCATOR_ENV, **os.environ, "USE_TORCH_XLA": "0", "OMP_NUM_THREADS": str(spec.threads),
           "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", HAND_LOOP, spec.to_json()], capture_output=True, text=True, env=env,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["median_step_s"]


def bench_config(model: str, size: str, steps: int) -> list[dict]:
    spec = tc.JobSpec(model=model, size=size, batch_size=8, seq_len=128, steps=steps, warmup_steps=5, lr=1e-3,
                      threads=THREADS, loss_every=5)
    for b in ("inductor", "xla"):                                         # fills the persistent caches
        tc.run(dataclasses.replace(spec, backend=b))
    warm = tc.compare(spec, backends=["inductor", "xla"], rounds=ROUNDS)  # the measured, warm-cache rounds
    cold = {b: tc.run(dataclasses.replace(spec, backend=b, cache="cold")) for b in ("inductor", "xla")}
    rows = []
    for _, r in warm.summary().iterrows():
        c = cold.get(r.backend)
        rows.append(dict(model=model, size=size, backend=r.backend, status=r.status, median_step_ms=r.median_step_ms,
                         samples_s=r.samples_s, speedup=r.speedup, speedup_ci_low=r.speedup_ci_low,
                         speedup_ci_high=r.speedup_ci_high, verdict_kind=r.verdict_kind, compile_warm_s=r.compile_latency_s,
                         compile_cold_s=None if c is None else c.compile_latency_s, peak_mem_mb=r.peak_mem_mb,
                         mfu=r.mfu, break_even=r.break_even_steps))
    return rows


def overhead(model: str, size: str, steps: int, rounds: int = 6) -> dict:
    spec = tc.JobSpec(model=model, size=size, batch_size=8, seq_len=128, steps=steps, warmup_steps=5, lr=1e-3,
                      threads=THREADS, dropout=None)
    pairs = []
    for i in range(rounds):   # A B, B A, A B, ...: the machine is shared and its speed drifts within a minute
        if i % 2 == 0:
            job = tc.run(spec).median_step_s
            hand = hand_loop(spec)
        else:
            hand = hand_loop(spec)
            job = tc.run(spec).median_step_s
        pairs.append(job / hand)
        print(f"   overhead {model} {size} round {i}: job {job * 1e3:.1f} ms, hand loop {hand * 1e3:.1f} ms", flush=True)
    return dict(model=model, size=size, overhead_ratio=statistics.median(pairs), rounds=pairs)


def _fmt(v, spec=".1f") -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "–"
    if isinstance(v, float) and v == float("inf"):
        return "never"
    return format(v, spec)


def _speedup(r: dict) -> str:
    lo, hi = r.get("speedup_ci_low"), r.get("speedup_ci_high")
    if r["speedup"] is None or lo is None or hi is None:
        return _fmt(r["speedup"], ".2f")
    return f"{r['speedup']:.2f} ({lo:.2f}–{hi:.2f}) {r.get('verdict_kind') or ''}".rstrip()


def markdown(rows: list[dict], over: list[dict], machine: str) -> str:
    lines = [f"Measured {time.strftime('%Y-%m-%d')} on {machine}, {THREADS} thread(s) per job; batch 8, seq 128, fp32, "
             f"warm cache unless noted; {ROUNDS} alternating rounds (speedup: geometric mean of the per-round ratios with its "
             "95 % bootstrap interval, and the verdict).",
             "",
             "| model | size | backend | status | median step ms | samples/s | speedup vs eager (95 % interval) | compile cold s | "
             "compile warm s | peak mem MiB | MFU | break-even steps |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['size']} | {r['backend']} | {r['status']} | {_fmt(r['median_step_ms'])} | "
                     f"{_fmt(r['samples_s'])} | {_speedup(r)} | {_fmt(r['compile_cold_s'])} | "
                     f"{_fmt(r['compile_warm_s'])} | {_fmt(r['peak_mem_mb'], '.0f')} | {_fmt(r['mfu'], '.3f')} | "
                     f"{_fmt(r['break_even'], '.0f')} |")
    lines += ["", "| harness overhead | tcbench eager job ÷ hand-written loop (median of the rounds; order alternates) |",
              "|---|---|"]
    for o in over:
        lines.append(f"| {o['model']} {o['size']} | {o['overhead_ratio']:.3f} (rounds: {', '.join(f'{x:.3f}' for x in o['rounds'])}) |")
    return "\n".join(lines) + "\n"


def main() -> None:
    global THREADS, ROUNDS
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="bert-base-cased tiny only")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=None,
                    help="threads per job (default 1: OpenMP's spinning threads slow down many-fold when another "
                         "process holds a core)")
    ap.add_argument("--compare-rounds", type=int, default=ROUNDS, help="alternating rounds per backend comparison")
    ap.add_argument("--rounds", type=int, default=6, help="rounds of the harness-overhead pair (median reported)")
    ap.add_argument("--overhead-only", action="store_true",
                    help="measure only the harness overhead; the backend rows of results.json are kept")
    ap.add_argument("--no-overhead", action="store_true",
                    help="measure only the backend rows; the harness-overhead rows of results.json are kept")
    a = ap.parse_args()
    if a.rounds < 1 or a.compare_rounds < 1 or a.steps < 7:
        ap.error(f"--rounds and --compare-rounds must be >= 1 (got {a.rounds}, {a.compare_rounds}) and --steps >= 7 "
                 f"(got {a.steps}: 5 are warmup)")
    THREADS, ROUNDS = a.threads or THREADS, a.compare_rounds
    os.environ.setdefault("TCBENCH_DB", str(Path(tempfile.gettempdir()) / "tcbench-bench.db"))
    configs = [("bert-base-cased", "tiny")] if a.quick else [("bert-base-cased", "tiny"), ("bert-base-cased", "small"),
                                                               ("gpt2", "tiny"), ("gpt2", "small")]
    rows, over = [], []
    if (a.overhead_only or a.no_overhead) and (HERE / "results.json").exists():
        kept = json.loads((HERE / "results.json").read_text())
        rows, over = (kept["rows"], []) if a.overhead_only else ([], kept["overhead"])
    label = tc.profile("this-machine").label

    def save() -> None:   # after every configuration: a long run that is cut short keeps what it measured
        (HERE / "results.md").write_text(markdown(rows, over, label))
        (HERE / "results.json").write_text(json.dumps({"rows": rows, "overhead": over}, indent=1, default=str))

    for model, size in [] if a.no_overhead else configs[:1] + [c for c in configs[1:2] if not a.quick]:
        over.append(overhead(model, size, a.steps, a.rounds))
        save()
    for model, size in configs if not a.overhead_only else []:
        print(f"== {model} {size}", flush=True)
        rows += bench_config(model, size, a.steps)
        save()
    print(markdown(rows, over, label))


if __name__ == "__main__":
    main()
