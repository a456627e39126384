"""The job's channel to the parent: every step line arrives once, even when SIGINT lands between two writes."""

from __future__ import annotations

import json
import os

import pytest

from tcbench import JobSpec
from tcbench.core.results import JobResult
from tcbench.job.protocol import Channel, End, Step
from tcbench.runner.inbox import handle


def _read_all(fd: int) -> list[dict]:
    data = b""
    while chunk := os.read(fd, 65536):
        data += chunk
    return [json.loads(line) for line in data.decode().splitlines()]


def test_an_interrupt_after_a_write_neither_repeats_nor_drops_a_line(monkeypatch):
    r, w = os.pipe()
    chan = Channel(w)
    chan.FLUSH_S = 3600.0                    # steps wait for an explicit flush
    monkeypatch.setattr(Channel, "PIPE_BUF", 120)   # a few lines per write
    for i in range(12):
        chan._lines.append((json.dumps({"type": "step", "step": i}) + "\n").encode())
    real_write, calls = os.write, []

    def write_then_interrupt(fd, data):
        n = real_write(fd, data)
        calls.append(n)
        if len(calls) == 2:
            raise KeyboardInterrupt   # SIGINT's handler runs right after the second write returned
        return n

    monkeypatch.setattr(os, "write", write_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        chan.flush()
    monkeypatch.setattr(os, "write", real_write)
    chan.send(End(status="interrupted"))   # the job's way out flushes what is left
    chan.close()
    lines = _read_all(r)
    os.close(r)
    steps = [m["step"] for m in lines if m["type"] == "step"]
    per_write = 120 // len('{"type": "step", "step": 0}\n')
    # every step arrived; only the lines of the write the interrupt followed can come twice (the runner keeps
    # one of each, below), never everything that was queued
    assert len(calls) == 2 and set(steps) == set(range(12)) and lines[-1]["type"] == "end"
    assert len(steps) - 12 <= per_write


def test_the_runner_keeps_one_record_per_step():
    result = JobResult(spec=JobSpec(model="gpt2", size="tiny"), status="running", run_id=1)
    pending: list = []
    for step in (0, 1, 2, 1, 2, 3):
        handle(Step(step=step, step_s=0.01, samples_s=1.0, tokens_s=1.0, mem_bytes=0), result, pending,
               lambda e: None, "j")
    assert [r.step for r in result.records] == [0, 1, 2, 3] and [r.step for r in pending] == [0, 1, 2, 3]
