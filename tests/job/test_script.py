"""Your own training script (issue 9, part 3): tcbench.track(), compile_for_backend(), tcbench.hf, compare-script.

Unit tests speak the job protocol on a pipe in this process (no job process); bad inputs are refused before
any process starts; the integration tests run both examples/ scripts through ``compare-script`` and the
endings a script can have (it raises, it never reports, it forgets the compiler, it stalls).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import tcbench as tc
from tcbench.measure.job import counted_batch_size
from tcbench.job.backends import backend_class
from tcbench.runner import process as _runner
from tcbench.runner.ending import script_ending
from tcbench.job import track as _track
from tcbench.measure.metrics import VERDICT_KINDS
from tcbench.core.results import StepRecord
from tcbench.cli.app import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


# -- the protocol, on a pipe in this process ---------------------------------------------------------------
class Pipe:
    """This process attached to a fake script job; ``messages()`` reads what it sent."""

    def __init__(self) -> None:
        self.r, self.w = os.pipe()
        os.set_blocking(self.r, False)
        self.buf = b""

    def attach(self, **fields) -> tc.JobSpec:
        spec = tc.JobSpec(**{"script": "train.py", "steps": 5, "warmup_steps": 2, **fields})
        _track.JOB.flush()
        _track._join(spec, os.dup(self.w))   # a fresh job; the previous one's channel closes its own copy
        return spec

    def messages(self) -> list[dict]:
        _track.JOB.flush()
        while True:
            try:
                chunk = os.read(self.r, 1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                break
            self.buf += chunk
        return [json.loads(line) for line in self.buf.decode().splitlines()]


@pytest.fixture
def pipe():
    p = Pipe()
    yield p
    if _track.JOB.chan is not None:
        _track.JOB.chan.close()
    _track.JOB.__init__()
    os.close(p.w)
    os.close(p.r)


def _kinds(msgs: list[dict]) -> list[str]:
    return [m["type"] for m in msgs]


def _tiny():
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def _loss(model, batch):
    return model(batch).pow(2).mean()


def test_track_speaks_the_worker_protocol_and_stops_at_the_cap(pipe):
    import torch

    pipe.attach(steps=5, warmup_steps=2, loss_every=2)
    model, opt = tc.compile_for_backend(*_tiny())
    after = ran = 0
    with tc.track() as t:
        for _ in range(50):
            batch = torch.randn(3, 7, 4)   # [B, L, features]: 3 samples of 7 tokens
            loss = _loss(model, batch)
            loss.backward()
            opt.step()
            opt.zero_grad()
            ran += 1
            t.step(loss, batch)
    after = 1   # StopTraining was swallowed: the script goes on after its `with` block
    msgs = pipe.messages()
    kinds = _kinds(msgs)
    assert ran == 5 and after == 1
    assert kinds[:3] == ["log", "phase", "meta"] and "native PyTorch (eager)" in msgs[0]["line"]
    assert [m["phase"] for m in msgs if m["type"] == "phase"] == ["warmup", "measuring"]
    steps = [m for m in msgs if m["type"] == "step"]
    assert [s["step"] for s in steps] == [0, 1, 2, 3, 4] and [s["warmup"] for s in steps] == [True] * 2 + [False] * 3
    assert [s["loss"] is not None for s in steps] == [False, True, False, True, True]   # every 2nd, and the last
    for s in steps:
        assert s["seq_len"] == 7 and math.isclose(s["samples_s"] * s["step_s"], 3)
        assert math.isclose(s["tokens_s"] * s["step_s"], 21) and s["cpu_s"] >= 0 and s["mem_bytes"] >= 0
        assert set(s) - {"type"} == {f for f in StepRecord.__dataclass_fields__}
    meta = next(m for m in msgs if m["type"] == "meta")
    assert meta["n_params"] == 5 and meta["flops_per_step"] == 6 * 5 * 3 * 7 and meta["device"] == "cpu"
    counters = next(m for m in msgs if m["type"] == "counters")   # once, when the warmup steps are done
    assert counters["when"] == "after_warmup" and kinds.count("counters") == 1 and kinds.index("counters") > 3
    assert kinds[-2:] == ["sched", "end"] and msgs[-1]["status"] == "ok"
    assert msgs[-1]["diagnostics"] == {} and msgs[-1]["counters"] == {}
    with tc.track() as t:    # the job has ended: a second loop is not measured
        t.step(1.0)
    assert len(pipe.messages()) == len(msgs)


@pytest.fixture
def turns(tmp_path, monkeypatch):
    """A lock-step round's FIFO as the runner holds it (``tcbench.runner.turns``), with blocks of 2 steps; the test
    gives the turns ahead (one byte each), and reads back how many the job did not take."""
    path = tmp_path / "turns.fifo"
    os.mkfifo(path, 0o600)
    fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
    monkeypatch.setenv("TCBENCH_TURNS", f"{path}:2")

    def left() -> int:
        try:
            return len(os.read(fd, 64))
        except BlockingIOError:
            return 0

    yield SimpleNamespace(give=lambda n: os.write(fd, b"t" * n), left=left)
    os.close(fd)


def _turn_order(msgs: list[dict]) -> list:
    """The turns and the measured steps, in the order the job sent them: ("turn", step, waits) or a step's number."""
    return [("turn", m["step"], m["waits"]) if m["type"] == "turn" else m["step"]
            for m in msgs if m["type"] == "turn" or (m["type"] == "step" and not m["warmup"])]


def test_a_script_in_a_lockstep_round_takes_its_measured_steps_in_turns(pipe, turns):
    """Under ``TCBENCH_TURNS`` the tracker asks for a turn before each block of measured steps (none in the warmup)
    and takes one given turn each time, outside the step's clock; after its last step it says it has no more, before
    its scheduling figures, which count its turns and not its waits."""
    import torch

    pipe.attach(steps=7, warmup_steps=2)
    turns.give(3)   # 5 measured steps in blocks of 2: turns before steps 2, 4 and 6
    model, opt = tc.compile_for_backend(*_tiny())
    with tc.track() as t:
        while True:
            loss = _loss(model, torch.randn(3, 4))
            loss.backward()
            opt.step()
            t.step(loss)
    msgs = pipe.messages()
    assert _turn_order(msgs) == [("turn", 2, True), 2, 3, ("turn", 4, True), 4, 5, ("turn", 6, True), 6,
                                 ("turn", 7, False)]
    assert turns.left() == 0 and _kinds(msgs)[-3:] == ["turn", "sched", "end"] and msgs[-1]["status"] == "ok"


def test_a_trainer_in_a_lockstep_round_takes_its_turns_at_the_callbacks_step(pipe, turns):
    import tcbench.hf

    pipe.attach(steps=5, warmup_steps=1)
    turns.give(2)   # 4 measured steps: turns before steps 1 and 3
    args = tcbench.hf.training_args(_hf_args())
    cb, state = tcbench.hf.TcbenchCallback(seq_len=16), SimpleNamespace(global_step=0)
    control = SimpleNamespace(should_training_stop=False)
    cb.on_train_begin(args, state, control, model=_tiny()[0])
    while not control.should_training_stop:
        cb.on_step_begin(args, state, control)
        state.global_step += 1
        cb.on_step_end(args, state, control)
        cb.on_log(args, state, control, logs={"loss": 1.0})
    cb.on_train_end(args, state, control)
    msgs = pipe.messages()
    assert _turn_order(msgs) == [("turn", 1, True), 1, 2, ("turn", 3, True), 3, 4, ("turn", 5, False)]
    assert turns.left() == 0 and msgs[-1]["type"] == "end" and msgs[-1]["status"] == "ok"


def test_an_exception_in_the_loop_ends_the_job_failed_with_its_reason(pipe):
    import torch

    pipe.attach(steps=20, warmup_steps=1)
    model, opt = tc.compile_for_backend(*_tiny())
    with pytest.raises(ValueError, match="ran out"):
        with tc.track() as t:
            for i in range(10):
                if i == 3:
                    raise ValueError("the data ran out")
                t.step(_loss(model, torch.randn(2, 4)))
    msgs = pipe.messages()
    end = msgs[-1]
    assert end["type"] == "end" and end["status"] == "failed" and end["error"] == "ValueError: the data ran out"
    assert "raise ValueError" in end["traceback"]
    assert [m["step"] for m in msgs if m["type"] == "step"] == [0, 1, 2]


def test_a_non_finite_loss_is_diverged_and_ends_the_loop(pipe):
    pipe.attach(steps=20, warmup_steps=1)
    with tc.track() as t:
        for i in range(10):
            t.step(float("nan") if i == 2 else 1.0)
    end = pipe.messages()[-1]
    assert end["status"] == "diverged" and "loss became nan at step 2" in end["error"]


def test_a_compiled_job_whose_script_never_switched_the_compiler_fails_by_name(pipe):
    pipe.attach(backend="inductor")
    with pytest.raises(RuntimeError, match="never switched the compiler on"):
        with tc.track():
            pass
    end = pipe.messages()[-1]
    assert end["status"] == "failed" and "compile_for_backend" in end["error"]


def test_outside_a_job_everything_is_a_no_op(monkeypatch):
    monkeypatch.delenv(_track.BACKEND_ENV, raising=False)
    assert not _track.JOB.active
    model, opt = _tiny()
    assert tc.compile_for_backend(model, opt) == (model, opt)
    with tc.track() as t:
        for _ in range(100):
            t.step(1.0)        # never stops, never sends
    assert str(tc.device()) in ("cpu", "cuda")
    monkeypatch.setenv(_track.BACKEND_ENV, "tpu")
    with pytest.raises(ValueError, match="TCBENCH_BACKEND='tpu'"):
        _track.backend_name()


def test_moving_to_a_device_keeps_tied_weights_and_the_optimizer_on_the_moved_parameters():
    """What compile_for_backend does for xla (Module.to makes new parameters there), on the meta device."""
    import torch

    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10, bias=False))
    model[1].weight = model[0].weight   # tied, like GPT-2's lm_head and wte
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    opt.state[model[0].weight]["step"] = torch.tensor(1.0)
    from tcbench.job.backends.xla import move_model

    move_model(model, opt, torch.device("meta"))
    assert model[1].weight is model[0].weight and model[0].weight.device.type == "meta"
    assert opt.param_groups[0]["params"] == list(model.parameters())
    assert list(opt.state) == [model[0].weight]


def test_the_compiled_optimizer_step_keeps_a_scheduler_working():
    import torch

    model, opt = _tiny()
    from tcbench.job.backends.inductor import compile_optimizer_step

    compile_optimizer_step(opt, None)             # compiles lazily: nothing runs here
    sched = torch.optim.lr_scheduler.StepLR(opt, 1)   # wraps optimizer.step through its __func__
    assert hasattr(opt.step, "_wrapped_by_lr_sched") and sched.get_last_lr() == [0.1]


# -- Hugging Face: the callback and the compiler switch -------------------------------------------------------
def _hf_args(**kw):
    return SimpleNamespace(**{"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2, "world_size": 1,
                              "torch_compile": False, "torch_compile_backend": None, "torch_compile_mode": None,
                              "optim": "adamw_torch_fused", "device": SimpleNamespace(type="cpu"),
                              "logging_steps": 500, "logging_strategy": "steps", **kw})


def test_the_callback_records_trainer_steps_with_their_logged_loss_and_stops_at_the_cap(pipe):
    import tcbench.hf

    pipe.attach(steps=3, warmup_steps=1)
    args = tcbench.hf.training_args(_hf_args())
    assert args.logging_steps == 1 and not args.torch_compile
    cb, state, control = tcbench.hf.TcbenchCallback(seq_len=16), SimpleNamespace(global_step=0), SimpleNamespace(
        should_training_stop=False)
    cb.on_train_begin(args, state, control, model=_tiny()[0])
    for step in range(3):
        cb.on_step_begin(args, state, control)
        state.global_step += 1
        cb.on_step_end(args, state, control)
        cb.on_log(args, state, control, logs={"loss": 0.5 + step})
        assert control.should_training_stop == (step == 2)
    cb.on_train_end(args, state, control)
    msgs = pipe.messages()
    steps = [m for m in msgs if m["type"] == "step"]
    assert [s["loss"] for s in steps] == [0.5, 1.5, 2.5]
    assert all(math.isclose(s["samples_s"] * s["step_s"], 8) and s["seq_len"] == 16 for s in steps)   # 4 x 2 x 1
    assert msgs[-1]["type"] == "end" and msgs[-1]["status"] == "ok" and _kinds(msgs).count("end") == 1


def test_training_args_switch_the_compiler_per_backend(pipe):
    import tcbench.hf

    pipe.attach(backend="inductor", compile_mode="max-autotune", loss_every=5)
    args = tcbench.hf.training_args(_hf_args())
    assert (args.torch_compile, args.torch_compile_backend, args.torch_compile_mode) == (True, "inductor", "max-autotune")
    assert args.logging_steps == 5 and "Found configuration for compiler inductor" in pipe.messages()[1]["line"]
    pipe.attach(backend="eager")
    args = tcbench.hf.training_args(_hf_args(torch_compile=True, torch_compile_backend="inductor"))
    assert not args.torch_compile and args.torch_compile_backend is None   # the baseline is never compiled
    pipe.attach(backend="xla")
    with pytest.raises(RuntimeError, match="Trainer's device is"):
        tcbench.hf.training_args(_hf_args())
    args = tcbench.hf.training_args(_hf_args(device=SimpleNamespace(type="xla")))
    assert args.optim == "adamw_torch"   # fused AdamW exists for CPU/CUDA only


def test_the_callback_refuses_a_compiled_baseline(pipe):
    import tcbench.hf

    pipe.attach(backend="eager")
    with pytest.raises(RuntimeError, match="eager baseline would be compiled"):
        tcbench.hf.TcbenchCallback().on_train_begin(_hf_args(torch_compile=True), None, None, model=None)
    assert pipe.messages()[-1]["status"] == "failed"


# -- the runner's part -------------------------------------------------------------------------------------
def test_a_script_job_starts_the_script_from_the_callers_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('hi')\n")
    spec = tc.preflight(tc.JobSpec(script="train.py", script_args=["--lr", "3"], backend="xla", steps=7))
    assert spec.script == str(tmp_path / "train.py") and spec.model == "train.py"
    argv, cwd, env = _runner._command(spec, backend_class(spec.backend), 9, tmp_path / "run", tmp_path / "cache")
    assert argv == [sys.executable, str(tmp_path / "train.py"), "--lr", "3"] and cwd == str(tmp_path)
    assert env["TCBENCH_FD"] == "9" and env["TCBENCH_BACKEND"] == "xla"
    assert tc.JobSpec.from_json(env["TCBENCH_SPEC"]) == spec
    assert env["XLA_PERSISTENT_CACHE_PATH"] == str(tmp_path / "cache" / "xla")
    monkeypatch.setenv("TCBENCH_FD", "5")   # a job started from inside a script job gets no stale channel
    assert "TCBENCH_FD" not in _runner.job_env(spec, backend_class(spec.backend), tmp_path, tmp_path)


def test_a_job_gets_fixed_allocator_thresholds_unless_the_caller_set_its_own(tmp_path, monkeypatch):
    spec = tc.preflight(tc.JobSpec(model="gpt2", backend="inductor"))
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    env = _runner.job_env(spec, backend_class(spec.backend), tmp_path, tmp_path)
    assert env["MALLOC_TRIM_THRESHOLD_"] == str(2**30) and env["MALLOC_MMAP_THRESHOLD_"] == "65536"
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_")
    assert _runner.job_env(spec, backend_class(spec.backend), tmp_path, tmp_path)["MALLOC_MMAP_THRESHOLD_"] == str(
        32 * 2**20)


def test_how_a_script_that_ended_on_its_own_is_judged():
    spec = tc.JobSpec(script="train.py", batch_size=99, warmup_steps=1)
    recs = [StepRecord(step=i, step_s=0.5, samples_s=4 / 0.5, tokens_s=1.0, mem_bytes=0, warmup=i == 0)
            for i in range(3)]
    res = tc.JobResult(spec=spec, status="running", records=recs, log_tail="Traceback ... KeyError: 'x'")
    assert script_ending(res, 0) == ("ok", "")
    status, error = script_ending(res, 1)
    assert status == "failed" and "code 1 after 3 measured step(s)" in error and "KeyError" in error
    res.records = []
    status, error = script_ending(res, 0)
    assert status == "failed" and "without reporting a step" in error and "tcbench.track()" in error
    assert counted_batch_size(spec, recs) == 4 and counted_batch_size(tc.JobSpec(batch_size=99), recs) == 99


# -- bad inputs: refused by name before any process ----------------------------------------------------------
@pytest.mark.parametrize("script, args, field, needle", [
    ("missing.py", (), "script", "does not exist"),
    ("README.md", (), "script", "Python script (.py)"),
    ("folder.py", (), "script", "is a folder"),
    ("profile.py", (), "script", "named like Python's standard module 'profile'"),
    ("ok.py", "--lr 3", "script_args", "a list of strings"),
    ("ok.py", ["--steps", 3], "script_args", "a list of strings"),
])
def test_bad_scripts_and_arguments_are_refused_before_any_process(script, args, field, needle, tmp_path,
                                                                   monkeypatch, no_process, store):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ok.py").write_text("")
    (tmp_path / "profile.py").write_text("")
    (tmp_path / "README.md").write_text("")
    (tmp_path / "folder.py").mkdir()
    with pytest.raises(tc.SpecError) as e:
        tc.compare_script(script, args, store=store)
    assert e.value.field == field and needle in str(e.value)
    assert store.runs().empty and store.comparisons().empty


def test_the_cli_passes_what_follows_dashes_to_the_script_and_refuses_in_one_line(monkeypatch, capsys, no_process,
                                                                                   tmp_path):
    seen = {}

    def fake(script, args, **kw):
        seen.update(script=script, args=args, **kw)
        raise ValueError("stopped before running")
    monkeypatch.setattr(tc, "compare_script", fake)
    assert main(["compare-script", "t.py", "--steps", "9", "--rounds", "1", "--", "--steps", "3", "--lr=1"]) == 2
    assert seen["script"] == "t.py" and seen["args"] == ["--steps", "3", "--lr=1"] and seen["steps"] == 9
    assert seen["backends"] == ["inductor"] and seen["rounds"] == 1
    capsys.readouterr()
    monkeypatch.undo()
    monkeypatch.setenv("TCBENCH_DB", str(tmp_path / "cli.db"))
    monkeypatch.setattr(_runner.subprocess, "Popen", lambda *a, **k: (_ for _ in ()).throw(AssertionError("started")))
    assert main(["compare-script", str(tmp_path / "missing.py")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tcbench: script=") and "does not exist" in err and err.count("\n") == 1


# -- integration: real scripts in their own processes ---------------------------------------------------------
def _write(tmp_path: Path, body: str) -> str:
    path = tmp_path / "script.py"
    path.write_text("import tcbench\nimport torch\n\nmodel = torch.nn.Linear(4, 1)\n"
                    "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n" + body)
    return str(path)


LOOP = """
with tcbench.track() as t:
    for i in range(100):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        loss.backward(); opt.step(); opt.zero_grad()
{inner}
        t.step(loss)
"""


@pytest.mark.integration
def test_the_plain_loop_example_through_compare_script(capsys):
    code = main(["compare-script", str(EXAMPLES / "train_loop.py"), "--backends", "eager,inductor", "--rounds", "1",
                 "--steps", "6", "--warmup", "2", "--threads", "1", "--", "--batch-size", "4"])
    cap = capsys.readouterr()
    assert code == 0, cap.out + cap.err
    assert cap.out.count("Found configuration for compiler inductor") == 1   # the compiled run, in one line
    assert "your script" in cap.out and "- inductor: " in cap.out and "speedup" in cap.out
    cmp = tc.load_comparison(int(re.search(r"comparison (\d+)", cap.out).group(1)))
    row = cmp.summary().set_index("backend").loc["inductor"]
    assert row["verdict_kind"] in VERDICT_KINDS and row["speedup_ci_low"] <= row["speedup"] <= row["speedup_ci_high"]
    assert row["memory_ratio"] > 0 and cmp.spec.model == "train_loop.py"
    for r in cmp.results:
        assert r.ok and len(tc.steps(r.run_id)) == 6 and r.figures.n_params > 0
        assert math.isclose(r.samples_s * r.median_step_s, 4)     # the script's batch, not the spec's 8
    assert cmp.by_backend("inductor")[0].extra.counters["compiles"] >= 1


@pytest.mark.integration
def test_the_trainer_example_through_compare_script():
    logs: list[tuple[str, str]] = []
    cmp = tc.compare_script(str(EXAMPLES / "hf_trainer.py"), ["--batch-size", "4"], backends=["inductor"], rounds=1,
                            steps=6, warmup_steps=2, threads=1,
                            observer=lambda e: logs.append((e.label, e.line)) if isinstance(e, tc.events.LogLine) else None)
    assert [r.status for r in cmp.results] == ["ok", "ok"], [r.error for r in cmp.results]
    # on a CPU the two Trainers ran together, each taking its turn at the callback's step (4 measured: one turn)
    assert cmp.pairing == "lockstep" and [r.extra.turns for r in cmp.results] == [1, 1]
    assert [lab for lab, line in logs if "Found configuration for compiler" in line] == ["inductor"]
    s = cmp.summary()
    assert list(s["backend"]) == ["eager", "inductor"] and s["verdict_kind"].iloc[1] in VERDICT_KINDS
    for r in cmp.results:
        steps = tc.steps(r.run_id)
        assert len(steps) == 6 and steps["loss"].notna().all()              # the Trainer's logged loss, per step
        assert math.isclose(r.samples_s * r.median_step_s, 4) and "hf_trainer: 6 steps" in r.log_tail


@pytest.mark.integration
def test_a_script_that_raises_fails_with_its_reason_and_keeps_its_steps(tmp_path):
    inner = "        if i == 3:\n            raise ValueError('the data ran out at step 3')"
    path = _write(tmp_path, "model, opt = tcbench.compile_for_backend(model, opt)\n" + LOOP.format(inner=inner))
    r = tc.run(tc.JobSpec(script=path, steps=10, warmup_steps=1, threads=1))
    assert r.status == "failed" and r.error == "ValueError: the data ran out at step 3", r.error
    assert len(r.records) == 3 and len(tc.steps(r.run_id)) == 3 and "raise ValueError" in r.extra.traceback


@pytest.mark.integration
def test_a_script_without_tracking_or_without_the_compiler_switch_is_a_clear_failure(tmp_path):
    r = tc.run(tc.JobSpec(script=_write(tmp_path, "print('trained, but nobody measured it')\n"), threads=1))
    assert r.status == "failed" and "without reporting a step" in r.error and not r.records, r.error
    r = tc.run(tc.JobSpec(script=_write(tmp_path, LOOP.format(inner="")), backend="inductor", threads=1))
    assert r.status == "failed" and "never switched the compiler on" in r.error


@pytest.mark.integration
def test_a_script_that_stops_reporting_is_stopped_as_stalled(tmp_path):
    inner = "        if i == 3:\n            import time; time.sleep(600)"
    path = _write(tmp_path, LOOP.format(inner=inner))
    r = tc.run(tc.JobSpec(script=path, steps=10, warmup_steps=1, threads=1, stall_s=15))   # loading torch fits in 15 s
    assert r.status == "interrupted" and r.error.startswith("stalled") and len(r.records) == 3
    import psutil

    assert not [p for p in psutil.process_iter(["cmdline"]) if path in " ".join(p.info["cmdline"] or [])]


@pytest.mark.integration
@pytest.mark.skipif(importlib.util.find_spec("torch_xla") is None,
                    reason="needs torch_xla (its last release, 2.9, needs torch 2.9)")
def test_the_plain_loop_on_xla_keeps_gpt2s_tied_weights():
    sys.path.insert(0, str(EXAMPLES))
    try:
        import train_loop
    finally:
        sys.path.remove(str(EXAMPLES))
    tied = sum(p.numel() for p in train_loop.build(train_loop.parse([]))[0].parameters())
    r = tc.run(tc.JobSpec(script=str(EXAMPLES / "train_loop.py"), script_args=("--batch-size", "4"), backend="xla",
                          steps=4, warmup_steps=1, threads=1))
    assert r.ok, r.error
    assert r.device.startswith("xla") and r.figures.n_params == tied
