"""The GPU check: tcbench's CUDA path in one prepared command, most valuable checks first (``make gpu-check``).

    python3 benchmarks/gpu_check.py --out build/gpu-check                 # on a CUDA machine (~8 min)
    .venv/bin/python benchmarks/gpu_check.py --device cpu --quick --out DIR   # the dry run: tiny models, this CPU

Each check's result is written as it ends: ``DIR/gpu_check.jsonl`` (one JSON object per check: check, name, status
``done`` / ``skipped`` / ``stopped`` / ``failed``, seconds, reason, figures, expect) and ``DIR/gpu.md`` (rewritten
after every check, with the date, GPU, driver, CUDA, torch, transformers and the exact command), so a run killed at
its time limit still leaves everything done before. ``--budget-s`` (default 480) is the whole run's: a check that
cannot finish in what is left is skipped and says so, and one that runs into the end is stopped with what it
measured so far. Step times are the jobs' own: each step ends with a device synchronisation (``Backend.sync``).

The checks (issue 35): 1 doctor on CUDA; 2 eager against inductor on gpt2 (base, seq 128, batch 32, bf16 on
sm80+, compare's default rule; 2 rounds in the dry run); 3 find_max_batch under a 24 GiB cap (an ml.g5's A10G)
against SageMaker's table; 4 A/A; 5 ``reduce-overhead`` against the default mode; 6 bert-base-cased, roberta-base,
distilbert-base-uncased as in 2;
7 a short tune_compile; 8 time to quality (issue 38): native against the default candidates (inductor at the batch,
inductor and native at 4× it with the predicted learning rate), 3 seeds, to the reference's held-out loss at its
steps, each projected to HORIZON_STEPS with its break-even. ``--device cpu --quick`` runs 1-4 with tiny models
and skips the rest with the reason.
The install on the GPU machine (no network there): ``benchmarks/gpu.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

STATUSES = ("done", "skipped", "stopped", "failed")
SAGEMAKER_GPT2 = {"profile": "ml.g5.4xlarge", "seq_len": 128, "native": 84, "compiled": 240,
                  "source": "SageMaker Training Compiler's tested-model table (gpt2, ml.g5.4xlarge, seq 128)"}
PYTORCH2_GEOMEAN = "the PyTorch 2 paper: 1.41x training speedup, geometric mean over its benchmarks, A100"
OTHER_MODELS = ("bert-base-cased", "roberta-base", "distilbert-base-uncased")
# check 8 projects each candidate to this many reference steps (a short fine-tune; the H200's compare put gpt2 base's
# break-even at 628-896 steps)
HORIZON_STEPS = 2000
COMPILED_LABEL = "inductor"   # the default candidates' compiled job at the reference's batch


def precision_for(device: str, capability: tuple[int, int] | None) -> str:
    """The mixed precision the check trains in: bf16 on sm80 and newer (Ampere, Hopper), fp16 on older GPUs
    (no bf16 tensor cores), fp32 on the CPU (autocast there is not what users train with)."""
    if device != "cuda":
        return "fp32"
    return "bf16" if capability is not None and tuple(capability) >= (8, 0) else "fp16"


def cap_evidence(reason: str) -> dict:
    """What a refused probe's CUDA out-of-memory message says about the cap: the memory the process was
    ``allowed`` (PyTorch prints it when ``set_per_process_memory_fraction`` limits the process) and what the card
    still had ``free``. Refused by the cap, not the card: allowed is set and the card had more free than that."""
    def gib(pattern: str) -> float | None:
        m = re.search(pattern, reason)
        if not m:
            return None
        value, unit = float(m.group(1)), m.group(2)
        return value / 1024 if unit == "MiB" else value
    allowed = gib(r"([\d.]+) (GiB|MiB) allowed")
    free = gib(r"of which ([\d.]+) (GiB|MiB) is free")
    return {"allowed_gib": allowed, "card_free_gib": free,
            "refused_by_cap": allowed is not None and free is not None and free > 1.0}


@dataclass(frozen=True)
class Plan:
    """What the checks run on this device: one list of settings, the quick dry run's or the GPU's."""

    device: str
    quick: bool
    precision: str
    model: str = "gpt2"
    size: str = "base"
    seq_len: int = 128
    batch_size: int = 32
    steps: int = 40
    warmup_steps: int = 10
    lr: float = 1e-4
    threads: int | None = 8
    rounds: int = 3
    cap_gb: float | None = 24.0
    max_batch: int = 1024
    multiple_of: int = 16
    # seconds a check needs at least (else it is skipped) and at most (then it is stopped), per check name
    need_s: dict = field(default_factory=dict)
    cap_s: dict = field(default_factory=dict)

    def spec(self, tc: Any, **changes: Any) -> Any:
        fields = dict(model=self.model, size=self.size, seq_len=self.seq_len, batch_size=self.batch_size,
                      steps=self.steps, warmup_steps=self.warmup_steps, lr=self.lr, threads=self.threads,
                      precision=self.precision, dropout=0.0, stall_s=240.0)
        return tc.JobSpec(**{**fields, **changes})


def plan_for(device: str, quick: bool, capability: tuple[int, int] | None) -> Plan:
    precision = precision_for(device, capability)
    if quick:
        # the demo's job (its compiled graph is in a test run's warm cache), one probe per backend (start = max);
        # checks 5-7 run only to say why they are skipped (need 0 s)
        return Plan(device=device, quick=True, precision=precision, size="tiny", seq_len=64, batch_size=8, steps=10,
                    warmup_steps=3, lr=2e-3, threads=1, rounds=2, cap_gb=None, max_batch=8, multiple_of=4,
                    need_s={"doctor": 5, "compare": 30, "max_batch": 15, "aa": 10},
                    cap_s={"compare": 75, "max_batch": 45, "aa": 40})
    # threads=None: a GPU job's CPU threads (and Inductor's compile workers) take every core. 100 steps: on an H200
    # 30 steady steps of ~15 ms (0.5 s) scattered an inductor job's median 12-19 ms between rounds
    return Plan(device=device, quick=False, precision=precision, threads=None, batch_size=32, max_batch=1024,
                multiple_of=32, steps=100, warmup_steps=20,
                need_s={"doctor": 5, "compare": 90, "max_batch": 60, "aa": 30, "reduce_overhead": 60, "models": 60,
                        "tune_compile": 150, "time_to_quality": 150},
                cap_s={"compare": 220, "max_batch": 210, "aa": 100, "reduce_overhead": 150, "models": 150,
                       "tune_compile": 150, "time_to_quality": 360})


# ---------------------------------------------------------------------------------------------------------- checks

@dataclass
class Outcome:
    """One check's result: what ``gpu_check.jsonl`` holds per line."""

    check: str
    name: str
    title: str
    status: str = "done"
    seconds: float = 0.0
    reason: str = ""
    figures: dict = field(default_factory=dict)
    expect: dict = field(default_factory=dict)


def _row_figures(row: Any) -> dict:
    keep = ("label", "backend", "status", "rounds", "median_step_ms", "step_cv", "samples_s", "tokens_s",
            "compile_latency_s", "cache", "compile_phases", "compile_cache", "peak_mem_mb", "mfu", "mfu_note",
            "noisy", "noise", "final_loss", "recompiles", "graph_breaks", "speedup", "speedup_ci_low",
            "speedup_ci_high", "resolution", "memory_ratio", "memory_ci_low", "memory_ci_high", "extra_warmup_s",
            "loss_parity", "loss_parity_note", "verdict_kind", "verdict", "error")
    data = dataclasses.asdict(row)
    return {k: data[k] for k in keep if k in data}


def launcher_notes(run_folder: str | None) -> list[str]:
    """What the runner wrote into a job's log about how it started (``[tcbench] ...``: why the warm launcher did not
    fork it, say), each once."""
    try:
        lines = (Path(run_folder) / "worker.log").read_text(errors="replace").splitlines() if run_folder else []
    except OSError:
        return []
    return list(dict.fromkeys(x.strip()[:300] for x in lines if x.startswith("[tcbench]")))


def _jobs(cmp: Any, label: str) -> list[dict]:
    """Each job of a label in round order: its step time, compile latency, whether its compile cache was cold, and
    whether the warm launcher forked it (with the runner's notes when it did not)."""
    return [{"round": r.round, "status": r.status, "median_step_ms": r.median_step_s and r.median_step_s * 1e3,
             "compile_latency_s": r.compile_latency_s, "cache_state": r.cache_state, "mfu": r.mfu,
             "peak_mem_mb": r.peak_mem_bytes and r.peak_mem_bytes / 2**20, "launcher": r.extra.launcher,
             "launcher_pid": r.extra.launcher_pid, "notes": launcher_notes(r.artifacts),
             "error": (r.error or "")[-300:]} for r in cmp.by_backend(label)]


def _comparison(cmp: Any) -> dict:
    rows = cmp.rows()
    return {"comparison_id": cmp.comparison_id, "stop_reason": cmp.stop_reason, "device": cmp.environment().get("gpu"),
            "rows": [_row_figures(r) for r in rows], "jobs": {label: _jobs(cmp, label) for label in cmp.backends}}


def _mfu_ok(figures: dict) -> bool:
    mfus = [r.get("mfu") for r in figures.get("rows", [])]
    return all(m is None or 0 < m <= 1 for m in mfus) and any(m is not None for m in mfus)


def check_doctor(tc: Any, plan: Plan, stop: threading.Event) -> Outcome:
    out = Outcome("1", "doctor", "tcbench doctor on this device")
    table = tc.doctor()
    rows = {(k, n): r for k, n, r in zip(table.kind, table.name, table.to_dict("records"))}
    backends = {n: {"available": bool(rows[("backend", n)]["ok"]), "reason": rows[("backend", n)]["detail"]}
                for n in tc.BACKENDS}
    gpu = rows[("system", "gpu")]["detail"]
    out.figures = {"backends": backends, "gpu": gpu, "python": rows[("system", "python")]["installed"],
                   "tcbench": rows[("system", "tcbench")]["installed"],
                   "packages": {n: r["installed"] for (k, n), r in rows.items() if k == "package"}}
    out.expect = {"eager available": backends["eager"]["available"],
                  "inductor available": backends["inductor"]["available"]}
    if plan.device == "cuda":
        out.expect.update({"xla unavailable with its reason": not backends["xla"]["available"]
                           and "GPU" in backends["xla"]["reason"],
                           "GPU and driver named": "driver" in gpu and "unknown" not in gpu.split("driver", 1)[1][:12],
                           "datasheet peak named": "datasheet peak" in gpu})
    return out


def check_compare(tc: Any, plan: Plan, stop: threading.Event, model: str | None = None,
                  check: str = "2", name: str = "compare") -> Outcome:
    spec = plan.spec(tc, **({"model": model} if model else {}))
    # on the GPU compare's default rule, as a user gets it (rounds until ±5 % or 60 s, after a pilot of 4); the
    # CPU dry run keeps its fixed rounds (CI's time)
    rounds = plan.rounds if plan.quick else None
    rule = f"{rounds} rounds" if rounds else "compare's default rule"
    out = Outcome(check, name, f"eager against inductor: {spec.model} ({spec.size}), seq {spec.seq_len}, "
                               f"batch {spec.batch_size}, {spec.precision}, {rule}")
    cmp = tc.compare(spec, backends=["inductor"], rounds=rounds, stop=stop)
    out.figures = _comparison(cmp)
    jobs = out.figures["jobs"].get("inductor", [])
    out.figures["compile_cold_s"] = next((j["compile_latency_s"] for j in jobs if j["cache_state"] == "cold"), None)
    warm = [j["compile_latency_s"] for j in jobs if j["cache_state"] == "warm" and j["compile_latency_s"] is not None]
    out.figures["compile_warm_s"] = min(warm) if warm else None
    compared = out.figures["rows"][1]
    every = [j for js in out.figures["jobs"].values() for j in js]
    out.expect = {"speedup measured with an interval": compared.get("speedup_ci_low") is not None,
                  "MFU within (0, 1]": _mfu_ok(out.figures), "every job ok": all(
                      r["status"] == "ok" for r in out.figures["rows"]),
                  "no job flagged noisy": not any(r.get("noisy") for r in out.figures["rows"]),
                  "jobs forked by the warm launcher": any(j["launcher"] == "fork" for j in every)}
    return out


def check_max_batch(tc: Any, plan: Plan, stop: threading.Event) -> Outcome:
    spec = plan.spec(tc)
    cap = f"under a {plan.cap_gb:g} GiB cap" if plan.cap_gb else "under this machine's memory"
    out = Outcome("3", "max_batch", f"find_max_batch: {spec.model} ({spec.size}), seq {spec.seq_len}, "
                                    f"{spec.precision}, eager and inductor, {cap}")
    res = tc.find_max_batch(spec, backends=("eager", "inductor"), start=spec.batch_size, max_batch=plan.max_batch,
                            multiple_of=plan.multiple_of, memory_budget_gb=plan.cap_gb, probe_steps=3, stop=stop)
    table = res.table().to_dict("records")
    probes = res.probes().to_dict("records")
    refused = [p for p in probes if not p["fits"] and p["status"] == "oom"]
    out.figures = {"budget_gb": res.budget_gb, "table": table, "probes": probes, "sagemaker": SAGEMAKER_GPT2,
                   "cap": [dict(batch=p["batch_size"], backend=p["backend"], **cap_evidence(p["reason"] or ""))
                           for p in refused]}
    fitted = [p["peak_mem_mb"] for p in probes if p["fits"] and p["peak_mem_mb"] is not None]
    out.expect = {"a largest batch per backend": all(r["max_batch"] for r in table)}
    if plan.cap_gb and plan.device == "cuda":
        out.expect.update({"every fitting probe under the cap": all(m <= plan.cap_gb * 1024 for m in fitted),
                           "a batch above the cap refused by the cap, not the card":
                               any(c["refused_by_cap"] for c in out.figures["cap"])})
    return out


def check_aa(tc: Any, plan: Plan, stop: threading.Event) -> Outcome:
    spec = plan.spec(tc)
    out = Outcome("4", "aa", f"A/A: eager against eager, {spec.model} ({spec.size}), {plan.rounds} rounds")
    cmp = tc.compare(spec, backends=["eager"], rounds=plan.rounds, stop=stop)
    out.figures = _comparison(cmp)
    row = out.figures["rows"][1]
    lo, hi = row.get("speedup_ci_low"), row.get("speedup_ci_high")
    out.figures["interval_contains_1"] = None if lo is None else lo <= 1 <= hi
    out.figures["half_width"] = row.get("resolution")
    out.expect = {"an interval": lo is not None}
    return out


def check_reduce_overhead(tc: Any, plan: Plan, stop: threading.Event) -> Outcome:
    out = Outcome("5", "reduce_overhead", "inductor reduce-overhead (CUDA graphs) against inductor default")
    if plan.device != "cuda":
        out.status, out.reason = "skipped", "CUDA graphs need a CUDA device"
        return out
    default = plan.spec(tc, backend="inductor")
    cmp = tc.compare_configs(default, {"reduce-overhead": dataclasses.replace(default, compile_mode="reduce-overhead")},
                             rounds=min(plan.rounds, 2), stop=stop)
    out.figures = _comparison(cmp)
    row = out.figures["rows"][1]
    out.expect = {"measured": row.get("speedup") is not None, "loss parity holds": row.get("loss_parity") is True}
    return out


def _model_check(model: str, index: int) -> Callable:
    def check(tc: Any, plan: Plan, stop: threading.Event) -> Outcome:
        if plan.quick:
            return Outcome(f"6{'abc'[index]}", f"model_{model}", f"eager against inductor: {model}", "skipped",
                           reason="--quick compares one model (gpt2)")
        return check_compare(tc, plan, stop, model=model, check=f"6{'abc'[index]}", name=f"model_{model}")
    return check


def check_tune_compile(tc: Any, plan: Plan, stop: threading.Event) -> Outcome:
    out = Outcome("7", "tune_compile", "tune_compile on this device's space (budget 120 s)")
    if plan.quick:
        out.status, out.reason = "skipped", "--quick: a compile search needs minutes of compiles"
        return out
    search = tc.tune_compile(plan.spec(tc), budget_s=120, stop=stop)
    out.figures = {"trials": json.loads(search.trials.to_json(orient="records", default_handler=str)),
                   "space": {k: list(v) for k, v in search.space.items()}, "best": str(search.best),
                   "stop_reason": search.stop_reason, "vs_default": list(search.vs_default),
                   "vs_default_verdict": search.vs_default_verdict, "notes": list(search.notes)}
    out.expect = {"some trial ran": bool(out.figures["trials"]),
                  "the CUDA space holds reduce-overhead": "reduce-overhead" in out.figures["space"].get("compile_mode", [])}
    return out


def check_time_to_quality(tc: Any, plan: Plan, stop: threading.Event) -> Outcome:
    out = Outcome("8", "time_to_quality", f"time to quality: {plan.model} ({plan.size}), 3 seeds, the default "
                                          f"candidates with B1 = {4 * plan.batch_size}")
    if plan.quick:
        out.status, out.reason = "skipped", "--quick: three seeds of four candidates take minutes of jobs"
        return out
    res = tc.time_to_quality(plan.spec(tc), seeds=3, check_premise=False, max_batch=4 * plan.batch_size,
                             horizon_steps=HORIZON_STEPS, stop=stop)
    table = json.loads(res.table().to_json(orient="records"))
    projection = json.loads(res.projection().to_json(orient="records"))
    out.figures = {"target": res.target, "target_source": res.target_source, "quality": table,
                   "runs": json.loads(res.runs_table().to_json(orient="records", default_handler=str)),
                   "describe": res.describe(), "notes": list(res.notes), "horizon_steps": HORIZON_STEPS,
                   "projection": projection, "projection_sentences": res.projection_sentences()}
    out.expect = {"a target": res.target == res.target,
                  "every candidate scored": all(r.get("time_to_target_s") is not None for r in table),
                  "a break-even horizon for the compiled candidate at the same batch": any(
                      p.get("break_even_steps") is not None for p in projection if p.get("label") == COMPILED_LABEL)}
    return out


CHECKS: list[tuple[str, Callable]] = [("doctor", check_doctor), ("compare", check_compare),
                                      ("max_batch", check_max_batch), ("aa", check_aa),
                                      ("reduce_overhead", check_reduce_overhead),
                                      *((f"model_{m}", _model_check(m, i)) for i, m in enumerate(OTHER_MODELS)),
                                      ("tune_compile", check_tune_compile),
                                      ("time_to_quality", check_time_to_quality)]
NUMBERS = {"doctor": "1", "compare": "2", "max_batch": "3", "aa": "4", "reduce_overhead": "5",
           **{f"model_{m}": f"6{'abc'[i]}" for i, m in enumerate(OTHER_MODELS)}, "tune_compile": "7",
           "time_to_quality": "8"}


def _budget_key(name: str) -> str:
    return "models" if name.startswith("model_") else name


def run_checks(tc: Any, plan: Plan, budget_s: float, write: Callable[[Outcome | None, str], None],
               only: set[str] | None = None, clock: Callable[[], float] = time.monotonic) -> list[Outcome]:
    """Every check in order, each skipped when the budget left is below what it needs, stopped at its own cap
    or the budget's end, and written (``write``) as it starts and as it ends."""
    end = clock() + budget_s
    done: list[Outcome] = []
    for name, fn in CHECKS:
        number = NUMBERS[name]
        left = end - clock()
        need = plan.need_s.get(_budget_key(name), 0)
        if only and number not in only and name not in only:
            out = Outcome(number, name, name, "skipped", reason="not asked for (--only)")
        elif left < need:
            out = Outcome(number, name, name, "skipped",
                          reason=f"needs about {need:.0f} s and {max(left, 0):.0f} s of --budget-s are left")
        else:
            write(None, f"check {number} ({name}) running since {datetime.datetime.now():%H:%M:%S}")
            stop = threading.Event()
            timer = threading.Timer(max(1.0, min(left, plan.cap_s.get(_budget_key(name), left))), stop.set)
            timer.daemon = True
            timer.start()
            started = clock()
            try:
                out = fn(tc, plan, stop)
                if stop.is_set() and out.status == "done":
                    out.status, out.reason = "stopped", "its time ran out: the figures are what it measured so far"
            except Exception as exc:  # noqa: BLE001 - a broken check is recorded and the next one runs
                out = Outcome(number, name, name, "failed", reason=f"{type(exc).__name__}: {exc}",
                              figures={"traceback": traceback.format_exc()[-3000:]})
            finally:
                timer.cancel()
            out.seconds = round(clock() - started, 1)
        done.append(out)
        write(out, "")
    return done


# ----------------------------------------------------------------------------------------------------- the report

def environment(device: str) -> dict:
    """Date, GPU, driver, CUDA, torch, transformers, Python, read in a child process (CUDA stays uninitialised
    here)."""
    code = ("import json, platform, torch, transformers\n"
            "d = {'torch': torch.__version__, 'transformers': transformers.__version__, 'cuda': torch.version.cuda,\n"
            "     'python': platform.python_version(), 'cuda_available': torch.cuda.is_available()}\n"
            "if d['cuda_available']:\n"
            "    p = torch.cuda.get_device_properties(0)\n"
            "    d.update(gpu=p.name, capability=[p.major, p.minor], gpu_memory_gib=round(p.total_memory / 2**30, 1))\n"
            "print(json.dumps(d))\n")
    env: dict[str, Any] = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                           "device": device}
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
        env.update(json.loads(done.stdout.strip().splitlines()[-1]))
    except Exception as exc:  # noqa: BLE001 - the report says what could not be read
        env["error"] = f"{type(exc).__name__}: {exc}"
    from tcbench.core.profiles import cpu_model, nvidia_driver

    env["driver"] = nvidia_driver()
    env["cpu"] = f"{cpu_model()}, {len(os.sched_getaffinity(0))} cores"
    return env


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "–" if value is None else str(value)


def headline(out: Outcome) -> str:
    """One line per check for the table at the top of gpu.md."""
    f = out.figures
    if out.status in ("skipped", "failed"):
        return out.reason
    if "rows" in f and len(f["rows"]) > 1:
        r = f["rows"][1]
        text = (f"{_fmt(r.get('speedup'))}× ({_fmt(r.get('speedup_ci_low'))}–{_fmt(r.get('speedup_ci_high'))}); "
                f"memory {_fmt(r.get('memory_ratio'))}×; MFU {_fmt(f['rows'][0].get('mfu'))} → {_fmt(r.get('mfu'))}")
        if out.name == "compare" or out.name.startswith("model_"):
            text += f"; compile cold {_fmt(f.get('compile_cold_s'))} s, warm {_fmt(f.get('compile_warm_s'))} s"
        return text
    if "table" in f:
        return "; ".join(f"{r['backend']} {_fmt(r['max_batch'])}" + (" (capped)" if r.get("capped") else "")
                         for r in f["table"]) + f" (SageMaker: {SAGEMAKER_GPT2['native']} → {SAGEMAKER_GPT2['compiled']})"
    if "backends" in f:
        return "; ".join(f"{n} {'available' if b['available'] else 'unavailable'}" for n, b in f["backends"].items())
    if "quality" in f:
        return f"target {_fmt(f.get('target'))}; " + "; ".join(
            f"{r['candidate']} {_fmt(r.get('time_to_target_s'))} s, {_fmt(r.get('speedup'))}× "
            f"({_fmt(r.get('speedup_low'))}–{_fmt(r.get('speedup_high'))})" for r in f["quality"][1:])
    return out.reason or ""


def _section(out: Outcome) -> list[str]:
    lines = [f"### {out.check}. {out.title}", "", f"{out.status}, {out.seconds:.0f} s" + (f": {out.reason}" if out.reason else ""), ""]
    for name, ok in out.expect.items():
        lines.append(f"- [{'x' if ok else ' '}] {name}")
    f = out.figures
    for r in f.get("rows", []):
        lines.append(f"- **{r['label']}**: " + ", ".join(f"{k} {_fmt(r.get(k))}" for k in (
            "status", "median_step_ms", "samples_s", "mfu", "peak_mem_mb", "compile_latency_s", "speedup",
            "speedup_ci_low", "speedup_ci_high", "memory_ratio", "loss_parity", "recompiles", "graph_breaks")
            if r.get(k) is not None))
        for k in ("verdict", "compile_phases", "compile_cache", "mfu_note", "noise", "error"):
            if r.get(k):
                lines.append(f"  - {k}: {r[k]}")
    for label, jobs in f.get("jobs", {}).items():
        lines.append(f"- {label} jobs: " + "; ".join(
            f"r{j['round']} {j['status']} {_fmt(j['median_step_ms'])} ms, compile {_fmt(j['compile_latency_s'])} s "
            f"({j['cache_state'] or '-'}), {j.get('launcher') or '?'}" for j in jobs))
        notes = sorted({n for j in jobs for n in j.get("notes", [])})
        lines += [f"  - runner: {n}" for n in notes]
    for r in f.get("table", []):
        lines.append("- " + ", ".join(f"{k} {_fmt(v)}" for k, v in r.items()))
    for r in f.get("quality", []):
        lines.append("- " + ", ".join(f"{k} {_fmt(v)}" for k, v in r.items() if v is not None))
    for p in f.get("projection", []):
        lines.append(f"- at {p['horizon_steps']} steps: " + ", ".join(f"{k} {_fmt(v)}" for k, v in p.items()
                                                                      if v is not None and k != "horizon_steps"))
    if f.get("describe"):
        lines += ["", "```", f["describe"], "```"]
    for t in f.get("trials", []):
        lines.append("  - trial " + ", ".join(f"{k} {_fmt(v)}" for k, v in t.items() if v is not None)[:400])
    for p in f.get("probes", []):
        lines.append(f"  - probe {p['backend']} batch {p['batch_size']}: {p['status']}, peak {_fmt(p['peak_mem_mb'])} MB"
                     + (f" — {str(p['reason'])[:300]}" if p.get("reason") else ""))
    for c in f.get("cap", []):
        lines.append(f"- refused {c['backend']} batch {c['batch']}: allowed {_fmt(c['allowed_gib'])} GiB, card free "
                     f"{_fmt(c['card_free_gib'])} GiB → {'the cap' if c['refused_by_cap'] else 'not shown to be the cap'}")
    for k in ("compile_cold_s", "compile_warm_s", "interval_contains_1", "half_width", "gpu", "space", "best",
              "stop_reason", "vs_default", "vs_default_verdict", "notes"):
        if k in f:
            lines.append(f"- {k}: {_fmt(f[k])}")
    for n, b in f.get("backends", {}).items():
        lines.append(f"- {n}: {'available' if b['available'] else 'UNAVAILABLE'} — {b['reason']}")
    if "traceback" in f:
        lines += ["", "```", f["traceback"], "```"]
    return lines + [""]


def render(env: dict, command: str, budget_s: float, outcomes: list[Outcome], running: str) -> str:
    lines = ["# tcbench GPU check", "",
             f"- date: {env.get('date')}; device: {env.get('device')}",
             f"- GPU: {env.get('gpu', 'none')} ({_fmt(env.get('gpu_memory_gib'))} GiB, capability "
             f"{_fmt(env.get('capability'))}); driver {_fmt(env.get('driver'))}; CUDA {_fmt(env.get('cuda'))}",
             f"- torch {env.get('torch')}, transformers {env.get('transformers')}, Python {env.get('python')}; "
             f"CPU {env.get('cpu')}",
             f"- command: `{command}` (budget {budget_s:.0f} s)", ""]
    if env.get("error"):
        lines += [f"- environment not read: {env['error']}", ""]
    if running:
        lines += [f"**{running}** (a run stopped here ended inside it)", ""]
    lines += ["| check | status | seconds | result |", "| --- | --- | ---: | --- |"]
    for o in outcomes:
        lines.append(f"| {o.check}. {o.name} | {o.status} | {o.seconds:.0f} | {headline(o).replace('|', '/')} |")
    lines += ["", f"References: {SAGEMAKER_GPT2['source']}: {SAGEMAKER_GPT2['native']} → "
                  f"{SAGEMAKER_GPT2['compiled']}; {PYTORCH2_GEOMEAN}.", ""]
    for o in outcomes:
        lines += _section(o)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="folder for gpu_check.jsonl and gpu.md")
    parser.add_argument("--budget-s", type=float, default=480.0, help="the whole run's seconds (default 480)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default=None,
                        help="cuda (default where torch sees a GPU) or cpu (the dry run)")
    parser.add_argument("--quick", action="store_true", help="tiny models; checks 1-4 only (the CPU dry run)")
    parser.add_argument("--only", default="", help="comma-separated check numbers or names to run (default: all)")
    args = parser.parse_args(argv)
    if args.budget_s <= 0:
        parser.error(f"--budget-s {args.budget_s:g} is not allowed; it must be > 0 seconds")
    command = " ".join(shlex.quote(a) for a in [os.path.basename(sys.executable), *sys.argv])
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    jsonl, md = out_dir / "gpu_check.jsonl", out_dir / "gpu.md"
    jsonl.write_text("")
    os.environ.setdefault("TCBENCH_HOME", tempfile.mkdtemp(prefix="tcbench-gpu-check-"))
    import tcbench as tc

    env = environment(args.device or "?")
    device = args.device or ("cuda" if env.get("cuda_available") else "cpu")
    env["device"] = device
    if device == "cuda" and not env.get("cuda_available"):
        parser.error("--device cuda: torch sees no CUDA device here; the dry run is --device cpu --quick")
    plan = plan_for(device, args.quick, tuple(env["capability"]) if env.get("capability") else None)
    outcomes: list[Outcome] = []

    def write(outcome: Outcome | None, running: str) -> None:
        if outcome is not None:
            outcomes.append(outcome)
            with jsonl.open("a") as fh:
                fh.write(json.dumps(dataclasses.asdict(outcome), default=str) + "\n")
            print(f"[gpu-check] {outcome.check}. {outcome.name}: {outcome.status} ({outcome.seconds:.0f} s) "
                  f"{headline(outcome)}", flush=True)
        elif running:
            print(f"[gpu-check] {running}", flush=True)
        md.write_text(render(env, command, args.budget_s, outcomes, running))

    write(None, "")
    only = {x.strip() for x in args.only.split(",") if x.strip()} or None
    run_checks(tc, plan, args.budget_s, write, only)
    failed = [o for o in outcomes if o.status == "failed" or not all(o.expect.values())]
    print(f"[gpu-check] wrote {md} and {jsonl}; {len(failed)} check(s) failed or missed an expectation", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
