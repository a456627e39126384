"""Can tcbench's answers be trusted on a shared machine? The README's "Answers you can trust" figures.

    .venv/bin/python benchmarks/trust.py                 # everything (~25 min on 2 cores)
    .venv/bin/python benchmarks/trust.py --pairs 10 --only aa

1. A/A false verdicts: the same job against itself (3 alternating rounds), ``--pairs`` times on a quiet
   machine and ``--pairs`` times with ``--load`` busy processes competing for the CPU. Goal: 0 confident
   verdicts (faster / slower).
2. Measurement truth: tcbench's median step against ``torch.utils.benchmark``'s measurement of the same
   step (same model, optimizer, batch and threads, in its own process); tcbench's peak RSS (the baseline
   after loading plus the high-water above it) against ``/usr/bin/time -v``'s maximum resident set size of
   the same job process. Goal: within 5 %.
3. Time to a verdict: a warm tiny pair (eager vs inductor, 3 rounds) from call to summary. Goal: ≤ 60 s.

Writes benchmarks/trust.md and benchmarks/trust.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import tcbench as tc  # noqa: E402
from tcbench.runner.process import _cache_dirs, job_env  # noqa: E402

SPEC = tc.JobSpec(model="gpt2", size="tiny", batch_size=8, seq_len=64, steps=30, warmup_steps=5, lr=2e-3,
                  dropout=0.0, threads=1)
CONFIDENT = ("faster", "slower")

TIMER = r'''
import json, sys
import torch
import torch.utils.benchmark as benchmark
from tcbench.job import data as _data
from tcbench.job.models import build_model, model_task
from tcbench.job.backends import get_backend
from tcbench.core.spec import JobSpec
spec = JobSpec.from_json(sys.argv[1])
torch.set_num_threads(spec.threads)
backend = get_backend("eager")
device = backend.setup(spec, "")
ex = _data.load_examples(spec.dataset, "train")
model = build_model(spec.model, spec.size, dropout=spec.dropout, num_labels=_data.num_labels(ex), seed=spec.seed)
backend.prepare(model, spec)
batch = next(_data.batches(model_task(spec.model), ex, _data.load_tokenizer(), spec.batch_size, spec.seq_len,
                           spec.padding, spec.seed))
for _ in range(spec.warmup_steps):
    backend.step(batch)
m = benchmark.Timer(stmt="backend.step(batch)", globals={"backend": backend, "batch": batch},
                    num_threads=spec.threads).blocked_autorange(min_run_time=4.0)
print(json.dumps({"median_step_s": m.median, "iqr_s": m.iqr, "runs": len(m.times)}))
'''


def aa_pairs(n: int, load: int) -> list[dict]:
    """``n`` A/A comparisons (3 rounds each), with ``load`` busy processes running throughout."""
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(load)]
    out = []
    try:
        for i in range(n):
            nf = tc.noise_floor(SPEC, rounds=3)
            out.append({**nf.summary(), "noisy_jobs": sum(r.noisy for r in nf.comparison.results)})
            print(f"   A/A load={load} #{i}: {nf.verdict}", flush=True)
    finally:
        for p in busy:
            p.kill()
            p.wait()
    return out


def timer_step(spec: tc.JobSpec) -> dict:
    env = {**os.environ, "USE_TORCH_XLA": "0", "OMP_NUM_THREADS": str(spec.threads), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", TIMER, spec.to_json()], capture_output=True, text=True, env=env,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def step_truth(rounds: int) -> dict:
    """tcbench's median step ÷ torch.utils.benchmark's median, rounds alternating the order."""
    spec = dataclasses.replace(SPEC, steps=60)
    ratios = []
    for i in range(rounds):
        first, second = (tc.run, timer_step) if i % 2 == 0 else (timer_step, tc.run)
        a, b = first(spec), second(spec)
        job, timer = (a, b) if i % 2 == 0 else (b, a)
        ratios.append(job.median_step_s / timer["median_step_s"])
        print(f"   step truth #{i}: tcbench {job.median_step_s * 1e3:.2f} ms, torch.utils.benchmark "
              f"{timer['median_step_s'] * 1e3:.2f} ms", flush=True)
    return {"ratio": statistics.median(ratios), "rounds": ratios}


def rss_truth(rounds: int) -> dict:
    """tcbench's absolute peak RSS ÷ /usr/bin/time -v's maximum resident set size of the same job process."""
    spec = dataclasses.replace(SPEC, batch_size=64, seq_len=128, steps=12)
    cache, _ = _cache_dirs(spec)
    ratios = []
    for i in range(rounds):
        run_dir = tempfile.mkdtemp(prefix="tcbench-rss-")
        read_fd, write_fd = os.pipe()
        env = job_env(spec, cache)
        env.pop("TCBENCH_PARENT_PID")   # the job's parent is /usr/bin/time here, not this process
        proc = subprocess.Popen(["/usr/bin/time", "-v", sys.executable, "-m", "tcbench.job.worker", spec.to_json(),
                                 str(write_fd), run_dir], pass_fds=(write_fd,), env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=run_dir)
        os.close(write_fd)
        msgs = [json.loads(line) for line in os.fdopen(read_fd)]
        err = proc.communicate()[1]
        maxrss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", err).group(1)) * 1024
        base = next(m["mem_baseline_bytes"] for m in msgs if m["type"] == "meta")
        peak = max(m["mem_bytes"] for m in msgs if m["type"] == "step")
        ratios.append((base + peak) / maxrss)
        print(f"   rss truth #{i}: tcbench {(base + peak) / 2**20:.0f} MiB (baseline {base / 2**20:.0f} + "
              f"{peak / 2**20:.0f}), /usr/bin/time {maxrss / 2**20:.0f} MiB", flush=True)
    return {"ratio": statistics.median(ratios), "rounds": ratios}


def time_to_verdict() -> dict:
    tc.run(dataclasses.replace(SPEC, backend="inductor", steps=8))   # warm the compile cache
    t0 = time.monotonic()
    cmp = tc.compare(SPEC, backends=["inductor"], rounds=3)
    took = time.monotonic() - t0
    row = cmp.summary().iloc[1]
    print(f"   time to a verdict: {took:.0f} s — {row['verdict']}", flush=True)
    return {"seconds": took, "verdict": row["verdict"]}


def _aa_line(name: str, rows: list[dict]) -> str:
    if not rows:
        return f"| {name} | – | – | – | – |"
    kinds = [r["verdict_kind"] for r in rows]
    confident = sum(k in CONFIDENT for k in kinds)
    res = [r["resolvable"] for r in rows if r["resolvable"]]
    spread = f"{min(res):.3f}–{max(res):.3f}×" if res else "–"
    return (f"| {name} | {len(rows)} | **{confident}** | {kinds.count('no measurable difference')} / "
            f"{kinds.count('inconclusive')} | {spread} |")


def markdown(data: dict) -> str:
    env = tc.profile("this-machine").label
    lines = [f"Measured {time.strftime('%Y-%m-%d')} on {env}; spec: {SPEC.model} {SPEC.size}, batch "
             f"{SPEC.batch_size}, seq {SPEC.seq_len}, {SPEC.steps} steps ({SPEC.warmup_steps} warmup), 1 thread.", "",
             "| A/A (3 rounds each) | pairs | confident verdicts (goal 0) | no measurable difference / inconclusive "
             "| resolvable speedup (min–max) |", "|---|---|---|---|---|",
             _aa_line("quiet machine", data.get("aa_quiet", [])),
             _aa_line(f"{data.get('load', 2)} busy processes", data.get("aa_load", []))]
    truth = data.get("step_truth"), data.get("rss_truth")
    lines += ["", "| truth | tcbench ÷ reference (median; rounds) | goal |", "|---|---|---|"]
    if truth[0]:
        lines.append(f"| median step vs torch.utils.benchmark | {truth[0]['ratio']:.3f} "
                     f"({', '.join(f'{x:.3f}' for x in truth[0]['rounds'])}) | within 5 % |")
    if truth[1]:
        lines.append(f"| peak RSS vs /usr/bin/time -v | {truth[1]['ratio']:.3f} "
                     f"({', '.join(f'{x:.3f}' for x in truth[1]['rounds'])}) | within 5 % |")
    if data.get("time_to_verdict"):
        t = data["time_to_verdict"]
        lines += ["", f"Time to a verdict (warm eager vs inductor, 3 rounds): {t['seconds']:.0f} s (goal ≤ 60 s) — "
                      f"{t['verdict']}"]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=10, help="A/A comparisons per condition")
    ap.add_argument("--load", type=int, default=2, help="busy processes in the loaded condition")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the truth measurements")
    ap.add_argument("--only", choices=["aa", "step", "rss", "verdict"], help="one part only (the others are kept)")
    a = ap.parse_args()
    if a.pairs < 1 or a.rounds < 1 or a.load < 0:
        ap.error(f"--pairs and --rounds must be >= 1 and --load >= 0 (got {a.pairs}, {a.rounds}, {a.load})")
    os.environ.setdefault("TCBENCH_DB", str(Path(tempfile.gettempdir()) / "tcbench-trust.db"))
    path = HERE / "trust.json"
    data = json.loads(path.read_text()) if a.only and path.exists() else {}
    data["load"] = a.load

    def save() -> None:
        path.write_text(json.dumps(data, indent=1, default=str))
        (HERE / "trust.md").write_text(markdown(data))

    if a.only in (None, "verdict"):
        data["time_to_verdict"] = time_to_verdict()
        save()
    if a.only in (None, "step"):
        data["step_truth"] = step_truth(a.rounds)
        save()
    if a.only in (None, "rss"):
        data["rss_truth"] = rss_truth(a.rounds)
        save()
    if a.only in (None, "aa"):
        data["aa_quiet"] = aa_pairs(a.pairs, 0)
        save()
        data["aa_load"] = aa_pairs(a.pairs, a.load)
        save()
    print(markdown(data))


if __name__ == "__main__":
    main()
