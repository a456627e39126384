"""tcbench's compiled job against what a user gets by hand: HF ``Trainer(torch_compile=True)`` and a plain loop.

    .venv/bin/python benchmarks/vs_trainer.py                       # small BERT, batch 8, seq 128, 2 threads
    .venv/bin/python benchmarks/vs_trainer.py --model gpt2 --size tiny --seq-len 64 --threads 1 --out ...

The same model (built from the same configuration), batch, sequence length, lr and threads, each job a process of
its own (``tc.run``: tcbench's step records for all of them), in rounds whose order is shuffled; a first round
fills the compile caches and is left out. With ``--pairing lockstep`` every round runs its jobs together and they take
turns of 5 measured steps (``tcbench.runner.turns``, as ``compare``'s lock-step rounds do, scripts included since
2026-11-29), so each job's blocks are measured next to the others' and the machine's drift cancels. Jobs:

- ``tcbench``: tcbench's Inductor job as ``compare`` runs it (the model compiled; the optimizer eager, torch's fused
  AdamW, as the Trainer runs it).
- ``tcbench, compiled optimizer``: the same with ``compile_optimizer=True`` (``optimizer.step`` compiled too: foreach
  AdamW fused by Inductor; tcbench's default until 2026-11-29).
- ``Trainer``: ``examples/hf_trainer.py`` under the inductor backend (``torch_compile=True``; transformers' default
  fused AdamW), as ``compare-script`` runs it; for GPT-2, ``benchmarks/plain_loop.py --trainer`` (the plain loop's
  model and batches through the same two tcbench lines).
- ``plain loop``: ``benchmarks/plain_loop.py``: ``torch.compile(model)``, torch's default AdamW, nothing else.

Each job's step is its 10th-percentile steady step (``fast_step``, as a comparison reads it), its median beside it.
Per round, each job's step ÷ tcbench's; across rounds the mean log ratio with its 95 % t-interval.

Then (``--lockstep-rounds``, 0 to skip) the optimizer choice alone, as ``compare`` measures a speedup:
``tc.compare_configs`` of the compiled-optimizer job against tcbench's default in lock-step rounds (both jobs alive,
taking turns), which cancels the machine's drift that separate processes minutes apart cannot. Writes ``--out``.md
and .json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import shlex
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import tcbench as tc  # noqa: E402
from tcbench.measure.interval import log_interval  # noqa: E402
from tcbench.runner.process import run as run_job  # noqa: E402
from tcbench.runner.turns import Turns  # noqa: E402

REF = "tcbench"


def specs(a: argparse.Namespace) -> dict[str, tc.JobSpec]:
    model = {"bert": "bert-base-cased", "gpt2": "gpt2"}[a.model]
    common = dict(steps=a.steps, warmup_steps=a.warmup, threads=a.threads, batch_size=a.batch_size, seq_len=a.seq_len)
    own = tc.JobSpec(model=model, size=a.size, lr=a.lr, backend="inductor", **common)
    out = {REF: own, "tcbench, compiled optimizer": own.replace(compile_optimizer=True)}
    args = ("--size", a.size, "--seq-len", str(a.seq_len), "--batch-size", str(a.batch_size), "--lr", str(a.lr))
    if a.model == "bert":
        out["Trainer"] = tc.JobSpec(script=str(HERE.parent / "examples" / "hf_trainer.py"), backend="inductor",
                                    script_args=args, model="hf_trainer", **common)
    else:   # GPT-2: the plain loop's model and batches through the Trainer (the example trains BERT)
        out["Trainer"] = tc.JobSpec(script=str(HERE / "plain_loop.py"), backend="inductor", model="plain_loop",
                                    script_args=("--model", a.model, "--trainer", *args), **common)
    out["plain loop"] = tc.JobSpec(script=str(HERE / "plain_loop.py"), backend="eager", model="plain_loop",
                                   script_args=("--model", a.model, *args), **common)
    wanted = [REF, *(j for j in a.jobs.split(",") if j)] if a.jobs else list(out)
    for label in wanted:
        if label not in out:
            raise SystemExit(f"--jobs names {label!r}; allowed: {', '.join(k for k in out if k != REF)}")
    return {label: spec for label, spec in out.items() if label in wanted}


def job(label: str, spec: tc.JobSpec, store: tc.Store, result: "tc.JobResult | None" = None) -> dict:
    t0 = time.perf_counter()
    r = result if result is not None else tc.run(spec, store=store)
    if not r.ok:
        raise SystemExit(f"{label}: {r.status}: {(r.error or '')[-800:]}")
    row = dict(label=label, fast_ms=r.fast_step_s * 1e3, median_ms=r.median_step_s * 1e3,
               compile_s=r.compile_latency_s, noisy=bool(r.noisy), wall_s=time.perf_counter() - t0)
    print(f"  {label}: fast {row['fast_ms']:.1f} ms, median {row['median_ms']:.1f} ms, compile "
          f"{row['compile_s'] or 0:.1f} s, noisy={row['noisy']}, {row['wall_s']:.0f} s", flush=True)
    return row


def together(jobs: dict[str, tc.JobSpec], order: list[str], rnd: int, store: tc.Store) -> dict[str, dict]:
    """One lock-step round: every job started at once (each waited on by a thread), taking turns in ``order``."""
    turns, draw, results = Turns([f"{label}#{rnd}" for label in order]), object(), {}

    def one(label: str) -> None:
        results[label] = run_job(jobs[label], None, None, store, None, rnd, f"{label}#{rnd}", draw=draw, turns=turns)

    threads = [threading.Thread(target=one, args=(label,)) for label in order]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"  ({turns.turns} turns)", flush=True)
    return {label: job(label, jobs[label], store, results[label]) for label in order}


def summarise(rounds: list[dict[str, dict]], labels: list[str]) -> list[dict]:
    rows = []
    for label in labels:
        for stat in ("fast_ms", "median_ms"):
            logs = [math.log(r[label][stat] / r[REF][stat]) for r in rounds]
            point, lo, hi = log_interval(logs)   # compare's t-interval; one round: no interval
            rows.append(dict(label=label, statistic=stat, step_ms=statistics.median(r[label][stat] for r in rounds),
                             ratio=point, low=lo, high=hi, spread=statistics.stdev(logs) if len(logs) > 1 else None))
    return rows


def _num(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"


def markdown(a: argparse.Namespace, rows: list[dict], rounds: list[dict], cmd: str) -> str:
    head = (f"Measured {time.strftime('%Y-%m-%d')} on {platform.machine()}, {os.cpu_count()} "
            f"cores; `{cmd}`. {a.model} {a.size}, batch {a.batch_size}, seq {a.seq_len}, {a.threads} thread(s), "
            f"{a.steps} steps ({a.warmup} warmup) a job, {len(rounds)} rounds in shuffled order after one that filled "
            "the compile caches; each job its own process"
            + ("; **lock-step rounds**: a round's jobs alive together, taking turns of 5 measured steps" if
               a.pairing == "lockstep" else "; one job after the other") + ".\n\n"
            "A job's step ÷ tcbench's Inductor job's step in the same round (below 1: faster than tcbench's), the mean "
            "of the per-round log ratios with its 95 % t-interval.\n\n"
            "| job | statistic | step (ms, median of rounds) | ÷ tcbench (95 % interval) | per-round spread (log) |\n"
            "|---|---|---|---|---|\n")
    body = "".join(f"| {r['label']} | {'10th percentile' if r['statistic'] == 'fast_ms' else 'median'} | "
                   f"{r['step_ms']:.1f} | {r['ratio']:.3f} ({_num(r['low'])}–{_num(r['high'])}) | "
                   f"{_num(r['spread'])} |\n"
                   for r in rows)
    return head + body


def lockstep(a: argparse.Namespace, own: tc.JobSpec) -> dict:
    """tcbench's default against the compiled optimizer step, ``compare``'s lock-step rounds: the speedup of the fused
    eager optimizer over the compiled one, with its interval."""
    store = tc.Store(Path(tempfile.mkdtemp()) / "vs_trainer_lockstep.db")
    label = "fused AdamW eager (default)"
    cmp = tc.compare_configs(own.replace(compile_optimizer=True), {label: own}, rounds=a.lockstep_rounds, store=store)
    row = cmp.row(label)
    out = dict(rounds=cmp.rounds, pairing=cmp.pairing, speedup=row.speedup, low=row.speedup_ci_low,
               high=row.speedup_ci_high, verdict=row.verdict,
               compile_s={k: statistics.median(r.compile_latency_s for r in cmp.by_backend(k) if r.compile_latency_s)
                          for k in cmp.backends})
    print(f"lock-step: {out['verdict']}; compile {out['compile_s']}", flush=True)
    return out


def lockstep_markdown(a: argparse.Namespace, ls: dict) -> str:
    compiled, fused = ls["compile_s"].values()
    return ("\n**The optimizer choice alone, in lock-step rounds** (`tc.compare_configs`, "
            f"{ls['rounds']} {ls['pairing']} rounds, each round its own launcher): tcbench's default (the model "
            "compiled, fused AdamW eager) against the same job with `compile_optimizer=True`: "
            f"**{ls['speedup']:.3f}× ({ls['low']:.3f}–{ls['high']:.3f})** — {ls['verdict']}. Compile latency, median "
            f"of the rounds (round 0's cold compile among them): {fused:.1f} s fused against {compiled:.1f} s "
            "compiled.\n")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=["bert", "gpt2"], default="bert")
    p.add_argument("--size", default="small")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lockstep-rounds", type=int, default=8)
    p.add_argument("--jobs", default="", help="the jobs beside tcbench's, comma-separated (default: all)")
    p.add_argument("--pairing", choices=["sequential", "lockstep"], default="sequential",
                   help="lockstep: a round's jobs together, taking turns of 5 measured steps")
    p.add_argument("--out", default=str(HERE / "vs_trainer"))
    a = p.parse_args(argv)
    jobs = specs(a)
    labels = [k for k in jobs if k != REF]
    store = tc.Store(Path(tempfile.mkdtemp()) / "vs_trainer.db")
    rng = random.Random(a.seed)
    print("round 0 (fills the compile caches, left out)", flush=True)
    for label, spec in jobs.items():
        job(label, spec, store)
    rounds = []
    for i in range(1, a.rounds + 1):
        order = list(jobs)
        rng.shuffle(order)
        print(f"round {i}: {', '.join(order)}", flush=True)
        if a.pairing == "lockstep":
            rounds.append(together(jobs, order, i, store))
        else:
            rounds.append({label: job(label, jobs[label], store) for label in order})
    rows = summarise(rounds, labels)
    cmd = "python benchmarks/vs_trainer.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    text = markdown(a, rows, rounds, cmd.strip())
    ls = lockstep(a, jobs[REF]) if a.lockstep_rounds else None
    if ls is not None:
        text += lockstep_markdown(a, ls)
    print(text)
    Path(a.out + ".md").write_text(text)
    Path(a.out + ".json").write_text(json.dumps(dict(args=vars(a), rows=rows, rounds=rounds, lockstep=ls), indent=1))


if __name__ == "__main__":
    main()
