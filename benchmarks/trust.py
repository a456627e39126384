"""Can tcbench's answers be trusted on a shared machine? The README's "Answers you can trust" figures.

    .venv/bin/python benchmarks/trust.py                 # everything (~40 min on 2 cores)
    .venv/bin/python benchmarks/trust.py --pairs 20 --only coverage

1. Coverage: the same job against itself (A/A, 3 alternating rounds), ``--pairs`` times on a quiet machine and
   ``--pairs`` times beside a bursty busy process (busy and idle in random 0.2-1.5 s spells). Reported: the share of
   raw 95 % intervals that exclude 1 (goal: at most 5 %, quiet and loaded; no verdict rule special-cases A/A) and
   the verdicts.
2. Time to a verdict: ``tc.compare()`` with its default settings (rounds added until ±5 % or 60 s), warm tiny GPT-2,
   eager vs inductor, quiet and beside the bursty process: seconds, rounds, the resolution reached, why it stopped.
3. Truth: the same speedup from 10 alternating separate-process rounds of 150 steps each; the default compare's
   interval should contain it. ``repeat``: ``--repeats`` more default compares on a quiet machine, each checked
   against it (does its interval contain it; the difference over its standard error).
4. XLA on CPU: eager vs xla with the default settings on a quiet machine (a decisive verdict when its interval
   excludes 1) and beside the bursty process.
5. Job length: the same pair at 20, 40 and 80 steps per job, 6 rounds each: the spread of the per-round log ratios
   and the time per round, so the time to ±5 % each length would need (Stein's plan: (t(0.975,3)·s/log 1.05)² rounds).
6. Measurement truth: tcbench's median step against ``torch.utils.benchmark``'s measurement of the same step (same
   model, optimizer, batch and threads, in its own process); tcbench's peak RSS against ``/usr/bin/time -v``'s
   maximum resident set size of the same job process. Goal: within 5 %.

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
DEMO = tc.JobSpec(model="gpt2", size="tiny", batch_size=8, seq_len=64, steps=40, warmup_steps=5, lr=2e-3, threads=1)

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


BURSTY = r"""
import random, time
rng = random.Random(0)
while True:
    end = time.monotonic() + rng.uniform(0.2, 1.5)
    while time.monotonic() < end:
        pass
    time.sleep(rng.uniform(0.2, 1.5))
"""


class Bursty:
    """A busy process that works and rests in random 0.2-1.5 s spells (``n=0``: nothing)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __enter__(self) -> "Bursty":
        self.procs = [subprocess.Popen([sys.executable, "-c", BURSTY]) for _ in range(self.n)]
        return self

    def __exit__(self, *exc) -> None:
        for p in self.procs:
            p.kill()
            p.wait()


def _pair_row(cmp: tc.Comparison, label: str, seconds: float) -> dict:
    row = cmp.row(label)
    return dict(seconds=seconds, rounds=cmp.rounds, speedup=row.speedup, low=row.speedup_ci_low,
                high=row.speedup_ci_high, resolution=row.resolution, verdict_kind=row.verdict_kind,
                verdict=row.verdict, stop_reason=cmp.stop_reason, noisy_jobs=sum(r.noisy for r in cmp.results),
                job_wall_s=[r.wall_s for r in cmp.results], pairing=cmp.pairing, comparison_id=cmp.comparison_id)


def coverage(n: int, load: int, rounds: int | None = 3) -> list[dict]:
    """``n`` A/A comparisons (``rounds`` fixed rounds each; None: compare's default adaptive rule), beside ``load``
    bursty processes."""
    out = []
    with Bursty(load):
        for i in range(n):
            t0 = time.monotonic()
            cmp = tc.compare(SPEC, backends=["eager"], rounds=rounds)
            out.append(_pair_row(cmp, cmp.backends[1], time.monotonic() - t0))
            r = out[-1]
            interval = "no interval" if r["low"] is None else f"{r['low']:.3f}-{r['high']:.3f}"
            print(f"   A/A load={load} #{i}: {interval} {r['verdict_kind']}", flush=True)
    return out


def time_to_verdict(load: int, backend: str = "inductor") -> dict:
    """``tc.compare(DEMO, backends=[backend])`` with its default rounds, its compile cache warm, beside ``load``."""
    tc.run(dataclasses.replace(DEMO, backend=backend, steps=8))   # warm the compile cache
    with Bursty(load):
        t0 = time.monotonic()
        cmp = tc.compare(DEMO, backends=[backend])
        row = _pair_row(cmp, backend, time.monotonic() - t0)
    print(f"   {backend} load={load}: {row['seconds']:.0f} s, {cmp.rounds_note} — {row['verdict']}", flush=True)
    return row


def truth(rounds: int) -> dict:
    """The demo spec's speedup from ``rounds`` alternating separate-process rounds of 150 steps after 5 warmup."""
    long = dataclasses.replace(DEMO, steps=155, warmup_steps=5)
    t0 = time.monotonic()
    cmp = tc.compare(long, backends=["inductor"], rounds=rounds)
    row = _pair_row(cmp, "inductor", time.monotonic() - t0)
    print(f"   truth ({rounds} rounds of 150 steps): {row['speedup']:.3f} [{row['low']:.3f}, {row['high']:.3f}]",
          flush=True)
    return row


def job_length(lengths: tuple[int, ...] = (20, 40, 80), rounds: int = 6) -> list[dict]:
    """Per job length: the per-round log ratios' spread and the seconds per round, and so the time to ±5 %."""
    import math

    from scipy import stats

    from tcbench.measure.interval import PILOT_ROUNDS, log_ratios
    from tcbench.measure.metrics import steady

    out = []
    for steps in lengths:
        spec = dataclasses.replace(DEMO, steps=steps + DEMO.warmup_steps)
        t0 = time.monotonic()
        cmp = tc.compare(spec, backends=["inductor"], rounds=rounds)
        took = time.monotonic() - t0
        logs = log_ratios([([s.step_s for s in steady(a.records)], [s.step_s for s in steady(b.records)])
                           for a, b in cmp.complete_pairs("inductor")])
        sd = statistics.stdev(logs)
        need = max(PILOT_ROUNDS, math.ceil((stats.t.ppf(0.975, PILOT_ROUNDS - 1) * sd / math.log(1.05)) ** 2))
        out.append(dict(steps=steps, rounds=len(logs), sd=sd, round_s=took / rounds, rounds_to_5pct=need,
                        seconds_to_5pct=need * took / rounds, speedup=cmp.row("inductor").speedup))
        print(f"   {steps} steps: sd {sd:.3f}, {took / rounds:.1f} s/round -> ±5 % in ~{need} rounds, "
              f"{need * took / rounds:.0f} s", flush=True)
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
        env = job_env(spec, cache, Path(run_dir))
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


def _excludes(rows: list[dict]) -> tuple[int, int]:
    return sum(1 for r in rows if r["low"] is not None and (r["low"] > 1 or r["high"] < 1)), len(rows)


def _coverage_line(name: str, rows: list[dict]) -> str:
    if not rows:
        return f"| {name} | – | – | – | – |"
    out, n = _excludes(rows)
    kinds = [r["verdict_kind"] for r in rows]
    res = sorted(r["resolution"] for r in rows if r["resolution"] is not None)
    spread = f"±{statistics.median(res):.1%} (±{res[0]:.1%}–±{res[-1]:.1%})" if res else "–"
    return (f"| {name} | {n} | **{out} ({out / n:.0%})** | "
            f"{' / '.join(str(kinds.count(k)) for k in ('faster', 'slower', 'no measurable difference', 'inconclusive'))}"
            f" | {spread} |")


def _verdict_line(name: str, r: dict | None) -> str:
    if not r:
        return f"| {name} | – | – | – | – |"
    return (f"| {name} | {r['seconds']:.0f} s | {r['rounds']} | ±{r['resolution']:.1%} | {r['stop_reason']} | "
            f"{r['verdict']} |")


def _agreement(a: dict, b: dict) -> float:
    """The difference of two speedups' logs over its standard error (each interval's half-width ÷ its t quantile):
    within ±2, the two measurements agree."""
    import math

    from scipy import stats

    def se(r: dict) -> float:
        return math.log(r["high"] / r["low"]) / 2 / stats.t.ppf(0.975, max(r["rounds"] - 1, 1))

    return (math.log(b["speedup"]) - math.log(a["speedup"])) / math.hypot(se(a), se(b))


def markdown(data: dict) -> str:
    env = tc.profile("this-machine").label
    lines = [f"Measured {data.get('date', time.strftime('%Y-%m-%d'))} on {env}; A/A spec: {SPEC.model} {SPEC.size}, "
             f"batch {SPEC.batch_size}, seq {SPEC.seq_len}, {SPEC.steps} steps ({SPEC.warmup_steps} warmup), 1 thread; "
             f"the other rows: the demo's spec ({DEMO.steps} steps).", "",
             "| A/A, 3 rounds each | pairs | intervals excluding 1 (goal ≤ 5 %) | faster / slower / no measurable "
             "difference / inconclusive | resolution (median, min–max) |", "|---|---|---|---|---|",
             _coverage_line("quiet machine", data.get("aa_quiet", [])),
             _coverage_line("beside a bursty busy process", data.get("aa_load", []))]
    both = data.get("aa_quiet", []) + data.get("aa_load", [])
    if both:
        out, n = _excludes(both)
        lines.append(f"| all | {n} | **{out} ({out / n:.0%})** | | |")
    lines += ["", "| default `compare()` (until ±5 % or 60 s), warm | time | rounds | resolution | why it stopped | "
                  "verdict |", "|---|---|---|---|---|---|",
              _verdict_line("eager vs inductor, quiet", data.get("verdict_quiet")),
              _verdict_line("eager vs inductor, bursty busy process", data.get("verdict_load")),
              _verdict_line("eager vs xla, quiet", data.get("xla_quiet")),
              _verdict_line("eager vs xla, bursty busy process", data.get("xla_load"))]
    if data.get("truth"):
        t = data["truth"]
        answers = [q for q in [data.get("verdict_quiet"), *data.get("verdict_repeats", [])] if q and q.get("low")]
        lines += ["", f"Truth: {t['rounds']} alternating separate-process rounds of 150 steps: {t['speedup']:.3f}× "
                      f"[{t['low']:.3f}, {t['high']:.3f}] in {t['seconds']:.0f} s.", "",
                  "| default `compare()`, quiet | interval | contains the truth | difference ÷ its standard error |",
                  "|---|---|---|---|"]
        lines += [f"| {q['speedup']:.3f}× in {q['seconds']:.0f} s, {q['rounds']} rounds | [{q['low']:.3f}, "
                  f"{q['high']:.3f}] | {'yes' if q['low'] <= t['speedup'] <= q['high'] else '**no**'} | "
                  f"{_agreement(t, q):+.1f} |" for q in answers]
    if data.get("length"):
        lines += ["", "| steps per job | per-round log-ratio spread | s per round | rounds to ±5 % (Stein) | "
                      "time to ±5 % |", "|---|---|---|---|---|"]
        lines += [f"| {r['steps']} | {r['sd']:.3f} | {r['round_s']:.1f} | {r['rounds_to_5pct']} | "
                  f"{r['seconds_to_5pct']:.0f} s |" for r in data["length"]]
    truth_rows = data.get("step_truth"), data.get("rss_truth")
    if any(truth_rows):
        lines += ["", "| truth | tcbench ÷ reference (median; rounds) | goal |", "|---|---|---|"]
    if truth_rows[0]:
        lines.append(f"| median step vs torch.utils.benchmark | {truth_rows[0]['ratio']:.3f} "
                     f"({', '.join(f'{x:.3f}' for x in truth_rows[0]['rounds'])}) | within 5 % |")
    if truth_rows[1]:
        lines.append(f"| peak RSS vs /usr/bin/time -v | {truth_rows[1]['ratio']:.3f} "
                     f"({', '.join(f'{x:.3f}' for x in truth_rows[1]['rounds'])}) | within 5 % |")
    return "\n".join(lines) + "\n"


PARTS = ("coverage", "verdict", "repeat", "truth", "xla", "length", "step", "rss")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=20, help="A/A comparisons per condition (quiet, loaded)")
    ap.add_argument("--load", type=int, default=1, help="bursty busy processes in the loaded condition")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the step and RSS truth measurements")
    ap.add_argument("--repeats", type=int, default=3, help="more default compares on a quiet machine (the truth's)")
    ap.add_argument("--only", choices=PARTS, action="append", help="these parts only (the others are kept)")
    a = ap.parse_args()
    if a.pairs < 1 or a.rounds < 1 or a.load < 1:
        ap.error(f"--pairs, --rounds and --load must be >= 1 (got {a.pairs}, {a.rounds}, {a.load})")
    os.environ.setdefault("TCBENCH_DB", str(Path(tempfile.gettempdir()) / "tcbench-trust.db"))
    path = HERE / "trust.json"
    data = json.loads(path.read_text()) if a.only and path.exists() else {}
    for key in ("aa_quiet", "aa_load", "time_to_verdict"):   # rows of the format before adaptive rounds
        if key in data and (not isinstance(data[key], list) or not data[key] or "low" not in data[key][0]):
            del data[key]
    data.update(load=a.load, date=time.strftime("%Y-%m-%d"))
    parts = a.only or PARTS

    def save() -> None:
        path.write_text(json.dumps(data, indent=1, default=str))
        (HERE / "trust.md").write_text(markdown(data))

    steps = {"verdict": [("verdict_quiet", lambda: time_to_verdict(0)),
                         ("verdict_load", lambda: time_to_verdict(a.load))],
             "truth": [("truth", lambda: truth(10))],
             "repeat": [("verdict_repeats", lambda: [time_to_verdict(0) for _ in range(a.repeats)])],
             "xla": [("xla_quiet", lambda: time_to_verdict(0, "xla")),
                     ("xla_load", lambda: time_to_verdict(a.load, "xla"))],
             "length": [("length", job_length)],
             "step": [("step_truth", lambda: step_truth(a.rounds))],
             "rss": [("rss_truth", lambda: rss_truth(a.rounds))],
             "coverage": [("aa_quiet", lambda: coverage(a.pairs, 0)),
                          ("aa_load", lambda: coverage(a.pairs, a.load))]}
    for part in PARTS:
        if part in parts:
            for key, measure in steps[part]:
                data[key] = measure()
                save()
    print(markdown(data))


if __name__ == "__main__":
    main()
