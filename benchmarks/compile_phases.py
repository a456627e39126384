"""Where a compiled job's compile latency goes: Dynamo, AOTAutograd, Inductor and the rest of the first steps, for a
cold compile (``cache="cold"``: a fresh compile cache of the job's own), a warm one (the shared cache, filled by the
cold job before it) and one from compile artifacts (``cache="artifacts"``: a fresh cache into which the artifacts the
earlier jobs kept for this key are loaded first, as on a new machine), measured in one run.

    .venv/bin/python benchmarks/compile_phases.py                  # tiny GPT-2 and tiny BERT, 3 rounds (~9 min)
    .venv/bin/python benchmarks/compile_phases.py --models gpt2 --rounds 5

Each round runs, per model, a cold job then a warm one (1 thread, batch 8, seq 64, 8 steps of which 2 warm up); the
phases are the figures every compiled job reports (``JobResult.compile_dynamo_s`` ...: torch's own compile timers,
read after warmup), the rest is the compile latency measured from the steps minus them. Medians over the rounds, the
range in brackets. Writes benchmarks/compile_phases.md and benchmarks/compile_phases.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import tcbench as tc  # noqa: E402
from tcbench.host.env import static_env  # noqa: E402

COLUMNS = ("compile_latency_s", "compile_dynamo_s", "compile_aot_s", "compile_backend_s", "rest_s")
TITLES = ("compile latency", "Dynamo", "AOTAutograd", "Inductor", "first steps (the rest)")


def one_job(spec: tc.JobSpec, store: tc.Store) -> dict:
    r = tc.run(spec, store=store)
    if not r.ok:
        raise SystemExit(f"{spec.model} {spec.cache}: {r.status} {r.error[-300:]}")
    timed = [r.compile_dynamo_s, r.compile_aot_s, r.compile_backend_s]
    return dict(compile_latency_s=r.compile_latency_s, compile_dynamo_s=timed[0], compile_aot_s=timed[1],
                compile_backend_s=timed[2], rest_s=max(r.compile_latency_s - sum(timed), 0.0),
                aot_cache=f"{r.aot_cache_hits}/{r.aot_cache_hits + r.aot_cache_misses}",
                fx_cache=f"{r.fx_cache_hits}/{r.fx_cache_hits + r.fx_cache_misses}", run_id=r.run_id)


def cell(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="gpt2,bert-base-cased")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    store = tc.Store(Path(tempfile.mkdtemp(prefix="tcb-phases-")) / "phases.db")
    jobs: list[dict] = []
    for rnd in range(a.rounds):
        for model in a.models.split(","):
            base = tc.JobSpec(model=model, size="tiny", backend="inductor", batch_size=8, seq_len=64, steps=8,
                              warmup_steps=2, threads=1, dropout=0.0)
            for cache in ("cold", "shared", "artifacts"):
                got = one_job(dataclasses.replace(base, cache=cache), store)
                jobs.append(dict(model=model, cache="warm" if cache == "shared" else cache, round=rnd, **got))
                print(json.dumps(jobs[-1]), flush=True)
    env = static_env()
    lines = [f"Measured {time.strftime('%Y-%m-%d')} on {env.get('cpu')}, {env.get('cores_usable')} cores, torch "
             f"{env.get('torch')}; tiny models, "
             f"batch 8, seq 64, 8 steps (2 warmup), 1 thread, Inductor default mode; median of {a.rounds} rounds "
             "(the range in brackets); seconds. Reproduce: `.venv/bin/python benchmarks/compile_phases.py`.", "",
             "| model | cache | " + " | ".join(TITLES) + " | AOTAutograd cache hits | FX graph cache hits |",
             "|---|---|" + "---|" * (len(TITLES) + 2)]
    for model in a.models.split(","):
        for cache in ("cold", "warm", "artifacts"):
            rows = [j for j in jobs if j["model"] == model and j["cache"] == cache]
            lines.append(f"| {model} | {cache} | " + " | ".join(cell([r[c] for r in rows]) for c in COLUMNS)
                         + f" | {rows[-1]['aot_cache']} | {rows[-1]['fx_cache']} |")
    (HERE / "compile_phases.md").write_text("\n".join(lines) + "\n")
    (HERE / "compile_phases.json").write_text(json.dumps({"env": env, "jobs": jobs}, indent=1, default=str))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
