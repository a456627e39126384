"""Where a compiled job's compile latency goes: Dynamo, AOTAutograd, Inductor and the rest of the first steps, for a
cold compile (``cache="cold"``: a fresh compile cache of the job's own), a warm one (the shared cache) and one from
compile artifacts (``cache="artifacts"``: a fresh cache into which the artifacts the
earlier jobs kept for this key are loaded first, as on a new machine), measured in one run.

    .venv/bin/python benchmarks/compile_phases.py          # GPT-2 tiny (2 blocks) and small (4), 2 rounds (~10 min)
    .venv/bin/python benchmarks/compile_phases.py --models gpt2:tiny,bert-base-cased:tiny --rounds 3
    .venv/bin/python benchmarks/compile_phases.py --models bert-base-cased:tiny,bert-base-cased:small \
        --scopes model,blocks,step --out compile_phases_bert    # BERT, the whole-step scope too (~18 min)

A first job per model and scope fills the shared compile cache (not counted). Each round then runs, per model and
compile scope (``model``: the whole model; ``blocks``: its repeated block, regional compilation), a cold job, a warm
one and one from artifacts (1 thread, batch 8, seq 64, 8 steps of which 2 warm up); the
phases are the figures every compiled job reports (``JobResult.compile_dynamo_s`` ...: torch's own compile timers,
read after warmup), the rest is the compile latency measured from the steps minus them. Medians over the rounds, the
range in brackets. Writes benchmarks/compile_phases.md and .json (``--out``: another name).
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
                fx_cache=f"{r.fx_cache_hits}/{r.fx_cache_hits + r.fx_cache_misses}", step_ms=r.median_step_s * 1e3,
                run_id=r.run_id)


def cell(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="gpt2:tiny,gpt2:small", help="model:size, comma-separated")
    ap.add_argument("--scopes", default="model,blocks")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default="compile_phases", help="the name of the .md/.json files it writes here")
    a = ap.parse_args()
    store = tc.Store(Path(tempfile.mkdtemp(prefix="tcb-phases-")) / "phases.db")
    jobs: list[dict] = []
    models = [tuple(m.split(":")) for m in a.models.split(",")]
    scopes = a.scopes.split(",")
    specs = {(model, size, scope): tc.JobSpec(model=model, size=size, backend="inductor", batch_size=8, seq_len=64,
                                              steps=8, warmup_steps=2, threads=1, dropout=0.0, compile_scope=scope)
             for model, size in models for scope in scopes}
    for spec in specs.values():   # fills the shared cache first: the "warm" jobs below find it warm from round 1
        one_job(spec, store)
    for rnd in range(a.rounds):
        for model, size in models:
            for scope in scopes:
                base = specs[model, size, scope]
                for cache in ("cold", "shared", "artifacts"):
                    got = one_job(dataclasses.replace(base, cache=cache), store)
                    jobs.append(dict(model=f"{model} {size}", scope=scope, cache="warm" if cache == "shared" else cache,
                                     round=rnd, **got))
                    print(json.dumps(jobs[-1]), flush=True)
    env = static_env()
    lines = [f"Measured {time.strftime('%Y-%m-%d')} on {env.get('cpu')}, {env.get('cores_usable')} cores, torch "
             f"{env.get('torch')}; "
             f"batch 8, seq 64, 8 steps (2 warmup), 1 thread, Inductor default mode; median of {a.rounds} rounds "
             "(the range in brackets); seconds. Reproduce: "
             f"`{' '.join(['.venv/bin/python', 'benchmarks/compile_phases.py', *sys.argv[1:]])}`.", "",
             "| model | scope | cache | " + " | ".join(TITLES) + " | steady step ms | AOTAutograd cache hits | "
             "FX graph cache hits |", "|---|---|---|" + "---|" * (len(TITLES) + 3)]
    for model, size in models:
        for scope in scopes:
            for cache in ("cold", "warm", "artifacts"):
                rows = [j for j in jobs if j["model"] == f"{model} {size}" and j["scope"] == scope and j["cache"] == cache]
                lines.append(f"| {model} {size} | {scope} | {cache} | "
                             + " | ".join(cell([r[c] for r in rows]) for c in (*COLUMNS, "step_ms"))
                             + f" | {rows[-1]['aot_cache']} | {rows[-1]['fx_cache']} |")
    med = lambda m, scope, cache: statistics.median(j["compile_latency_s"] for j in jobs if j["model"] == m
                                                    and j["scope"] == scope and j["cache"] == cache)
    lines.append("")
    for model, size in models:   # the targets, as ratios measured in this run
        m = f"{model} {size}"
        if "model" in scopes:
            lines.append(f"- {m}: artifact-loaded ÷ cold compile latency, model scope: "
                         f"{med(m, 'model', 'artifacts') / med(m, 'model', 'cold'):.2f} (goal ≤ 0.25)")
        if {"model", "blocks"} <= set(scopes):
            lines.append(f"- {m}: blocks ÷ model scope, cold compile latency: "
                         f"{med(m, 'blocks', 'cold') / med(m, 'model', 'cold'):.2f} (goal ≤ 0.60)")
    (HERE / f"{a.out}.md").write_text("\n".join(lines) + "\n")
    (HERE / f"{a.out}.json").write_text(json.dumps({"env": env, "jobs": jobs}, indent=1, default=str))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
