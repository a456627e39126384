"""Real tiny jobs in subprocesses: eager, inductor and xla train, agree, and fail as data (xla where torch_xla is
installed: the leg on the newest torch has none)."""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
import signal
import threading
import time

import pytest

import tcbench as tc
from tcbench import JobSpec

pytestmark = pytest.mark.integration

# torch_xla's last release is 2.9 (for torch 2.9): the leg on the newest torch compares eager with inductor only
XLA = importlib.util.find_spec("torch_xla") is not None
COMPILED = ("inductor", "xla") if XLA else ("inductor",)
needs_xla = pytest.mark.skipif(not XLA, reason="needs torch_xla (its last release, 2.9, needs torch 2.9)")

# Tiny, learnable, dropout off: a tight loss-parity check (DESIGN.md: with dropout on, eager and
# compiled draw different masks, so parity is only a tolerance over a window).
# GPT-2 tiny: its causal-LM loss falls from ~8.3 within a few steps (the tiny BERT's classification loss stays
# near ln 2 for its first 40-80 steps on the shipped task), so "the loss decreases" is a real check.
# Jobs run on 1 thread: with 2 OpenMP threads and anything else running, steps slow down ten-fold.
TINY = JobSpec(model="gpt2", size="tiny", batch_size=8, seq_len=32, steps=24, warmup_steps=3, lr=2e-3,
               seed=0, dropout=0.0, threads=1)


@pytest.fixture(scope="module")
def trio():
    """eager, inductor and xla (where installed) on the same spec, through compare() (shared by several tests)."""
    return tc.compare(TINY, backends=list(COMPILED), rounds=1)


def _losses(r):
    return [l for _, l in r.losses()]


def test_every_backend_trains(trio):
    assert [r.spec.backend for r in trio.results] == ["eager", *COMPILED]
    for r in trio.results:
        assert r.status == "ok", (r.spec.backend, r.error, r.log_tail[-2000:])
        ls = _losses(r)
        assert len(ls) == TINY.steps and all(math.isfinite(x) for x in ls)
        first, last = sum(ls[:4]) / 4, sum(ls[-4:]) / 4
        assert last < first, (r.spec.backend, ls)


@needs_xla
def test_an_xla_job_alone_on_its_cpus_is_not_flagged_disturbed(trio):
    """XLA's CPU runtime keeps threads of its own beside threads=1, pinned with the main thread to the job's CPU:
    their wait for it is the job's own doing. So a pinned XLA job is judged by other processes' use of its CPUs,
    not by its threads' wait: when nobody else used them, it is not disturbed (measured alone and beside a busy
    loop in benchmarks/trust.py, the README's figures)."""
    xla = next(r for r in trio.results if r.spec.backend == "xla")
    if xla.env.get("cpus") is None:
        pytest.skip("the job was not pinned (one usable CPU, or TCBENCH_PIN=0)")
    assert xla.extra.sched.wait_s is None and xla.figures.wait_share is None
    assert xla.figures.others_share is not None
    assert "waited for a CPU" not in xla.figures.noise_reason
    if xla.figures.others_share <= 0.05 and (xla.figures.step_cv or 0) < 0.05:
        assert not xla.noisy, xla.figures
    eager = next(r for r in trio.results if r.spec.backend == "eager")
    assert eager.extra.sched.wait_s is not None   # a job without a runtime's threads keeps its wait


@needs_xla
def test_an_xla_job_is_forked_from_a_launcher_of_its_own_environment(trio):
    """The XLA jobs' environment (USE_TORCH_XLA=1) gets its own launcher, which imported torch_xla without creating
    a runtime: the job is forked (a spawned one spent 6 of its 17 s importing), by a launcher other than eager's."""
    by = {r.spec.backend: r for r in trio.results}
    assert all(r.extra.launcher == "fork" for r in trio.results), {b: r.log_tail[-500:] for b, r in by.items()}
    assert by["eager"].extra.launcher_pid == by["inductor"].extra.launcher_pid != by["xla"].extra.launcher_pid
    if os.environ.get("PJRT_DEVICE", "CPU").upper() == "CPU":   # no persistent cache its CPU client cannot load
        assert by["xla"].cache_state == "cold" and "deserialize" not in by["xla"].log_tail


def test_loss_parity_within_tolerance(trio):
    """Dropout off: the first losses agree within the fp32 tolerance and every job learns alike."""
    s = trio.summary().set_index("backend")
    for b in COMPILED:
        assert bool(s.loss_parity[b]) is True, s.loc[b].to_dict()
        assert s.loss_diff[b] < 0.05 and s.loss_parity_note[b].startswith("within tolerance")


def test_summary_columns_and_figures(trio):
    s = trio.summary()
    for col in ("backend", "median_step_ms", "step_cv", "samples_s", "tokens_s", "compile_latency_s", "peak_mem_mb",
                "speedup", "speedup_ci_low", "speedup_ci_high", "memory_ratio", "break_even_steps", "mfu",
                "mfu_note", "noisy", "noise", "loss_parity", "warnings", "verdict_kind", "verdict"):
        assert col in s.columns
    rows = s.set_index("backend")
    row = rows.loc["inductor"]
    assert row.median_step_ms > 0 and row.samples_s > 0 and row.compile_latency_s >= 0
    assert row.speedup_ci_low <= row.speedup <= row.speedup_ci_high
    assert row.verdict_kind in tc.VERDICT_KINDS and "single round" in row.verdict
    assert rows.loc["eager"].verdict_kind == "baseline"
    for r in trio.results:   # MFU is a number in (0, 1] or absent with its reason, never above 1
        assert (r.mfu is not None and 0 < r.mfu <= 1) or r.mfu_note, (r.mfu, r.mfu_note)
        assert r.cpu_share is not None and r.steady_steps == TINY.steps - TINY.warmup_steps
        assert all(rec.cpu_s is not None for rec in r.records)
        assert r.env["threads"] == 1 and r.env["torch"] and r.env["load_start"] and r.env["load_end"]


def test_steps_and_store_agree(trio):
    df = trio.steps()
    assert set(df.backend) == {"eager", *COMPILED}
    assert len(df) == (1 + len(COMPILED)) * TINY.steps
    stored = tc.runs()
    assert set(r.run_id for r in trio.results) <= set(stored.run_id)
    again = tc.load_comparison(trio.comparison_id)
    assert again.summary()["median_step_ms"].round(6).tolist() == trio.summary()["median_step_ms"].round(6).tolist()


def test_html_and_json_export(trio, tmp_path):
    html = trio.to_html(str(tmp_path / "r.html"))
    assert "plotly" in html and "inductor" in html and (tmp_path / "r.html").exists()
    import json

    data = json.loads(trio.to_json())
    assert len(data["summary"]) == 1 + len(COMPILED) and len(data["steps"]) == (1 + len(COMPILED)) * TINY.steps
    assert data["environment"]["eager#0"]["torch"] == trio.results[0].env["torch"]


def test_a_stored_report_shows_the_stored_environment(trio):
    """The report is built from what is stored, never from the machine that renders it."""
    from tcbench.store.api import Store

    store = Store()
    run_id = trio.results[0].run_id
    store._write("UPDATE runs SET env_json=json_set(env_json, '$.host', 'stored-host-xyz', '$.torch', '9.9.9') "
                 "WHERE comparison_id=:cid", {"cid": trio.comparison_id})
    html = tc.load_comparison(trio.comparison_id).to_html()
    assert "stored-host-xyz" in html and "9.9.9" in html
    assert tc.get_run(run_id).env["host"] == "stored-host-xyz"


@needs_xla
def test_compiled_job_announces_itself_and_debug_report():
    lines = []
    spec = dataclasses.replace(TINY, backend="xla", steps=5, warmup_steps=2, debug=True)
    r = tc.run(spec, observer=lambda e: lines.append(e.line) if isinstance(e, tc.events.LogLine) else None)
    assert r.ok, r.error
    assert any("Found configuration for compiler xla" in l for l in lines)
    assert any("debug mode" in l for l in lines)
    report = os.path.join(r.artifacts, "xla-compiler-report.txt")
    assert "CompileTime" in open(report).read()
    assert r.extra.counters["compiles"] >= 1


def test_nan_loss_is_diverged_and_stops_early():
    r = tc.run(dataclasses.replace(TINY, lr=1e6, steps=40))
    assert r.status == "diverged", (r.status, r.error)
    assert "loss became" in r.error and len(r.records) < 40


def test_killed_worker_is_interrupted_and_keeps_steps():
    got = threading.Event()
    seen = []

    def observer(e):
        if isinstance(e, tc.events.StepMeasured):
            seen.append(e.record)
            if len(seen) == 4:
                got.set()

    holder = {}
    t = threading.Thread(target=lambda: holder.setdefault("r", tc.run(dataclasses.replace(TINY, steps=400), observer)))
    t.start()
    assert got.wait(120)
    import psutil

    def cmdline(p):
        try:
            return " ".join(p.cmdline())
        except psutil.Error:   # a zombie or a process that just ended
            return ""

    me = psutil.Process()
    # a spawned job runs tcbench.job.worker; a forked one is a child of the warm launcher (tcbench.job.zygote)
    workers = [p for p in me.children(recursive=True) if "tcbench.job.worker" in cmdline(p)
               or ("tcbench.job.zygote" in cmdline(p) and p.ppid() != me.pid)]
    assert workers
    os.kill(workers[0].pid, signal.SIGKILL)
    t.join(60)
    r = holder["r"]
    assert r.status == "interrupted" and "SIGKILL" in r.error
    assert len(tc.steps(r.run_id)) >= 4


def test_keyboard_interrupt_in_the_caller_keeps_the_steps_and_leaves_no_worker():
    """Ctrl-C / a notebook interrupt while tc.run waits: the job is stopped, its steps and an `interrupted` row
    stay in the store, and KeyboardInterrupt reaches the caller."""
    import psutil

    def observer(e):
        if isinstance(e, tc.events.StepMeasured) and e.record.step == 3:
            raise KeyboardInterrupt

    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(KeyboardInterrupt):
        tc.run(dataclasses.replace(TINY, steps=400), observer)
    stored = tc.runs().iloc[-1]
    assert stored["status"] == "interrupted" and "KeyboardInterrupt" in stored["error"]
    assert len(tc.steps(int(stored["run_id"]))) >= 4
    time.sleep(0.5)
    left = []
    for p in psutil.Process().children(recursive=True):
        try:
            forked = "tcbench.job.zygote" in " ".join(p.cmdline()) and p.ppid() != os.getpid()   # a forked job
            if p.pid not in before and ("tcbench.job.worker" in " ".join(p.cmdline()) or forked) \
                    and p.status() != "zombie":
                left.append(p)
        except psutil.Error:
            pass
    assert not left, left


def test_stop_event_interrupts_within_two_seconds():
    stop = threading.Event()
    holder = {}

    def observer(e):
        if isinstance(e, tc.events.StepMeasured) and e.record.step == 2:
            holder["t_stop"] = time.monotonic()
            stop.set()

    r = tc.run(dataclasses.replace(TINY, steps=400), observer, stop)
    assert r.status == "interrupted"
    assert time.monotonic() - holder["t_stop"] < 5
    assert len(r.records) >= 3


def test_unavailable_backend_is_reported(monkeypatch):
    import tcbench.job.backends.xla as xla_mod

    monkeypatch.setattr(xla_mod.XlaBackend, "available", lambda self: (False, "torch_xla is not installed"))
    r = tc.run(dataclasses.replace(TINY, backend="xla"))
    assert r.status == "unavailable" and "torch_xla is not installed" in r.error


def test_over_budget_is_oom_with_figures():
    """A budget above the model's memory floor (0.01 GiB here: what preflight refuses below it) but under what the
    job really takes (~0.05 GiB) ends the job as oom, with the figures it measured."""
    with pytest.raises(tc.SpecError, match="the model's weights and optimizer states alone do not fit"):
        tc.run(dataclasses.replace(TINY, steps=6, memory_budget_gb=1e-6))
    r = tc.run(dataclasses.replace(TINY, steps=6, memory_budget_gb=0.02))
    assert r.status == "oom" and "exceeds the profile's budget" in r.error and "GiB" in r.error


def test_failure_is_recorded_with_reason(tmp_path):
    """A failure only the job process can see (its data set vanished after the check) is a stored status + reason."""
    data = tmp_path / "vanishing.csv"
    data.write_text("text,label\n" + "".join(f"words number {i},{i % 2}\n" for i in range(40)))
    r = tc.run(dataclasses.replace(TINY, dataset=str(data)),
               observer=lambda e: data.unlink() if isinstance(e, tc.events.JobStarted) else None)
    assert r.status == "failed" and "vanishing.csv" in r.error, (r.status, r.error)
    assert tc.get_run(r.run_id).status == "failed"


@pytest.mark.parametrize("backend", ["eager", "inductor", pytest.param("xla", marks=needs_xla)])
def test_backend_contract_bf16_and_available(backend):
    """One contract over every backend: it reports availability with a reason and trains in bf16 autocast."""
    from tcbench.job.backends import get_backend

    ok, reason = get_backend(backend).available()
    assert ok is True and isinstance(reason, str) and reason
    r = tc.run(dataclasses.replace(TINY, backend=backend, precision="bf16", steps=4, warmup_steps=2))
    if backend == "xla" and os.environ.get("PJRT_DEVICE", "CPU") == "CPU":
        # torch_xla's autocast exists for TPU and CUDA only: refused with the reason, not a crash
        assert r.status == "unavailable" and "autocast" in r.error, (r.status, r.error)
        return
    assert r.status == "ok", (r.error, r.log_tail[-1500:])
    assert all(math.isfinite(l) for _, l in r.losses()) and r.median_step_s > 0
    assert (r.cache_state in ("cold", "warm")) == (backend != "eager")


def test_aa_is_judged_like_any_pair():
    """A/A: the job against itself, 3 alternating rounds, judged by the same rule as any pair (no A/A special case:
    how often its interval excludes 1 is measured in benchmarks/trust.py). The verdict follows from the interval and
    the noise flags: a disturbance that voids (``Comparison.voids``: not one both jobs of a lock-step round share) ->
    inconclusive; excludes 1 -> faster/slower on its side; its 90 % interval within ±5 % -> no
    measurable difference; wider -> inconclusive."""
    cmp = tc.compare(TINY, backends=["eager"], rounds=3)
    assert cmp.backends == ["eager", "eager (A/A)"]
    assert [r.name for r in cmp.results] == ["eager", "eager (A/A)", "eager (A/A)", "eager", "eager", "eager (A/A)"]
    row = cmp.summary().set_index("backend").loc["eager (A/A)"]
    lo, hi = row.speedup_ci_low, row.speedup_ci_high
    if any(cmp.voids(r) for r in cmp.results):
        expected = "inconclusive"
    elif lo > 1 or hi < 1:
        expected = "faster" if lo > 1 else "slower"
    else:
        from tcbench.measure.interval import EQUIVALENCE_CONFIDENCE, ratio_interval
        from tcbench.measure.metrics import steady
        steps = [([s.step_s for s in steady(a.records)], [s.step_s for s in steady(b.records)])
                 for a, b in cmp.complete_pairs("eager (A/A)")]
        _, eq_lo, eq_hi = ratio_interval(steps, confidence=EQUIVALENCE_CONFIDENCE)   # two one-sided tests: 90 %
        expected = "no measurable difference" if eq_hi <= 1.05 and eq_lo >= 1 / 1.05 else "inconclusive"   # ±5 %
    assert row.verdict_kind == expected, row.verdict
    assert row.loss_parity is True and row.loss_diff == 0   # same seed, same data, same kernels


def test_aa_under_load_is_never_a_confident_verdict():
    """Busy processes (more than the cores) compete with the second job: it is flagged noisy with the reason,
    and the verdict is inconclusive — not "faster" or "slower"."""
    import subprocess
    import sys

    busy: list = []

    def observer(e):
        if isinstance(e, tc.events.JobStarted) and e.label == "eager (A/A)" and e.round == 0:
            # each in a session of its own, as the job is: with the kernel's autogroup scheduling, CPU time is
            # shared between sessions, so 3 busy processes in one session would take only one share
            busy.extend(subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
                        for _ in range(3))
        elif isinstance(e, tc.events.JobEnded) and busy:
            for p in busy:
                p.kill()
                p.wait()
            busy.clear()

    try:
        cmp = tc.compare(dataclasses.replace(TINY, steps=40), backends=["eager"], rounds=2, observer=observer)
    finally:
        for p in busy:
            p.kill()
    disturbed = next(r for r in cmp.results if r.name == "eager (A/A)" and r.round == 0)
    assert disturbed.noisy and ("another process" in disturbed.noise_reason or "steal" in disturbed.noise_reason), \
        disturbed.figures
    row = cmp.summary().set_index("backend").loc["eager (A/A)"]
    assert row.verdict_kind == "inconclusive" and "stop other work" in row.verdict, row.verdict
    assert "threads=1" not in row.verdict   # the advice never repeats a setting the job already used


def test_parity_fails_when_the_compiled_job_cannot_learn():
    native = tc.run(TINY)
    frozen = tc.run(dataclasses.replace(TINY, backend="inductor", lr=1e-12))
    cmp = tc.Comparison(spec=TINY, backends=["eager", "inductor"], results=[native, frozen], rounds=1)
    row = cmp.summary().set_index("backend").loc["inductor"]
    assert row.loss_parity is False and "tolerance" in row.loss_parity_note
    assert any("loss parity failed" in w for w in row.warnings)


def test_parity_is_not_judged_when_nothing_learns():
    """The shipped classification task keeps a tiny BERT at ln 2 for its first steps: nothing to judge."""
    spec = JobSpec(model="bert-base-cased", size="tiny", batch_size=4, seq_len=32, steps=16, warmup_steps=2,
                   lr=1e-7, threads=1)
    row = tc.compare(spec, backends=["eager"], rounds=1).summary().set_index("backend").loc["eager (A/A)"]
    assert row.loss_parity is None and row.loss_parity_note.startswith("not judged"), row.loss_parity_note


def test_make_demo_learns():
    """`make demo`'s settings (read from the Makefile, parsed by the CLI): the native loss clearly falls."""
    import re
    import shlex
    from pathlib import Path

    from tcbench.cli import app as cli
    from tcbench.cli.common import job_spec
    from tcbench.measure.metrics import learned

    text = Path(__file__).resolve().parents[2].joinpath("Makefile").read_text()
    args = shlex.split(re.search(r"DEMO_ARGS := (.*?)\n\n", text, re.S).group(1).replace("\\\n", " "))
    a = cli.build_parser().parse_args(["compare", *args])
    spec = job_spec(a, "eager")
    r = tc.run(spec)
    ok, drop, noise, _ = learned(r.records)
    assert r.ok and ok and drop > 1.0, (drop, noise, r.losses())


def test_costs_on_a_profile(trio):
    c = trio.costs("ml.g5.2xlarge").set_index("backend")
    assert c.loc["eager", "saved_pct"] == 0
    for b in COMPILED:
        expected = 100 * (1 - trio.summary().set_index("backend").samples_s["eager"] / trio.summary().set_index("backend").samples_s[b])
        assert abs(c.loc[b, "saved_pct"] - expected) < 1e-6
    assert c["usd_per_1k_steps"].gt(0).all() and "not that instance's speed" in c["basis"].iloc[0]
    assert "ml.g5.2xlarge" in trio.to_html(profile="ml.g5.2xlarge")
    assert "ml.g5.2xlarge" not in trio.to_html()   # no cost section nobody asked for
