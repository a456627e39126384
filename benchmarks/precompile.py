"""Can this torch load a compiled *training* step without Dynamo tracing it again? (issue 46, item 2)

The demo's model (gpt2 tiny, batch 8, seq 64, 1 thread, AdamW foreach), compiled four ways, each in two fresh
processes on one empty Inductor cache: the first compiles, the second should load. Per way and process: whether it
ran, the seconds to the end of the first step (compile included), Dynamo's share (``bytecode_tracing``), and the
first steps' losses (a loaded program must learn what the compiled one learns).

- ``jit``: ``torch.compile(model)`` and ``torch.compile(opt.step)``, what tcbench's jobs do: the second process
  finds every graph in the caches but Dynamo traces the Python again.
- ``caching_precompile``: ``torch._dynamo.config.caching_precompile = True`` (Dynamo's own cache of traced frames).
- ``aot_compile``: ``torch.compile(fn, fullgraph=True).aot_compile(...)`` of the loss (forward; its backward through
  AOTAutograd) and of the optimizer step, saved with ``save_compiled_function`` and loaded with
  ``torch.compiler.load_compiled_function``. Guards on object identity cannot be serialized; they are dropped, as
  tcbench's own artifact key would then have to stand for them.
- ``aot_compile_loss``: the loss alone through ``aot_compile`` (forward and backward), the optimizer step compiled as
  ``jit`` does (torch 2.14's ``Optimizer`` calls ``torch._dynamo.graph_break()`` in its step: no full graph).

Reproduce: ``.venv/bin/python benchmarks/precompile.py`` (about 4 minutes on 2 cores, each cold compile 35-50 s);
``--python .venv-latest/bin/python`` for the newest torch. Writes ``benchmarks/precompile.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WAYS = ("jit", "caching_precompile", "aot_compile", "aot_compile_loss")

CHILD = r'''
import json, os, sys, time
t0 = time.perf_counter()
import torch
torch.set_num_threads(1)
way, folder = sys.argv[1], sys.argv[2]
sys.path.insert(0, sys.argv[3])
from tcbench.job.models import build_model
out = {"torch": torch.__version__}
try:
    if way == "caching_precompile":
        torch._dynamo.config.caching_precompile = True
    if way.startswith("aot_compile"):
        torch._dynamo.config.enable_aot_compile = True
        torch._functorch.config.bundled_autograd_cache = True
    torch.manual_seed(0)
    model = build_model("gpt2", "tiny").train()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, foreach=True)
    x = torch.randint(0, model.config.vocab_size, (8, 64))
    unsafe = {"ID_MATCH", "CLOSURE_MATCH", "FUNCTION_MATCH", "WEAKREF_ALIVE", "DICT_VERSION", "NN_MODULE"}

    def serializable(entries):
        return [not (g.is_global or g.guard_type in unsafe or unsafe & set(g.derived_guard_types)) for g in entries]

    def loss_of(model, input_ids, labels):
        return model(input_ids=input_ids, labels=labels).loss

    def step_of(opt):
        opt.step()

    def loaded_or_compiled(fn, example, name):   # aot_compile's program for fn: loaded when saved, else made
        path = os.path.join(folder, name)
        if os.path.exists(path):
            return torch.compiler.load_compiled_function(open(path, "rb")), "loaded"
        made = torch.compile(fn, fullgraph=True, options={"guard_filter_fn": serializable}).aot_compile(example)
        made.save_compiled_function(path)
        return made, "compiled"

    t = time.perf_counter()
    if way.startswith("aot_compile"):   # the loss (forward and backward) loaded; with aot_compile_loss, the
        loss_fn, out["how"] = loaded_or_compiled(loss_of, ((model,), dict(input_ids=x, labels=x)), "loss.bin")
        forward, step = (lambda: loss_fn(model, input_ids=x, labels=x)), torch.compile(opt.step)   # step as jit's
        if way == "aot_compile":   # the optimizer step too; its trace needs gradients
            if not os.path.exists(os.path.join(folder, "step.bin")):
                loss_of(model, x, x).backward()
            step_fn, _ = loaded_or_compiled(step_of, ((opt,), {}), "step.bin")
            opt.zero_grad(set_to_none=True)
            step = lambda: step_fn(opt)
    else:
        compiled = torch.compile(model.forward if way == "caching_precompile" else model)
        forward, step = (lambda: compiled(input_ids=x, labels=x).loss), torch.compile(opt.step)
    losses = []
    for i in range(4):
        loss = forward()
        loss.backward()
        step()
        opt.zero_grad(set_to_none=True)
        losses.append(round(loss.item(), 5))
        if i == 0:
            out["first_step_s"] = round(time.perf_counter() - t, 2)
    from torch._dynamo.utils import compile_times
    names, values = compile_times(repr="csv", aggregate=True)
    took = dict(zip(names, (float(v) for v in values)))
    out.update(ok=True, losses=losses, dynamo_trace_s=round(took.get("bytecode_tracing", 0.0), 2))
except Exception as exc:  # noqa: BLE001 - what failed is the finding
    out.update(ok=False, error=f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}")
out["process_s"] = round(time.perf_counter() - t0, 2)
print("RESULT " + json.dumps(out))
'''


def run(python: str, way: str, folder: str) -> dict:
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(folder, "inductor"), HF_HUB_OFFLINE="1",
               OMP_NUM_THREADS="1")
    script = os.path.join(folder, "child.py")   # a file: newer torch reads the compiled function's source
    with open(script, "w") as f:
        f.write(CHILD)
    done = subprocess.run([python, script, way, folder, ROOT], capture_output=True, text=True, env=env, timeout=900)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return {"ok": False, "error": f"exit {done.returncode}: {done.stderr.strip()[-300:]}"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=os.path.join(ROOT, ".venv", "bin", "python"))
    ap.add_argument("--ways", default=",".join(WAYS))
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "precompile.json"))
    args = ap.parse_args()
    rows = []
    for way in args.ways.split(","):
        with tempfile.TemporaryDirectory(prefix=f"tcbench-precompile-{way}-") as folder:
            for process in ("first", "second"):
                row = {"way": way, "process": process, **run(args.python, way, folder)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    with open(args.out, "w") as f:
        json.dump(rows, f, indent=1)
    print("\n| way | process | ran | to the first step's end, s | Dynamo's trace, s | losses | why not |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['way']} | {r['process']} | {'yes' if r.get('ok') else 'no'} | {r.get('first_step_s', '–')} | "
              f"{r.get('dynamo_trace_s', '–')} | {', '.join(map(str, r.get('losses', []))) or '–'} | "
              f"{r.get('error', '')} |")


if __name__ == "__main__":
    sys.exit(main())
