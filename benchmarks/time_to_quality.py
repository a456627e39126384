"""Time to quality on this CPU: the README's "Time to quality" figures (issue 38).

    .venv/bin/python benchmarks/time_to_quality.py                          # tiny GPT-2 and small BERT, 5 seeds
    .venv/bin/python benchmarks/time_to_quality.py --models gpt2:tiny --seeds 3    # the other model's study kept
    .venv/bin/python benchmarks/time_to_quality.py --rewrite                # only rewrite the .md from the json

Per model, ``tc.time_to_quality`` with its default candidates: native (the reference), inductor at the same batch,
inductor at B1 = ``--max-batch-factor`` × the batch (this machine has no memory budget to search under) with the
noise-scale prediction's learning rate (its premise checked first), native at B1. One thread per job, dropout 0,
the held-out target the reference's median loss at its ``--steps``, each run's budget 3× the reference's samples.
Each model's study is stored (``tcbench show ID`` prints it again) and written to time_to_quality.json as it ends.
The speed is this machine's; the compile cache is the one ``TCBENCH_HOME`` holds (cold or warm: each run says).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import tcbench as tc  # noqa: E402

OUT = {"json": HERE / "time_to_quality.json", "md": HERE / "time_to_quality.md"}
DEFAULTS = {"gpt2:tiny": dict(batch_size=8, seq_len=64, steps=40, lr=1e-3),
            "bert-base-cased:small": dict(batch_size=8, seq_len=64, steps=60, lr=5e-4)}


def _cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.machine()


def _num(v, fmt=".3g") -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)


def _ci(p, lo, hi, unit="×") -> str:
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "—"
    if lo is None or (isinstance(lo, float) and math.isnan(lo)):
        return f"{p:.2f}{unit}"
    verdict = "" if lo <= 1 <= hi else (" **sooner**" if lo > 1 else " **later**")
    return f"{p:.2f}{unit} ({lo:.2f}–{hi:.2f}){verdict}"


def run_model(name: str, a: argparse.Namespace) -> dict:
    model, size = name.split(":")
    kw = dict(DEFAULTS.get(name, DEFAULTS["gpt2:tiny"]))
    spec = tc.JobSpec(model=model, size=size, warmup_steps=2, threads=1, dropout=0.0, **kw)
    t0 = time.monotonic()
    res = tc.time_to_quality(spec, seeds=a.seeds, max_batch=spec.batch_size * a.max_batch_factor,
                             eval_batches=a.eval_batches)
    wall = time.monotonic() - t0
    runs = res.runs_table()
    return dict(model=name, spec=spec.to_dict(), wall_s=wall, comparison_id=res.comparison_id, target=res.target,
                target_source=res.target_source, table=res.table().to_dict(orient="records"),
                runs=runs.to_dict(orient="records"), notes=res.notes, price_basis=res.price_basis,
                premise=getattr(res.premise, "verdict", None))


def write_md(data: dict) -> str:
    env = data["env"]
    lines = ["# Time to quality on this CPU", "",
             f"Measured {env['date']} on {env['cpu']}, torch {env['torch']}, one thread per job, dropout 0; "
             f"{data['seeds']} seeds per candidate; the speed is this machine's.", "",
             f"`{data['command']}`", ""]
    for m in data["models"]:
        s = m["spec"]
        lines += [f"## {m['model']} (batch {s['batch_size']}, seq {s['seq_len']}, {s['steps']} steps, lr {s['lr']:g})",
                  "", f"Study {m['comparison_id']} (`tcbench show {m['comparison_id']}`), {m['wall_s'] / 60:.1f} min "
                  f"in all. Target held-out loss {_num(m['target'], '.4f')}: {m['target_source']}.", "",
                  f"LR premise: {m['premise'] or 'not checked'}.", "",
                  *[f"- {n}" for n in m["notes"]], "",
                  "| candidate | batch | lr | time to target s (95 % of seeds) | samples to target | sooner than "
                  "native (paired, 95 %) | samples ratio (95 %) | not converged |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in m["table"]:
            lines.append(f"| {r['candidate']} | {r['batch_size']} | {r['lr']:.3g} | {_num(r['time_to_target_s'])} "
                         f"({_num(r['time_low'])}–{_num(r['time_high'])}) | {_num(r['samples_to_target'], '.0f')} | "
                         f"{_ci(r['speedup'], r['speedup_low'], r['speedup_high'])} | "
                         f"{_ci(r['samples_ratio'], r['samples_ratio_low'], r['samples_ratio_high'])} | "
                         f"{r['not_converged']} of {r['runs']} |")
        cold = [r for r in m["runs"] if r.get("cache") == "cold"]
        lines += ["", f"Compiled runs with a cold compile cache: {len(cold)} (the rest warm or not compiled). Time "
                      "to target runs from the first step: compiling included; loading and the evaluations not.", ""]
    text = "\n".join(lines) + "\n"
    OUT["md"].write_text(text)
    return text


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default=",".join(DEFAULTS))
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--eval-batches", type=int, default=8)
    p.add_argument("--max-batch-factor", type=int, default=4)
    p.add_argument("--rewrite", action="store_true")
    a = p.parse_args()
    if a.rewrite:
        print(write_md(json.loads(OUT["json"].read_text())))
        return
    import torch

    data = dict(env=dict(date=time.strftime("%Y-%m-%d"), cpu=_cpu(),
                         torch=torch.__version__), seeds=a.seeds,
                command=" ".join([".venv/bin/python", "benchmarks/time_to_quality.py", *sys.argv[1:]]), models=[])
    kept = json.loads(OUT["json"].read_text())["models"] if OUT["json"].exists() else []
    names = a.models.split(",")
    data["models"] = [m for m in kept if m["model"] not in names]   # another model's study is kept as it was
    for name in names:
        data["models"].append(run_model(name, a))
        data["models"].sort(key=lambda m: list(DEFAULTS).index(m["model"]) if m["model"] in DEFAULTS else 99)
        OUT["json"].write_text(json.dumps(data, indent=1, default=str))
    print(write_md(data))


if __name__ == "__main__":
    main()
