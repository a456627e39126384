"""Observers receive typed events (``tcbench.core.events``): frozen, picklable (workers send theirs from other
processes), and no consumer dispatches on a string."""

from __future__ import annotations

import dataclasses
import pickle
import re
import typing
from pathlib import Path

import pytest

import tcbench as tc
from tcbench.core import events as ev
from tcbench.core.extras import CompilerSettings
from tcbench.core.results import JobResult, StepRecord

ROOT = Path(__file__).resolve().parents[2]
SPEC = tc.JobSpec(model="gpt2", size="tiny")
BASE = dict(job="eager#0", backend="eager", label="eager", run_id=1)
SAMPLES = [
    ev.JobStarted(**BASE, round=0, spec=SPEC),
    ev.PhaseChanged(**BASE, phase="loading"),
    ev.CompilerConfigured(**BASE, settings=CompilerSettings(backend="inductor", mode="default", precision="fp32",
                                                            debug=False)),
    ev.StepMeasured(**BASE, record=StepRecord(step=0, step_s=0.1, samples_s=80.0, tokens_s=1e3, mem_bytes=0,
                                              loss=1.0)),
    ev.LogLine(**BASE, line="[tcbench] hello"),
    ev.JobEnded(**BASE, result=JobResult(spec=SPEC, status="ok", run_id=1)),
    ev.BatchProbed(backend="eager", batch_size=8, status="ok", fits=True, peak_mem_mb=100.0, samples_s=10.0,
                   wall_s=1.0, run_id=2, reason="", reused=False),
    ev.LrPredicted(lr=1e-3, low=5e-4, high=2e-3, b_noise=40.0, text="lr 1e-3"),
    ev.TrialEnded(number=0, lr=1e-3, status="ok", pruned=False, eval_loss=1.2),
    ev.FinalistEnded(number=0, lr=1e-3, seed=1, status="ok", eval_loss=1.2),
    ev.CompileTrialStarted(number=0, label="default"),
    ev.CompileTrialEnded(number=0, label="default", status="ok"),
]


def test_every_kind_of_event_has_a_sample_here_and_is_in_the_union():
    assert {type(e) for e in SAMPLES} == set(typing.get_args(ev.Event))


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: type(e).__name__)
def test_an_event_is_frozen_and_crosses_a_process_boundary(event):
    field = dataclasses.fields(event)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(event, field, None)
    assert type(pickle.loads(pickle.dumps(event))) is type(event)


def test_every_job_event_names_its_job():
    for event in SAMPLES:
        assert isinstance(event, ev.JobEvent) == ({"job", "backend", "label", "run_id"} <= set(vars(event)))


def test_the_public_face_offers_the_events():
    assert tc.events is ev and "events" in tc.__all__


def test_no_consumer_dispatches_on_an_event_type_string():
    """The job's wire format (``job/protocol.py``) has its "type" key; nothing above it reads one."""
    pattern = re.compile(r"""(\[\s*["']type["']\s*\]|\.get\(\s*["']type["'])""")
    found = [f"{p.relative_to(ROOT)}:{n}" for folder in ("tcbench", "widgets") for p in (ROOT / folder).rglob("*.py")
             if p.name != "protocol.py"
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert not found, f"dispatch on an event's 'type' string: {found}"
