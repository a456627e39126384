"""The panel's one way to run long work: a daemon thread with its stop event, busy until the work returns."""

from __future__ import annotations

import threading

import pytest

from tcbench.widgets._background import Background


def test_work_runs_off_the_main_thread_and_finish_gets_its_result():
    bg, seen = Background(), {}
    started = threading.Event()

    def work(stop: threading.Event) -> str:
        seen["thread"] = threading.current_thread()
        started.set()
        stop.wait(30)
        return "stopped" if stop.is_set() else "timed out"

    thread = bg.start("a job", work, finish=lambda result: seen.setdefault("result", (result, bg.busy)))
    assert thread is not None and thread.name == "tcbench-a-job" and thread.daemon
    assert started.wait(30) and bg.busy and not bg.stopping
    assert bg.stop() and bg.stopping
    bg.wait(30)
    assert seen["thread"] is thread is not threading.main_thread()
    assert seen["result"] == ("stopped", False) and not bg.busy
    assert not bg.stop()   # nothing runs


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")   # the raising work
def test_a_refused_claim_starts_nothing_and_a_raising_work_still_finishes():
    bg, calls = Background(), []
    assert bg.start("x", lambda stop: calls.append("work"), claim=lambda: calls.append(("claim", bg.busy)) or False) is None
    assert calls == [("claim", True)] and not bg.busy

    def boom(stop: threading.Event) -> None:
        raise RuntimeError("boom")

    thread = bg.start("y", boom, finish=lambda result: calls.append(("finish", result)))
    thread.join(30)
    assert calls[-1] == ("finish", None) and not bg.busy
    assert not bg.stopping   # a fresh stop event per start
