"""The terminal: tables in people's units, verdict sentences, progress per job, one-line errors.

The fast tests replace ``tc.compare`` / ``tc.run`` / ``tc.noise_floor`` by scripted stand-ins that send the
engine's events and return hand-built results (figures computed by the engine's own ``job_figures``), so no
training job starts. The ``integration`` test runs real tiny jobs.
"""

from __future__ import annotations

import dataclasses
import io
import re
import subprocess
import sys
import time

import pytest

import tcbench as tc
from tcbench.cli import progress as _cli_progress
from tcbench.comparison import Comparison, NoiseFloor
from tcbench.core.results import AA, standing_for
from tcbench.core.spec import BACKENDS
from tcbench.measure.metrics import job_figures
from tcbench.core.results import JobResult, StepRecord
from tcbench.store.api import Store
from tcbench.cli.app import build_parser, main

SPEC = dict(model="gpt2", size="tiny", batch_size=8, seq_len=32, steps=12, warmup_steps=2)
ARGS = ["--model", "gpt2", "--size", "tiny", "--batch-size", "8", "--seq-len", "32", "--steps", "12", "--warmup", "2"]


@pytest.fixture(autouse=True)
def _own_store_and_no_real_jobs(request, tmp_path, monkeypatch):
    monkeypatch.setenv("TCBENCH_DB", str(tmp_path / "cli.db"))
    if request.node.get_closest_marker("integration") is None:
        def no_job(*args, **kwargs):
            raise AssertionError("a fast test must not start a training job")
        for name in ("compare", "run", "noise_floor"):
            monkeypatch.setattr(tc, name, no_job)


def _job(spec: tc.JobSpec, label: str, rnd: int, step_s: float, status: str = "ok") -> JobResult:
    """A finished job: steady steps scattered ±1 % around ``step_s``, a 20× slower compile step;
    status "noisy": an ok job that had the CPU half of its wall time."""
    recs = []
    for n in range(spec.steps if status in ("ok", "noisy") else 3):
        warm = n < spec.warmup_steps
        s = step_s * (20 if warm and spec.compiled else 1) * (1 + 0.01 * ((n % 3) - 1))
        recs.append(StepRecord(step=n, step_s=s, samples_s=spec.batch_size / s, tokens_s=spec.tokens_per_step / s,
                               mem_bytes=50 * 2**20, loss=2.0 - 0.01 * n, warmup=warm, seq_len=spec.seq_len,
                               cpu_s=s / 2 if status == "noisy" else s))
    status = "ok" if status == "noisy" else status
    figures = job_figures(recs, spec.batch_size, spec.warmup_steps, threads=1) if status == "ok" else job_figures([], 8, 2)
    return JobResult(spec=spec, status=status, run_id=100 + rnd, records=recs, figures=figures, round=rnd,
                     label=label if label.endswith(AA) else "", error="" if status == "ok" else "RuntimeError: boom",
                     env={"threads": 1})


def _scripted(step_s: dict, status: dict | None = None, calls: list | None = None):
    """A stand-in for tc.compare: the engine's events and return type, no processes.

    ``step_s[label]``: the job's step time, or a list of one per round."""
    def compare(spec, backends=("inductor",), rounds=None, observer=None, stop=None, store=None, kind="compare",
                resolve=None, budget_s=None, max_rounds=30, pairing="sequential"):
        if calls is not None:
            calls.append(dict(backends=list(backends), rounds=rounds, resolve=resolve, budget_s=budget_s))
        rounds = rounds or 3
        labels = [spec.backend, *[b + AA if b == spec.backend else b for b in dict.fromkeys(backends)]]
        cmp = Comparison(spec=spec, backends=labels, rounds=rounds, comparison_id=7, kind=kind)
        for rnd in range(rounds):
            for label in labels:
                js = dataclasses.replace(spec, backend=standing_for(BACKENDS)[label])
                base = dict(job=f"{label}#{rnd}", backend=js.backend, label=label, run_id=100 + rnd)
                observer(tc.events.JobStarted(**base, round=rnd, spec=js))
                for phase in ("loading", "compiling" if js.compiled else "warmup", "measuring", "eval"):
                    observer(tc.events.PhaseChanged(**base, phase=phase))
                observer(tc.events.LogLine(**base, line=f"[tcbench] job log of {label}"))
                t = step_s[label][rnd] if isinstance(step_s[label], list) else step_s[label]
                res = _job(js, label, rnd, t, (status or {}).get(label, "ok"))
                for rec in res.records:
                    observer(tc.events.StepMeasured(**base, record=rec))
                observer(tc.events.JobEnded(**base, result=res))
                cmp.results.append(res)
        return cmp
    return compare


def test_compare_prints_table_interval_and_one_verdict_per_backend(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(tc, "compare", _scripted({"eager": 0.1, "inductor": 0.05, "xla": 0.2}, calls=calls))
    code = main(["compare", *ARGS, "--backends", "eager,inductor,xla"])
    cap = capsys.readouterr()
    assert code == 0, cap
    assert calls == [dict(backends=["inductor", "xla"], rounds=None, resolve=None, budget_s=None)]   # the default
    assert re.search(r"^- eager: baseline", cap.out, re.M)
    assert re.search(r"^- inductor: faster: 2\.00× \(95 % interval", cap.out, re.M)
    assert re.search(r"^- xla: slower: 0\.50×.*never pays off", cap.out, re.M)
    assert re.search(r"2\.00× \(\d\.\d\d–\d\.\d\d\)", cap.out), "the table shows the speedup with its interval"
    for name in ("median step ms", "CV", "samples/s", "compile s", "peak MiB", "MFU", "speedup", "peak ÷ native"):
        assert name in cap.out
    assert "eager, inductor, xla: MFU unknown" in cap.out and "loss parity ok" in cap.out
    assert not re.search(r"\d\.\d{5,}", cap.out), "no 9-digit floats"
    assert main(["compare", *ARGS, "--resolve", "0.03", "--budget-s", "90"]) == 0
    assert calls[-1] == dict(backends=["inductor"], rounds=None, resolve=0.03, budget_s=90.0)
    assert main(["compare", *ARGS, "--rounds", "5"]) == 0 and calls[-1]["rounds"] == 5
    table = cap.out.split("\n- ")[0].splitlines()
    assert max(len(line) for line in table) <= 120, table
    assert "single round" not in cap.out


def test_compare_progress_shows_phases_and_a_summary_line_per_job(monkeypatch, capsys):
    monkeypatch.setattr(tc, "compare", _scripted({"eager": 0.1, "inductor": 0.05}))
    assert main(["compare", *ARGS]) == 0
    cap = capsys.readouterr()
    for phase in ("starting", "loading", "compiling", "warmup", "measuring", "eval"):
        assert f": {phase}" in cap.err, phase
    assert "[tcbench] inductor round 2: ok — median step 50.0 ms ± " in cap.err   # adaptive: no "of N"
    assert cap.err.count(" ms IQR") == 6 and "Traceback" not in cap.err
    assert "[tcbench] job log of inductor" in cap.out
    assert main(["compare", *ARGS, "--rounds", "3"]) == 0
    assert "[tcbench] inductor round 2/3: ok — median step 50.0 ms ± " in capsys.readouterr().err


def test_a_speedup_of_0_951_is_not_called_slower(monkeypatch, capsys):
    # per-round ratios 0.80, 0.951, 1.13: the point is 0.951, the interval contains 1
    rounds = [0.1 / 0.80, 0.1 / 0.951, 0.1 / 1.13]
    monkeypatch.setattr(tc, "compare", _scripted({"eager": 0.1, "inductor": rounds}))
    assert main(["compare", *ARGS]) == 0
    out = capsys.readouterr().out
    assert re.search(r"0\.95× \(0\.\d\d–1\.\d\d\)", out), out
    assert "slower" not in out
    assert re.search(r"^- inductor: (no measurable difference|inconclusive)", out, re.M)


def test_a_failed_job_exits_1_and_says_why(monkeypatch, capsys):
    monkeypatch.setattr(tc, "compare", _scripted({"eager": 0.1, "xla": 0.1}, status={"xla": "oom"}))
    assert main(["compare", *ARGS, "--backends", "eager,xla", "--rounds", "1"]) == 1
    cap = capsys.readouterr()
    assert "- xla: inconclusive: xla round 0 ended oom" in cap.out
    assert "error: RuntimeError: boom" in cap.out and "xla: oom — RuntimeError: boom" in cap.err
    assert "single round: no run-to-run spread" in cap.out


def test_a_noisy_job_is_inconclusive_and_says_why(monkeypatch, capsys):
    monkeypatch.setattr(tc, "compare", _scripted({"eager": 0.1, "inductor": 0.05}, status={"inductor": "noisy"}))
    assert main(["compare", *ARGS, "--rounds", "1"]) == 0
    cap = capsys.readouterr()
    assert re.search(r"^- inductor: inconclusive: inductor round 0: the job had the CPU 50%", cap.out, re.M)
    assert "faster" not in cap.out
    assert re.search(r"inductor: ok — median step 50\.0 ms ± [\d.]+ ms IQR, 160\.0 samples/s — noisy: the job had", cap.err)


def test_eager_twice_runs_a_and_a(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(tc, "compare", _scripted({"eager": 0.1, "eager (A/A)": 0.1}, calls=calls))
    assert main(["compare", *ARGS, "--backends", "eager,eager"]) == 0
    assert calls == [dict(backends=["eager"], rounds=None, resolve=None, budget_s=None)]
    assert "- eager (A/A): no measurable difference" in capsys.readouterr().out


def test_rounds_default_to_3():
    parser = build_parser()
    assert parser.parse_args(["compare"]).rounds is None   # adaptive rounds unless a number is asked for
    assert parser.parse_args(["noise-floor"]).rounds == 3


def test_noise_floor_prints_the_smallest_resolvable_speedup(monkeypatch, capsys):
    def noise_floor(spec, rounds=3, observer=None, stop=None, store=None, pairing="sequential"):
        cmp = _scripted({"eager": 0.1, "eager (A/A)": 0.1})(spec, [spec.backend], rounds, observer, kind="noise-floor")
        return NoiseFloor(cmp, 1.0, 0.96, 1.06, "no measurable difference", "no measurable difference: ...")
    monkeypatch.setattr(tc, "noise_floor", noise_floor)
    assert main(["noise-floor", *ARGS, "--rounds", "2"]) == 0
    cap = capsys.readouterr()
    assert ("smallest resolvable speedup now: 1.06× (A/A interval 0.96–1.06×, verdict: no measurable difference)"
            in cap.out)
    assert "eager (A/A) round 2/2: measuring" in cap.err


def test_run_prints_the_same_names_and_units(monkeypatch, capsys):
    def run(spec, observer=None, **kw):
        return _scripted({"eager": 0.1})(spec, [], 1, observer).results[0]
    monkeypatch.setattr(tc, "run", run)
    assert main(["run", *ARGS]) == 0
    out = capsys.readouterr().out
    for name in ("median step ms", "IQR ms", "CV", "samples/s", "peak MiB", "MFU", "noisy"):
        assert name in out
    assert "100.0" in out and "80.0" in out and "MFU unknown" in out
    assert not re.search(r"\d\.\d{5,}", out)


def _stored_run(spec: tc.JobSpec) -> int:
    store = Store()
    res = _job(spec, "eager", 0, 0.1)
    res.run_id = store.insert_run(spec, None, 0)
    res.env = {"host": "box", "threads": 1, "torch": "2.9.0", "commit": "abc123",
               "load_start": {"loadavg": [0.5, 0, 0], "runnable": 1}, "load_end": {"loadavg": [1.25, 0, 0], "runnable": 2}}
    store.add_steps(res.run_id, res.records)
    store.finish_run(res)
    return res.run_id


def test_runs_and_steps_show_environment_and_rounded_numbers(capsys):
    run_id = _stored_run(tc.JobSpec(**SPEC))
    assert main(["runs"]) == 0
    out = capsys.readouterr().out
    for name in ("median step ms", "CV", "noisy", "host", "threads", "torch", "commit", "load", "box", "0.50→1.25"):
        assert name in out, name
    assert not re.search(r"\d\.\d{5,}", out)
    assert main(["steps", str(run_id)]) == 0
    out = capsys.readouterr().out
    assert "step ms" in out and "peak MiB" in out and not re.search(r"\d\.\d{5,}", out)


@pytest.mark.parametrize("argv, what", [(["steps", "99999"], "run 99999 is not in the store"),
                                        (["report", "99999"], "comparison 99999 is not in the store"),
                                        (["show", "99999"], "comparison 99999 is not in the store")])
def test_unknown_ids_are_one_line_errors(argv, what, capsys, tmp_path):
    Store()   # the store exists (reading one that does not is its own error: test_reading.py)
    assert main(argv) == 2
    cap = capsys.readouterr()
    assert cap.err.count("\n") == 1 and cap.err.startswith("tcbench: ") and "Traceback" not in cap.err
    assert what in cap.err and str(tmp_path / "cli.db") in cap.err


def test_unwritable_output_is_a_one_line_error_before_any_job(monkeypatch, capsys, tmp_path):
    calls = []
    monkeypatch.setattr(tc, "compare", _scripted({"eager": 0.1, "inductor": 0.1}, calls=calls))
    out = str(tmp_path / "no-folder" / "r.html")
    assert main(["report", "1", "--out", out]) == 2
    assert main(["compare", *ARGS, "--report", out]) == 2
    err = capsys.readouterr().err
    assert err.count("tcbench: ") == 2 and err.count(f"{out}: cannot write it") == 2 and "does not exist" in err
    assert not calls and not (tmp_path / "no-folder").exists()


def test_bad_spec_value_is_a_clear_error(capsys):
    assert main(["run", "--batch-size", "0"]) == 2
    assert "--batch-size 0 is not allowed" in capsys.readouterr().err


@pytest.mark.parametrize("backends, what", [("eager,tvm", "allowed: eager, inductor, xla"),
                                            ("eager", "nothing to compare")])
def test_bad_backends_name_what_is_allowed(backends, what, capsys):
    assert main(["compare", "--backends", backends]) == 2
    assert what in capsys.readouterr().err


def _events(job: str = "inductor#0", steps: int = 4):
    spec = tc.JobSpec(**{**SPEC, "steps": steps, "backend": "inductor"})
    base = dict(job=job, backend="inductor", label="inductor", run_id=1)
    yield tc.events.JobStarted(**base, round=0, spec=spec)
    yield tc.events.PhaseChanged(**base, phase="compiling")


def test_terminal_bar_shows_phase_steps_and_eta(monkeypatch):
    monkeypatch.setattr(_cli_progress, "_REFRESH_S", 0.01)
    out = io.StringIO()
    spec = tc.JobSpec(**{**SPEC, "backend": "inductor"})
    res = _job(spec, "inductor", 0, 0.05)
    with _cli_progress.Progress(file=out, tty=True) as progress:
        for event in _events(steps=spec.steps):
            progress(event)
        for rec in res.records[:5]:
            progress(tc.events.StepMeasured(job="inductor#0", backend="inductor", label="inductor", run_id=1,
                                            record=rec))
        time.sleep(0.1)   # the ticker redraws the bar
        text = out.getvalue()
        assert "inductor: compiling" in text and "5/12" in text and "<" in text   # tqdm's "elapsed<ETA"
        progress(tc.events.JobEnded(job="inductor#0", backend="inductor", label="inductor", run_id=1, result=res))
    assert "[tcbench] inductor: ok — median step 50.0 ms" in out.getvalue()


def test_plain_output_has_a_heartbeat_during_a_long_compile(monkeypatch):
    monkeypatch.setattr(_cli_progress, "HEARTBEAT_S", 0.0)
    monkeypatch.setattr(_cli_progress, "_REFRESH_S", 0.01)
    out = io.StringIO()
    with _cli_progress.Progress(file=out) as progress:
        for event in _events():
            progress(event)
        time.sleep(0.1)
    assert "[tcbench] inductor: still compiling" in out.getvalue() and "step 0/4" in out.getvalue()


def test_progress_never_counts_a_round_past_its_total():
    out = io.StringIO()
    spec = tc.JobSpec()
    with _cli_progress.Progress(rounds=3, file=out) as progress:
        for rnd in (2, 3, 4):   # a study's searches number their own trials past the seeds it was given
            progress(tc.events.JobStarted(job=f"eager#{rnd}", backend="eager", label="eager", run_id=rnd,
                                          round=rnd, spec=spec))
        # a job of no comparison (a study's noise-scale job) has no round: never "noise-scale round 1/3"
        progress(tc.events.JobStarted(job="noise", backend="eager", label="noise-scale", run_id=9, round=0,
                                      spec=spec, alone=True))
    names = [job["name"] for job in progress.jobs.values()]
    assert names == ["eager round 3/3", "eager round 4", "eager round 5", "noise-scale"]


def test_models_and_backends_tables(capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "bert-base-cased" in out and "t5-base" in out
    assert main(["backends"]) == 0
    assert "inductor" in capsys.readouterr().out


def test_console_script_is_installed():
    out = subprocess.run([sys.executable, "-m", "tcbench.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "compare" in out.stdout and "noise-floor" in out.stdout


@pytest.mark.integration
def test_compare_prints_summary_and_writes_report(tmp_path, capsys):
    report = tmp_path / "out.html"
    # tiny GPT-2 at seq 64 with dropout off: tests/job/test_inductor_phases.py's and notebook 07's graph, compiled
    # once a run (an XLA job here compiled anew every run; XLA's announcement is tested in test_comparison.py). Not
    # test_comparison's seq 32: that file starts on the other worker when this one does, and both compiled it cold
    code = main(["compare", "--model", "gpt2", "--size", "tiny", "--backends", "eager,inductor",
                 "--batch-size", "8", "--seq-len", "64", "--steps", "6", "--warmup", "2", "--lr", "2e-3",
                 "--dropout", "0", "--threads", "1", "--rounds", "1", "--report", str(report)])
    cap = capsys.readouterr()
    assert code == 0, cap.out + cap.err
    assert "Found configuration for compiler inductor" in cap.out
    assert "median step ms" in cap.out and "speedup" in cap.out and "- inductor: " in cap.out
    assert "inductor: compiling" in cap.err and "inductor: ok — median step" in cap.err
    html = report.read_text()
    assert "plotly" in html and "inductor" in html


def test_profiles_sources_name_every_figures_source(capsys):
    from tcbench.cli import app as cli

    assert cli.main(["profiles", "--sources"]) == 0
    out = capsys.readouterr().out
    assert "price_per_hour" in out and "read now" in out and "2026-11-22" in out
