"""How long a measured job takes to start: a new process (``TCBENCH_LAUNCHER=spawn``) against a child forked by
the warm launcher (``tcbench.job.zygote``, the default), measured in one run.

    .venv/bin/python benchmarks/startup.py                 # eager and warm inductor, 3 rounds (~7 min on 2 cores)
    .venv/bin/python benchmarks/startup.py --backends eager --rounds 5

Per backend and round, one job per launcher (the order alternates between rounds). Each job's phases come from the
arrival, in this process, of messages the job sends anyway (nothing is added to the job):

    start       the request (``tc.run`` called) -> the job's ``loading`` phase: process start, Python, tcbench's modules
    imports     -> its "N CPU thread(s)" log line: torch, transformers, the backend
    model+data  -> its ``warmup`` / ``compiling`` phase: model, optimizer, data encoded; the first step starts here
    warmup      the warmup steps' own times (Inductor's compile is in the first one)
    steps       the measured steps' own times

The launcher's start (its imports) is paid once per runner process, by the first job it forks: that job is measured
apart and left out of the medians. One spawned job per backend comes first (it fills Inductor's compile cache, the
store's FLOPs probe and the file cache), so Inductor runs warm.
Writes benchmarks/startup.md and benchmarks/startup.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import tcbench as tc  # noqa: E402

SPEC = tc.JobSpec(model="gpt2", size="tiny", batch_size=8, seq_len=64, steps=40, warmup_steps=5, lr=2e-3,
                  dropout=0.0, threads=1)
PHASES = ("start", "imports", "model+data", "to first step", "warmup", "steps")
LAUNCHERS = ("spawn", "fork")
SPREAD = ("to first step", "warmup")   # shown with their range over the rounds


def timed_job(spec: tc.JobSpec, launcher: str) -> dict:
    """One job started by ``launcher``: its phases in seconds (see the module docstring)."""
    marks: dict[str, float] = {}

    def observer(event: dict) -> None:
        now = time.monotonic()
        if event["type"] == "phase":
            marks.setdefault(event["phase"], now)
        elif event["type"] == "log" and "CPU thread(s)" in event["line"]:
            marks.setdefault("threads", now)

    os.environ["TCBENCH_LAUNCHER"] = launcher
    t0 = time.monotonic()
    r = tc.run(spec, observer)
    if not r.ok or r.extra.launcher != launcher:
        raise RuntimeError(f"{spec.backend} job ({launcher}): {r.status} by {r.extra.launcher}: {r.error}\n"
                           f"{r.log_tail[-1500:]}")
    first = marks.get("compiling", marks.get("warmup"))
    warm = [x.step_s for x in r.records if x.warmup]
    phases = {"start": marks["loading"] - t0, "imports": marks["threads"] - marks["loading"],
              "model+data": first - marks["threads"], "to first step": first - t0, "warmup": sum(warm),
              "steps": sum(x.step_s for x in r.records if not x.warmup)}
    return {"backend": spec.backend, "launcher": launcher, "run_id": r.run_id, "wall_s": r.wall_s,
            "median_step_ms": r.figures.median_step_s * 1e3, "peak_mem_mib": r.figures.peak_mem_bytes / 2**20,
            "phases": phases}


def measure(backends: list[str], rounds: int) -> dict:
    """The first forked job (it starts the launcher), then ``rounds`` alternating rounds per backend."""
    for backend in backends:   # fills the compile cache, the store's FLOPs probe and the OS's file cache
        timed_job(dataclasses.replace(SPEC, backend=backend), "spawn")
    first = timed_job(dataclasses.replace(SPEC, backend=backends[0]), "fork")
    print(f"first forked job ({backends[0]}, starts the launcher): {first['phases']['to first step']:.2f} s "
          "to its first step", flush=True)
    jobs = []
    for backend in backends:
        for i in range(rounds):
            order = LAUNCHERS if i % 2 == 0 else LAUNCHERS[::-1]
            for launcher in order:
                jobs.append(timed_job(dataclasses.replace(SPEC, backend=backend), launcher))
                p = jobs[-1]["phases"]
                print(f"{backend} round {i + 1} {launcher}: " + ", ".join(f"{k} {p[k]:.2f} s" for k in PHASES),
                      flush=True)
    return {"first_fork": first, "jobs": jobs}


def summary(jobs: list[dict]) -> list[dict]:
    """Per backend and launcher: the median of each phase over the rounds; the spawn ÷ fork ratio to first step."""
    rows = []
    for backend in dict.fromkeys(j["backend"] for j in jobs):
        medians = {}
        for launcher in LAUNCHERS:
            mine = [j for j in jobs if j["backend"] == backend and j["launcher"] == launcher]
            medians[launcher] = {k: statistics.median(j["phases"][k] for j in mine) for k in PHASES}
            medians[launcher]["range"] = {k: (min(j["phases"][k] for j in mine), max(j["phases"][k] for j in mine))
                                          for k in SPREAD}
            for figure in ("median_step_ms", "peak_mem_mib"):   # the job's own figures: the same either way
                medians[launcher][figure] = statistics.median(j[figure] for j in mine)
            medians[launcher]["rounds"] = len(mine)
        ratio = medians["spawn"]["to first step"] / medians["fork"]["to first step"]
        rows += [{"backend": backend, "launcher": launcher, **medians[launcher],
                  "ratio": ratio if launcher == "fork" else None} for launcher in LAUNCHERS]
    return rows


def markdown(data: dict) -> str:
    first = data["first_fork"]
    lines = [f"Measured {data['when']} on {data['machine']}; {data['spec']}; median of {data['rounds']} alternating "
             "rounds per launcher (the range over the rounds in brackets); seconds.", "",
             "| backend | launcher | start | imports | model+data | request → first step | warmup (compile) | "
             "steps | median step ms | peak mem MiB | to first step, spawn ÷ fork |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in data["summary"]:
        ratio = "" if r["ratio"] is None else f"**{r['ratio']:.1f}×**"
        cells = [f"{r[k]:.2f}" + (f" ({r['range'][k][0]:.2f}–{r['range'][k][1]:.2f})" if k in SPREAD else "")
                 for k in PHASES]
        lines.append(f"| {r['backend']} | {r['launcher']} | " + " | ".join(cells)
                     + f" | {r['median_step_ms']:.1f} | {r['peak_mem_mib']:.0f} | {ratio} |")
    lines += ["", f"The first forked job of a runner process also starts the launcher: {first['backend']} "
              f"{first['phases']['to first step']:.2f} s from the request to its first step "
              f"(start {first['phases']['start']:.2f} s)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backends", default="eager,inductor")
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args(argv)
    backends = [b for b in a.backends.split(",") if b]
    if a.rounds < 1 or not backends or set(backends) - {"eager", "inductor"}:
        p.error(f"--rounds must be >= 1 and --backends among eager,inductor (got {a.rounds}, {a.backends!r})")
    os.environ.setdefault("TCBENCH_DB", str(Path(tempfile.gettempdir()) / "tcbench-startup.db"))
    from tcbench.core.profiles import cpu_model

    data = {"when": __import__("datetime").date.today().isoformat(),
            "machine": f"{cpu_model()}, {len(os.sched_getaffinity(0))} cores",
            "spec": f"{SPEC.model} {SPEC.size}, batch {SPEC.batch_size}, seq {SPEC.seq_len}, {SPEC.steps} steps "
                    f"({SPEC.warmup_steps} warmup), {SPEC.threads} thread", "rounds": a.rounds,
            **measure(backends, a.rounds)}
    data["summary"] = summary(data["jobs"])
    (HERE / "startup.json").write_text(json.dumps(data, indent=1, default=str))
    (HERE / "startup.md").write_text(markdown(data))
    print(markdown(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
