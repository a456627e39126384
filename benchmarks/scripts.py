"""Your own training script, measured: the README's "Your own training script" figures.

    .venv/bin/python benchmarks/scripts.py                    # both examples, all backends, + overhead (~25 min on 2 cores)
    .venv/bin/python benchmarks/scripts.py --only overhead --pairs 6

1. Each example script (examples/train_loop.py: a plain loop on tiny GPT-2; examples/hf_trainer.py: a Trainer on
   tiny BERT) through ``tc.compare_script`` against eager, ``--rounds`` alternating rounds: speedup with its
   95 % interval, break-even steps, memory ratio and verdict per backend.
2. The overhead of tcbench's two lines: the same script as its own process (``track()`` / the callback are no-ops
   outside a job) against the same script as a tcbench eager job (every step synchronised, recorded and sent),
   A/B then B/A for ``--pairs`` pairs. Each script prints the wall time of its own training loop, so the ratio
   compares the loop alone (not process start-up). Goal: ≤ 1 % (the median of the per-pair ratios, with its
   range across pairs).
3. ``--only pairing``: the plain-loop example against inductor through ``compare_script``'s default (3 rounds),
   ``--repeats`` times in lock-step rounds (the scripts take turns of 5 measured steps, the default on a CPU since
   2026-11-29) and as often in sequential rounds, alternating: each comparison's interval, its per-round spread (log)
   and its wall time.

Writes benchmarks/scripts.md and benchmarks/scripts.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

import tcbench as tc  # noqa: E402

# (script, its own arguments for a run of `steps` steps, the line it prints with its loop's wall time)
SCRIPTS = {
    "train_loop": ("examples/train_loop.py", lambda steps: ["--steps", str(steps), "--batch-size", "8"],
                   re.compile(r"train_loop: (\d+) steps in ([0-9.]+) s")),
    "hf_trainer": ("examples/hf_trainer.py", lambda steps: ["--max-steps", str(steps), "--batch-size", "8"],
                   re.compile(r"hf_trainer: (\d+) steps in ([0-9.]+) s")),
}


def compare_examples(names: list[str], backends: list[str], rounds: int, steps: int) -> list[dict]:
    rows = []
    for name in names:
        script, args, _ = SCRIPTS[name]
        cmp = tc.compare_script(str(ROOT / script), args(steps + 20), backends=backends, rounds=rounds, steps=steps,
                                warmup_steps=5, threads=1)
        for r in cmp.summary().to_dict("records"):
            rows.append({"script": name, "comparison_id": cmp.comparison_id,
                         **{k: r.get(k) for k in ("backend", "status", "median_step_ms", "samples_s", "speedup",
                                                  "speedup_ci_low", "speedup_ci_high", "break_even_steps",
                                                  "break_even_low", "break_even_high", "memory_ratio",
                                                  "memory_ci_low", "memory_ci_high", "peak_mem_mb", "final_loss",
                                                  "verdict_kind", "verdict")}})
        print(f"{name}: comparison {cmp.comparison_id}", flush=True)
    return rows


def _loop_seconds(text: str, pattern: re.Pattern, steps: int) -> float:
    m = pattern.search(text)
    if not m or int(m.group(1)) != steps:
        raise RuntimeError(f"the script did not report {steps} steps: {text[-1500:]}")
    return float(m.group(2))


def overhead(names: list[str], pairs: int, steps: int) -> list[dict]:
    """Per script: loop seconds as a plain process (A) and as a tcbench eager job (B), alternating A B / B A."""
    rows = []
    env = {k: v for k, v in os.environ.items() if not k.startswith("TCBENCH_") or k in ("TCBENCH_HOME", "TCBENCH_DB")}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT),   # the job's thread setting
               TCBENCH_BACKEND="eager")   # natively, as the job: transformers would otherwise pick XLA
    for name in names:
        script, args, pattern = SCRIPTS[name]

        def plain() -> float:
            out = subprocess.run([sys.executable, str(ROOT / script), *args(steps)], env=env, cwd=ROOT,
                                 capture_output=True, text=True, timeout=900)
            return _loop_seconds(out.stdout + out.stderr, pattern, steps)

        def tracked() -> float:
            r = tc.run(tc.JobSpec(script=str(ROOT / script), script_args=args(steps), steps=steps, warmup_steps=5,
                                  threads=1))
            if not r.ok:
                raise RuntimeError(f"{name} as a job: {r.status}: {r.error}")
            return _loop_seconds(r.log_tail, pattern, steps)

        ratios = []
        for i in range(pairs):
            order = (plain, tracked) if i % 2 == 0 else (tracked, plain)
            got = {f.__name__: f() for f in order}
            ratios.append(got["tracked"] / got["plain"])
            print(f"{name} pair {i + 1}: plain {got['plain']:.3f} s, tracked {got['tracked']:.3f} s, "
                  f"ratio {ratios[-1]:.4f}", flush=True)
        rows.append({"script": name, "steps": steps, "pairs": pairs, "ratios": ratios,
                     "median_ratio": statistics.median(ratios), "min_ratio": min(ratios), "max_ratio": max(ratios)})
    return rows


def pairing(repeats: int, rounds: int, steps: int) -> list[dict]:
    """The plain-loop example against inductor, ``repeats`` comparisons per pairing, lock-step and sequential in
    turn."""
    script, args, _ = SCRIPTS["train_loop"]
    rows = []
    for i in range(2 * repeats):
        how = ("lockstep", "sequential")[i % 2]
        cmp = tc.compare_script(str(ROOT / script), args(steps + 20), backends=["inductor"], rounds=rounds,
                                steps=steps, warmup_steps=5, threads=1, pairing=how)
        row, logs = cmp.row("inductor"), cmp._logs("inductor")
        rows.append({"pairing": cmp.pairing, "comparison_id": cmp.comparison_id, "speedup": row.speedup,
                     "low": row.speedup_ci_low, "high": row.speedup_ci_high, "resolution": row.resolution,
                     "spread": statistics.stdev(logs) if len(logs) > 1 else None, "rounds": len(logs), "logs": logs,
                     "wall_s": sum(r.wall_s or 0 for r in cmp.results) if how == "sequential" else
                     sum(max(r.wall_s or 0 for r in cmp.results if r.round == k) for k in range(cmp.rounds)),
                     "verdict": row.verdict_kind})
        print(f"{how}: {row.speedup:.3f} ({row.speedup_ci_low:.3f}-{row.speedup_ci_high:.3f}), spread "
              f"{rows[-1]['spread']}, {rows[-1]['wall_s']:.0f} s of jobs", flush=True)
    return rows


def _num(v):
    return None if v is None or v != v else v   # NaN (a pandas gap) is missing


def _interval(r: dict, key: str, lo: str, hi: str, fmt=lambda v: f"{v:.2f}×") -> str:
    r = {k: _num(v) if isinstance(v, float) else v for k, v in r.items()}
    if r.get(key) is None:
        return "—"
    band = f" [{fmt(r[lo])}, {fmt(r[hi])}]" if r.get(lo) is not None and r.get(hi) is not None else ""
    return fmt(r[key]) + band


def write(results: dict) -> None:
    lines = ["# Your own training script (benchmarks/scripts.py)", "",
             f"Measured {results['when']} on {results['machine']}; 1 thread per job.", ""]
    if results.get("compare"):
        lines += [f"## The examples through compare-script ({results['rounds']} rounds, {results['steps']} steps, 5 warmup)",
                  "", "| script | backend | median step ms | speedup [95 % CI] | break-even steps [range] | "
                  "memory ratio [95 % CI] | verdict |", "| --- | --- | --- | --- | --- | --- | --- |"]
        for r in results["compare"]:
            if r["backend"] == "eager":
                continue
            r = {k: _num(v) if isinstance(v, float) else v for k, v in r.items()}
            be = "—" if r.get("break_even_steps") is None else (
                f"{r['break_even_steps']:.0f} [{r['break_even_low'] or 0:.0f}, "
                f"{'∞' if r.get('break_even_high') is None else format(r['break_even_high'], '.0f')}]")
            lines.append(f"| {r['script']} | {r['backend']} | {r['median_step_ms'] or float('nan'):.1f} | "
                         f"{_interval(r, 'speedup', 'speedup_ci_low', 'speedup_ci_high')} | {be} | "
                         f"{_interval(r, 'memory_ratio', 'memory_ci_low', 'memory_ci_high')} | {r['verdict_kind']} |")
        lines.append("")
    if results.get("overhead"):
        lines += [f"## Overhead of track() / the callback (loop wall time, job ÷ plain process)", "",
                  "| script | steps | pairs | median ratio | range across pairs |", "| --- | --- | --- | --- | --- |"]
        for r in results["overhead"]:
            lines.append(f"| {r['script']} | {r['steps']} | {r['pairs']} | {r['median_ratio']:.4f} "
                         f"({(r['median_ratio'] - 1) * 100:+.1f} %) | {r['min_ratio']:.4f} – {r['max_ratio']:.4f} |")
        lines.append("")
    if results.get("pairing"):
        lines += ["## Lock-step against sequential rounds (train_loop against inductor, `compare_script`'s 3 rounds)",
                  "", f"Measured {results.get('pairing_when', '')}, `--only pairing`.", "",
                  "| pairing | comparison | speedup (95 % interval) | ± | per-round spread (log) | jobs' wall s | "
                  "verdict |", "| --- | --- | --- | --- | --- | --- | --- |"]
        for r in results["pairing"]:
            spread = "–" if r["spread"] is None else f"{r['spread']:.3f}"
            lines.append(f"| {r['pairing']} | {r['comparison_id']} | {r['speedup']:.3f} ({r['low']:.3f}–"
                         f"{r['high']:.3f}) | {r['resolution'] * 100:.1f} % | {spread} | {r['wall_s']:.0f} | "
                         f"{r['verdict']} |")
        lines.append("")
        for how in ("lockstep", "sequential"):
            logs = [x for r in results["pairing"] if r["pairing"] == how for x in r.get("logs", [])]
            if len(logs) > 1:
                se = statistics.stdev(logs) / len(logs) ** 0.5
                lines.append(f"- {how}: every round of the {how} comparisons pooled, {len(logs)} rounds (cold rounds "
                             f"left out): {math.exp(statistics.fmean(logs)):.3f}×, standard error {se:.3f} "
                             f"(log); per-round spread {statistics.stdev(logs):.3f}")
        lines.append("")
    (HERE / "scripts.md").write_text("\n".join(lines))
    (HERE / "scripts.json").write_text(json.dumps(results, indent=1, default=str))
    print("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", choices=["compare", "overhead", "pairing"], default=None)
    p.add_argument("--scripts", default="train_loop,hf_trainer")
    p.add_argument("--backends", default="inductor,xla")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--pairs", type=int, default=6)
    p.add_argument("--repeats", type=int, default=4, help="--only pairing: comparisons per pairing")
    p.add_argument("--overhead-steps", type=int, default=150)
    p.add_argument("--rewrite", action="store_true", help="only rewrite scripts.md from scripts.json")
    a = p.parse_args(argv)
    if a.rewrite:
        write(json.loads((HERE / "scripts.json").read_text()))
        return 0
    names = [n for n in a.scripts.split(",") if n]
    for n in names:
        if n not in SCRIPTS:
            p.error(f"--scripts contains {n!r}; allowed: {', '.join(SCRIPTS)}")
    from tcbench.core.profiles import cpu_model

    today = __import__("datetime").date.today().isoformat()
    machine = f"{cpu_model()}, {len(os.sched_getaffinity(0))} cores"
    results: dict = {"when": today, "machine": machine, "rounds": a.rounds, "steps": a.steps}
    if a.only is not None and (HERE / "scripts.json").exists():   # a partial run keeps the other part's figures
        results = {**results, **json.loads((HERE / "scripts.json").read_text()), "rounds": a.rounds, "steps": a.steps}
    results[f"{a.only or 'all'}_when"] = f"{results['when'] if a.only is None else today}, {machine}"
    if a.only in (None, "compare"):
        results["compare"] = compare_examples(names, a.backends.split(","), a.rounds, a.steps)
    if a.only in (None, "overhead"):
        results["overhead"] = overhead(names, a.pairs, a.overhead_steps)
    if a.only == "pairing":
        results["pairing"] = pairing(a.repeats, a.rounds, a.steps)
    write(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
