"""The job protocol: every message kind survives the wire, a bad line is a named error, every kind a job sends is in
the protocol and has a handler in the runner, and the runner applies each one to the result as it always did."""

from __future__ import annotations

import ast
import dataclasses
import io
import json
import os
import queue
from pathlib import Path

import pytest

from tcbench.core import events as ev
from tcbench.core.extras import CompilerSettings, JobExtras
from tcbench.core.results import JobResult, StepRecord
from tcbench.core.spec import JobSpec
from tcbench.job import protocol
from tcbench.job.protocol import (KINDS, MESSAGES, Channel, CompileTimes, Compiler, Counters, End, Eval, Log, Meta,
                                  Parallel, Phase, Sched, Step, Turn, decode, encode)

ROOT = Path(__file__).resolve().parents[2]
SENDERS = ("tcbench/job/worker.py", "tcbench/job/track.py", "tcbench/job/process_tools.py", "tcbench/job/launch.py",
           "tcbench/job/hf.py")

EXAMPLES = [
    Log(line="[tcbench] 2 CPU thread(s) for this job"),
    Phase(phase="measuring"),
    Compiler(backend="inductor", mode="default", precision="fp32", debug=False),
    Parallel(world_size=2, backend="gloo", local_world_size=2),
    Meta(n_params=5, flops_per_step=630.0, device="cpu", task="script", threads=2, env={"gpu": "H100"},
         mem_baseline_bytes=1024),
    Meta(n_params=None, flops_per_step=None, device="cuda:0", task="sequence-classification", threads=1, env={},
         mem_baseline_bytes=0, tokenizer="gpt2 (shipped)"),
    Step(step=3, step_s=0.25, samples_s=32.0, tokens_s=4096.0, mem_bytes=10, loss=2.5, warmup=False, seq_len=128,
         cpu_s=0.5),
    Step(step=4, step_s=0.25, samples_s=32.0, tokens_s=4096.0, mem_bytes=10, allreduce_bytes=400, allreduce_s=0.01,
         buckets=2),
    Counters(when="after_warmup", counters={"compiles": 1, "graph_breaks": 0}),
    CompileTimes(compile_dynamo_s=0.5, compile_aot_s=1.5, compile_backend_s=2.0, aot_cache_hits=0, aot_cache_misses=2,
                 fx_cache_hits=3, fx_cache_misses=1, artifact_key="bb4909753231519f",
                 artifact_state="saved bb4909753231519f"),
    Eval(eval_loss=1.5, losses=[1.0, 2.0], when="initial"),
    Eval(eval_loss=1.25),
    Sched(wall_s=2.0, cpu_s=3.5, wait_s=0.1, steal_share=None, wait_main_only=True, cpus=[1]),
    Turn(step=10),
    Turn(step=40, waits=False),
    End(status="ok", error="", counters={}, diagnostics={}),
    End(status="failed", error="ValueError: x", traceback="Traceback ...", rank=1),
    End(status="ok", noise=[{"small_sq": 2.0, "big_sq": 1.0}]),
]


def test_the_examples_cover_every_kind():
    assert {type(m) for m in EXAMPLES} == set(MESSAGES) and set(KINDS) == {cls.kind for cls in MESSAGES}
    assert len(KINDS) == len(MESSAGES) == 12


@pytest.mark.parametrize("msg", EXAMPLES, ids=lambda m: type(m).__name__)
def test_every_message_round_trips(msg):
    line = encode(msg)
    assert line.endswith("\n") and line.count("\n") == 1
    assert json.loads(line)["type"] == msg.kind
    assert decode(line) == msg and decode(line.encode()) == msg


def test_an_optional_field_is_left_out_while_unset():
    step = json.loads(encode(EXAMPLES[6]))
    assert set(step) - {"type"} == {f.name for f in dataclasses.fields(StepRecord)}   # no all-reduce on one process
    assert json.loads(encode(End(status="ok"))) == {"type": "end", "status": "ok", "error": ""}
    assert json.loads(encode(EXAMPLES[7]))["buckets"] == 2
    assert EXAMPLES[6].record() == StepRecord(step=3, step_s=0.25, samples_s=32.0, tokens_s=4096.0, mem_bytes=10,
                                              loss=2.5, warmup=False, seq_len=128, cpu_s=0.5)


@pytest.mark.parametrize("line,match", [
    ("not json at all", "Expecting value"),
    ("[1, 2]", "a job message is a JSON object, not list"),
    ('{"phase": "loading"}', "unknown job message kind None"),
    ('{"type": "stepp", "step": 1}', "unknown job message kind 'stepp'"),
    ('{"type": "step", "step": 1, "samples_s": 1, "tokens_s": 1, "mem_bytes": 0}',
     "'step' message lacks its field 'step_s'"),
    ('{"type": "phase", "phase": "x", "colour": "red"}', "'phase' message has no field 'colour'"),
])
def test_a_bad_line_is_a_named_error(line, match):
    with pytest.raises(ValueError, match=match):
        decode(line)


def test_encode_refuses_what_is_no_message():
    with pytest.raises(ValueError, match="not a job message"):
        encode({"type": "log", "line": "x"})


# -- every kind a job sends is in the protocol ------------------------------------------------------------------
def _sent(path: Path) -> tuple[list[str], list[str]]:
    """(message classes built in the file, ``send`` calls whose argument is not a message built in place)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    built, odd = [], []
    names = {cls.__name__ for cls in MESSAGES}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        if isinstance(node.func, ast.Name) and node.func.id in names:
            built.append(node.func.id)
        attr = node.func.attr if isinstance(node.func, ast.Attribute) else ""
        if attr == "send" and node.args and not (isinstance(node.args[0], ast.Call)
                                                 and getattr(node.args[0].func, "id", "") in names):
            odd.append(f"{path.name}:{node.lineno} {ast.unparse(node)}")
    return built, odd


def test_every_kind_the_job_sends_is_in_the_protocol():
    built, odd = [], []
    for rel in SENDERS:
        b, o = _sent(ROOT / rel)
        built += b
        odd += o
    # JOB.send(msg) and Channel.send(msg) pass a message on; everything else builds one where it sends it
    assert [o for o in odd if not o.endswith(("self.chan.send(msg)", "JOB.send(msg)"))] == []
    assert set(built) == {cls.__name__ for cls in MESSAGES}   # and every kind of the protocol is sent somewhere
    for rel in SENDERS:   # no dict literal with a "type" key, no string kind, goes out any more
        text = (ROOT / rel).read_text(encoding="utf-8")
        assert '"type":' not in text and 'send("' not in text, rel


def test_the_runner_has_a_handler_for_every_kind():
    from tcbench.runner.inbox import HANDLERS

    assert set(HANDLERS) == set(MESSAGES)


# -- the channel -----------------------------------------------------------------------------------------------
def _lines(fd: int) -> list:
    data = b""
    while chunk := os.read(fd, 65536):
        data += chunk
    return [decode(line) for line in data.decode().splitlines()]


def test_another_rank_sends_its_end_alone_and_signed():
    r, w = os.pipe()
    chan = Channel(w, rank=3, reports=False)
    chan.send(Phase("loading"))
    chan.send(Step(step=0, step_s=0.1, samples_s=1.0, tokens_s=1.0, mem_bytes=0))
    chan.send(End(status="failed", error="boom"))
    chan.close()
    assert _lines(r) == [End(status="failed", error="boom", rank=3)]
    os.close(r)


def test_the_reporting_process_sends_everything_unsigned():
    r, w = os.pipe()
    chan = Channel(w)
    for msg in EXAMPLES[:9]:
        chan.send(msg)
    chan.send(End(status="ok"))
    chan.close()
    assert _lines(r) == [*EXAMPLES[:9], End(status="ok")]
    os.close(r)


# -- the runner's side -----------------------------------------------------------------------------------------
def test_the_reader_decodes_and_shows_what_is_no_message_as_a_log_line():
    from tcbench.runner.process import _reader

    q: queue.Queue = queue.Queue()
    text = encode(Phase("loading")) + "some stray output\n" + '{"type": "beep"}\n' + encode(End(status="ok"))
    _reader(io.StringIO(text), q)
    got = [q.get_nowait() for _ in range(5)]
    assert got[0] == Phase("loading") and got[1] == Log("some stray output") and got[3] == End(status="ok")
    assert isinstance(got[2], Log) and "unknown job message kind 'beep'" in got[2].line and got[4] is None


def _result() -> JobResult:
    return JobResult(spec=JobSpec(model="gpt2", size="tiny"), status="running", run_id=7, env={"threads": 4})


def test_the_runner_applies_each_message_to_the_result():
    from tcbench.runner.inbox import handle

    res, pending, events = _result(), [], []
    for msg in EXAMPLES[:15]:
        assert handle(msg, res, pending, events.append, "eager#0") is None
    assert handle(EXAMPLES[15], res, pending, events.append, "eager#0") == EXAMPLES[15]   # the job's own end
    assert handle(EXAMPLES[16], res, pending, events.append, "eager#0") is None            # rank 1's: kept
    assert res.device == "cuda:0" and res.env == {"threads": 1, "gpu": "H100", "cpus": [1]}
    assert [r.step for r in res.records] == [3, 4] and pending == res.records
    assert res.extra.to_dict() == {
        "phase": "measuring",
        "compiler": {"backend": "inductor", "mode": "default", "precision": "fp32", "debug": False, "scope": "model",
                     "optimizer": True, "cpp_wrapper": False},
        "world_size": 2, "dist_backend": "gloo",
        "tokenizer": "gpt2 (shipped)",   # n_params and flops_per_step: None, as their defaults
        "allreduce_steps": [[4, 400, 0.01, 2]],
        "counters_after_warmup": {"compiles": 1, "graph_breaks": 0},
        "compile_phases": {"compile_dynamo_s": 0.5, "compile_aot_s": 1.5, "compile_backend_s": 2.0,
                           "aot_cache_hits": 0, "aot_cache_misses": 2, "fx_cache_hits": 3, "fx_cache_misses": 1,
                           "compiled_regions": None, "artifact_key": "bb4909753231519f", "artifact_state": "saved bb4909753231519f",
                           "precompiled": None},
        "eval_loss_initial": 1.5, "eval_losses_initial": [1.0, 2.0], "eval_loss_initial_se": 0.5,
        "eval_loss": 1.25, "eval_losses": [1.25],
        "sched": {"wall_s": 2.0, "cpu_s": 3.5, "wait_s": 0.1, "steal_share": None, "wait_main_only": True,
                  "cpus": [1], "others_share": None},
        "rank_ends": {"1": {"status": "failed", "error": "ValueError: x"}},
        "turns": 1,   # Turn(step=10) waits for its turn; Turn(step=40, waits=False) was the last
    }
    assert JobExtras.from_dict(res.extra.to_dict()) == res.extra   # the typed extras, as the store reads them back
    base = {"job": "eager#0", "backend": "eager", "label": "eager", "run_id": 7}
    assert events == [
        ev.LogLine(**base, line=EXAMPLES[0].line),
        ev.PhaseChanged(**base, phase="measuring"),
        ev.CompilerConfigured(**base, settings=CompilerSettings(backend="inductor", mode="default", precision="fp32",
                                                                debug=False, scope="model", optimizer=True,
                                                                cpp_wrapper=False)),
        ev.StepMeasured(**base, record=res.records[0]),
        ev.StepMeasured(**base, record=res.records[1]),
    ]


def test_protocol_imports_only_the_standard_library_and_core():
    tree = ast.parse(Path(protocol.__file__).read_text(encoding="utf-8"))
    mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert {m for m in mods if m.startswith("tcbench")} <= {"tcbench.core.results", "tcbench.core.extras"}
    assert not {m.split(".")[0] for m in mods} & {"torch", "numpy", "pandas"}
