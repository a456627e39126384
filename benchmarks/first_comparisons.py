"""A first comparison you can trust: does one user's first ``compare()`` agree with the next user's?

    .venv/bin/python benchmarks/first_comparisons.py               # ~35 min on 2 cores
    .venv/bin/python benchmarks/first_comparisons.py --n 4 --rounds 3 --default 1 --truth-rounds 0
    .venv/bin/python benchmarks/first_comparisons.py --pairing lockstep --out benchmarks/lockstep   # issue 44
    .venv/bin/python benchmarks/first_comparisons.py --pairing lockstep --aa --truth-rounds 0 --out benchmarks/lockstep_aa

1. ``--n`` first comparisons of ``--rounds`` rounds each on the demo's spec (tiny GPT-2, eager vs inductor, 1
   thread), each in a Python process of its own on a fresh store (no history: no spread between comparisons can
   widen anything) with the shared, warm compile caches. Reported: each speedup and interval, the launchers its
   rounds forked from; then whether the comparisons measure one speedup (Cochran's Q over their per-round log
   ratios: the heterogeneity test; p ≥ 0.05 wanted) and how many intervals exclude the pooled estimate (at most 1
   of 10 wanted).
2. Truth: ``--truth-rounds`` alternating rounds of a plain loop (a job of 150 steps), each job started as a new
   process (``TCBENCH_LAUNCHER=spawn``: every job its own address layout); the pooled estimate should agree.
3. Time to a verdict: ``--default`` comparisons with ``compare()``'s default settings (rounds until ±5 % or 60 s),
   each a first one as in 1: seconds, rounds, resolution and why they stopped; with the per-round spread and round
   cost of all comparisons, the rounds (Stein's plan) and time that ±5 % needs here.

``--pairing lockstep``: the comparisons (1 and 3) run lock-step rounds (``compare(pairing="lockstep")``); the truth
stays sequential, every job a new process. ``--aa``: eager against eager (A/A), whose truth is 1.

Writes benchmarks/first_comparisons.md and benchmarks/first_comparisons.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import tcbench as tc  # noqa: E402

DEMO = tc.JobSpec(model="gpt2", size="tiny", batch_size=8, seq_len=64, steps=40, warmup_steps=5, lr=2e-3, threads=1)

ONE = r'''
import json, sys, time
import tcbench as tc
from tcbench.measure.interval import log_ratios
from tcbench.measure.metrics import steady
spec = tc.JobSpec.from_json(sys.argv[1])
backend = sys.argv[3]
t0 = time.monotonic()
cmp = tc.compare(spec, backends=[backend], **json.loads(sys.argv[2]))
took = time.monotonic() - t0
label = cmp.backends[1]
row = cmp.row(label)
pairs = cmp.complete_pairs(label)
logs = log_ratios([([s.step_s for s in steady(a.records)], [s.step_s for s in steady(b.records)]) for a, b in pairs])
print("RESULT " + json.dumps(dict(
    speedup=row.speedup, low=row.speedup_ci_low, high=row.speedup_ci_high, verdict_kind=row.verdict_kind,
    verdict=row.verdict, seconds=took, rounds=len(logs), logs=logs, stop_reason=cmp.stop_reason,
    noisy=[f"{r.name}#{r.round}" for r in cmp.results if r.noisy],
    eager_ms=[a.median_step_s * 1e3 for a, _ in pairs], inductor_ms=[b.median_step_s * 1e3 for _, b in pairs],
    launchers=[r.extra.launcher_pid for r in cmp.results])))
'''


def first_comparison(spec: tc.JobSpec, args: dict, env: dict, backend: str = "inductor") -> dict:
    """One default compare() in a process of its own, on a store of its own; its figures."""
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([sys.executable, "-c", ONE, spec.to_json(), json.dumps(args), backend],
                             capture_output=True,
                             text=True, env={**env, "TCBENCH_DB": str(Path(tmp) / "first.db")})
    lines = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
    if out.returncode or not lines:
        raise RuntimeError(f"a comparison failed ({out.returncode}): {out.stderr[-2000:]}")
    return json.loads(lines[-1].removeprefix("RESULT "))


def heterogeneity(rows: list[dict]) -> dict:
    """Do the comparisons measure one speedup? tcbench's test (``interval.heterogeneity``: the one-way analysis of
    variance of their per-round log ratios, τ from its mean squares) and Cochran's Q (each comparison's mean weighted
    by its own rounds' squared standard error; with a few rounds per comparison it rejects too often); the pooled
    (fixed-effect) estimate and how many intervals exclude it."""
    from scipy import stats

    from tcbench.measure.interval import heterogeneity as anova

    est = [(statistics.fmean(r["logs"]), statistics.variance(r["logs"]) / len(r["logs"])) for r in rows
           if len(r["logs"]) >= 2]
    w = [1 / v for _, v in est]
    pooled = sum(wi * m for wi, (m, _) in zip(w, est)) / sum(w)
    q = sum(wi * (m - pooled) ** 2 for wi, (m, _) in zip(w, est))
    k = len(est)
    found = anova([r["logs"] for r in rows])
    excluding = sum(1 for r in rows if r["low"] and (r["low"] > math.exp(pooled) or r["high"] < math.exp(pooled)))
    return dict(k=k, f=found.f, p_f=found.p, tau=found.tau, q=q, p=float(stats.chi2.sf(q, k - 1)),
                pooled=math.exp(pooled), pooled_se=math.sqrt(1 / sum(w)), excluding=excluding)


def truth(rounds: int, env: dict) -> dict | None:
    """Alternating rounds of 150 steps, every job a new process: the speedup no launcher's luck can bias."""
    if rounds < 2:
        return None
    long = DEMO.replace(steps=155, warmup_steps=5)
    row = first_comparison(long, {"rounds": rounds}, {**env, "TCBENCH_LAUNCHER": "spawn"})
    print(f"   truth ({rounds} spawned rounds of 150 steps): {row['speedup']:.3f} [{row['low']:.3f}, "
          f"{row['high']:.3f}]", flush=True)
    return row


def _plan(row: dict) -> tuple[float, int]:
    """The per-round spread of a comparison and the rounds ±5 % needs (Stein's plan with a 4-round pilot)."""
    from scipy import stats

    sd = statistics.stdev(row["logs"]) if len(row["logs"]) >= 2 else float("nan")
    return sd, max(4, math.ceil((stats.t.ppf(0.975, 3) * sd / math.log(1.05)) ** 2)) if sd == sd else 0


def _row_line(i: int, r: dict) -> str:
    sd, _ = _plan(r)
    eager = ", ".join(f"{x:.1f}" for x in r["eager_ms"])
    interval = f"{r['speedup']:.3f} ({r['low']:.3f}–{r['high']:.3f})" if r["low"] else f"{r['speedup']:.3f}"
    return (f"| {i} | {interval} | {r['verdict_kind']} | {r['rounds']} | {r['seconds']:.0f} s | {sd:.3f} | {eager} | "
            f"{len(set(p for p in r['launchers'] if p))} | {r['stop_reason']} |")


HEAD = ["| # | speedup (95 % interval) | verdict | rounds | time | per-round sd | eager median step (ms, per round) | "
        "launchers | why it stopped |", "|---|---|---|---|---|---|---|---|---|"]


def markdown(data: dict) -> str:
    rows, het, tr, first = data["comparisons"], data["heterogeneity"], data["truth"], data["defaults"]
    pairing, versus = data.get("pairing", "sequential"), data.get("versus", "inductor")
    out = [f"Measured {data['date']} on {data['machine']}; the demo's spec (tiny GPT-2, batch 8, seq 64, 40 steps, "
           f"1 thread), eager vs {versus}, {pairing} rounds, each comparison in a process of its own on a fresh store, warm compile "
           "caches. Every round forks from a launcher of its own.", "",
           f"{len(rows)} comparisons of {data['rounds']} rounds each:", "", *HEAD]
    out += [_row_line(i, r) for i, r in enumerate(rows, 1)]
    out += ["", f"Heterogeneity over {het['k']} comparisons: the analysis of variance of their rounds (tcbench's "
                f"test) F = {het['f']:.2f}, **p = {het['p_f']:.3f}** (goal ≥ 0.05), τ = {het['tau']:.3f}; Cochran's "
                f"Q = {het['q']:.1f} on {het['k'] - 1} degrees of freedom, p = {het['p']:.3f}; pooled "
                f"{het['pooled']:.3f} (standard error {het['pooled_se']:.3f} in log units); "
                f"**{het['excluding']} of {len(rows)}** intervals exclude it (goal ≤ 1)."]
    everyone = rows + data["defaults"]
    widths = sorted((r["high"] / r["low"]) ** 0.5 - 1 for r in everyone if r["low"])
    out += ["", f"Of all {len(everyone)} intervals, {sum(1 for r in everyone if r['low'] and not r['low'] <= 1 <= r['high'])} "
                f"exclude 1; median half-width ±{100 * statistics.median(widths):.1f} %."]
    if tr:
        from scipy import stats

        truth_se = math.log(tr["high"] / tr["low"]) / 2 / stats.t.ppf(0.975, tr["rounds"] - 1)
        agree = abs(math.log(tr["speedup"]) - math.log(het["pooled"])) / math.hypot(het["pooled_se"], truth_se)
        out += ["", f"Truth: {tr['rounds']} alternating rounds of 150 steps, every job a new process: "
                    f"{tr['speedup']:.3f} ({tr['low']:.3f}–{tr['high']:.3f}) in {tr['seconds']:.0f} s; the pooled "
                    f"estimate lies {agree:.1f} standard errors from it."]
    if first:
        out += ["", f"{len(first)} default `compare()` calls (until ±5 % or 60 s), each a first one:", "", *HEAD]
        out += [_row_line(i, r) for i, r in enumerate(first, 1)]
    everything = rows + first
    sds = [_plan(r)[0] for r in everything if len(r["logs"]) >= 2]
    per_round = statistics.median(r["seconds"] / max(r["rounds"], 1) for r in everything)
    sd = statistics.median(sds)
    from scipy import stats

    need = max(4, math.ceil((stats.t.ppf(0.975, 3) * sd / math.log(1.05)) ** 2))
    how = f"eager and {versus} together, in turns" if pairing == "lockstep" else f"eager then {versus}, each forked"
    out += ["", f"Time to a verdict: a round ({how}) took {per_round:.1f} s (median), the "
                f"per-round spread of the log ratio was {sd:.3f} (median), so ±5 % needs about {need} rounds "
                f"(Stein's plan after a 4-round pilot), about {need * per_round:.0f} s on this machine."]
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=10, help="first comparisons of --rounds rounds (default 10)")
    ap.add_argument("--rounds", type=int, default=4, help="rounds per comparison in the heterogeneity test (default 4)")
    ap.add_argument("--default", type=int, default=3, help="default compare() calls for the time to a verdict")
    ap.add_argument("--truth-rounds", type=int, default=8, help="spawned rounds of 150 steps (0: none)")
    ap.add_argument("--out", default=str(HERE / "first_comparisons"), help="where the .md and .json go")
    ap.add_argument("--render", action="store_true", help="only write the .md again from the .json")
    ap.add_argument("--pairing", default="sequential", choices=tc.PAIRINGS, help="the comparisons' rounds")
    ap.add_argument("--aa", action="store_true", help="eager against eager (A/A) instead of inductor")
    args = ap.parse_args()
    if args.render:
        data = json.loads(Path(args.out + ".json").read_text())
        data["heterogeneity"] = heterogeneity(data["comparisons"])
        Path(args.out + ".json").write_text(json.dumps(data, indent=1))
        Path(args.out + ".md").write_text(markdown(data))
        print(markdown(data))
        return
    from tcbench.measure.interval import MIN_EARLIER

    if args.n < MIN_EARLIER or args.rounds < 2:   # the heterogeneity test needs MIN_EARLIER comparisons
        ap.error(f"--n {args.n} --rounds {args.rounds}: at least {MIN_EARLIER} comparisons of 2 rounds are needed")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("TCBENCH_LAUNCHER", None)   # the default: jobs forked, every round from a launcher of its own
    tc.run(DEMO.replace(backend="inductor", steps=8, warmup_steps=2))   # the compile caches warm
    rows, first = [], []
    versus, pairing = ("eager" if args.aa else "inductor"), {"pairing": args.pairing}
    for i in range(args.n):
        rows.append(first_comparison(DEMO, {"rounds": args.rounds, **pairing}, env, versus))
        _say(f"{i + 1}/{args.n}", rows[-1])
    for i in range(args.default):
        first.append(first_comparison(DEMO, pairing, env, versus))
        _say(f"default {i + 1}/{args.default}", first[-1])
    data = dict(date=time.strftime("%Y-%m-%d"), machine=f"{platform.processor() or platform.machine()}, "
                f"{os.cpu_count()} cores ({_cpu_name()})", rounds=args.rounds, comparisons=rows,
                pairing=args.pairing, versus=versus,
                heterogeneity=heterogeneity(rows), truth=truth(args.truth_rounds, env), defaults=first)
    Path(args.out + ".json").write_text(json.dumps(data, indent=1))
    Path(args.out + ".md").write_text(markdown(data))
    print(markdown(data))


def _say(what: str, r: dict) -> None:
    print(f"{what}: {r['speedup']:.3f} [{r['low']:.3f}, {r['high']:.3f}] {r['verdict_kind']}, {r['rounds']} rounds, "
          f"{r['seconds']:.0f} s, eager ms {[round(x, 1) for x in r['eager_ms']]}", flush=True)


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return "unknown CPU"


if __name__ == "__main__":
    main()
