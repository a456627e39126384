"""Which tests of a run paid a cold compile, of which graph (issue 47): every job in every test store of a pytest run.

    .venv/bin/python benchmarks/suite_compiles.py /tmp/pytest-of-$USER/pytest-N [--all]

A test run leaves its stores under pytest's base temporary folder (pytest keeps the last three runs: copy the one of
the integration leg before the next leg starts). Each Inductor job that missed the FX graph cache compiled at least
one graph anew; its spec's graph-relevant fields (model, size, batch, sequence, precision, dropout, threads, scope,
compiled optimizer, mode, dataset, script) are the graph's family. A job asked to compile cold (``cache="cold"``) is
shown, and counted apart: that is what such a test measures. Where two tests compile one family, the second finds it
warm, unless both ran at once on the two workers.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from collections import Counter
from pathlib import Path

FIELDS = ("backend", "model", "size", "batch_size", "seq_len", "precision", "dropout", "threads", "compile_scope",
          "compile_optimizer", "compile_mode", "dataset", "script", "nproc")


def jobs(root: Path) -> list[dict]:
    """Every job of every store under ``root`` (symlinks such as ``pytest-current`` not followed), oldest first."""
    out = []
    for db in sorted(p for p in root.rglob("*.db") if not any(part.endswith("current") for part in p.parts)):
        try:
            con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
            rows = con.execute("select created, spec_json, fx_cache_misses, compile_latency_s, wall_s, status "
                               "from runs").fetchall()
        except sqlite3.Error:
            continue   # not a tcbench store
        for created, spec_json, misses, compile_s, wall_s, status in rows:
            spec = json.loads(spec_json or "{}")
            out.append(dict(created=float(created or 0), test=db.parent.name, family=tuple(spec.get(f) for f in FIELDS),
                            cache=spec.get("cache"), misses=misses or 0, compile_s=compile_s, wall_s=wall_s,
                            status=status))
    return sorted(out, key=lambda j: j["created"])


def report(all_jobs: list[dict], show_all: bool = False) -> str:
    compiled = [j for j in all_jobs if j["family"][0] == "inductor" and j["misses"] > 0]
    asked = [j for j in compiled if j["cache"] == "cold"]
    shared = [j for j in compiled if j["cache"] != "cold"]
    lines = [f"{len(all_jobs)} jobs; {len(shared)} Inductor jobs compiled a graph anew on the shared cache "
             f"({sum(j['compile_s'] or 0 for j in shared):.0f} s of compile), {len(asked)} asked to compile cold "
             f"({sum(j['compile_s'] or 0 for j in asked):.0f} s)", "",
             "| test (its folder) | cache | FX misses | compile s | " + " | ".join(FIELDS[1:]) + " |",
             "|---|---|---|---|" + "---|" * (len(FIELDS) - 1)]
    for j in compiled if show_all else shared:
        took = "–" if j["compile_s"] is None else f"{j['compile_s']:.1f}"
        lines.append(f"| {j['test']} | {j['cache']} | {j['misses']} | {took} | "
                     + " | ".join(str(v) for v in j["family"][1:]) + " |")
    twice = [(f, n) for f, n in Counter(j["family"] for j in shared).items() if n > 1]
    lines += ["", f"families compiled anew on the shared cache more than once: {len(twice)}"]
    lines += [f"- {n}× {dict(zip(FIELDS, f))}" for f, n in twice]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root", type=Path, help="pytest's base temporary folder of the run (pytest-of-$USER/pytest-N)")
    ap.add_argument("--all", action="store_true", help="every compiling job, those asked to compile cold too")
    args = ap.parse_args()
    print(report(jobs(args.root), args.all))


if __name__ == "__main__":
    main()
