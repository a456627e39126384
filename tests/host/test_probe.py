"""The peak-FLOPs probe: measured in a child process once, cached in the store, never trusted when disturbed."""

import json
import socket
import subprocess

import pytest

from tcbench.host import probe as _probe
from tcbench.host.env import static_env


@pytest.fixture(autouse=True)
def _fresh_session(monkeypatch):
    static_env()   # read once (it runs git) before subprocess.run is replaced
    monkeypatch.setattr(_probe, "_SESSION", {})


def _fake_run(result: dict, calls: list):
    def run(cmd, **kwargs):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, stdout=json.dumps(result) + "\n", stderr="")
    return run


def test_a_quiet_probe_is_stored_and_read_back_by_a_later_session(store, monkeypatch):
    calls: list = []
    monkeypatch.setattr(_probe.subprocess, "run", _fake_run({"flops": 7e10, "spread": 0.02, "cpu_share": 0.99,
                                                             "n": 1024, "threads": 1}, calls))
    first = _probe.peak_flops(1, "fp32", store)
    assert first["flops"] == 7e10 and first["disturbed"] == "" and len(calls) == 1
    monkeypatch.setattr(_probe, "_SESSION", {})          # a new kernel: the store answers, no new probe
    again = _probe.peak_flops(1, "fp32", store)
    assert again["flops"] == 7e10 and again["cached"] is True and len(calls) == 1
    _probe.peak_flops(2, "fp32", store)                  # another thread count is another probe
    assert len(calls) == 2 and calls[-1][-2:] == ["2", "fp32"]


def test_a_disturbed_probe_is_flagged_and_measured_again_after_a_while_not_by_every_job(store, monkeypatch):
    calls: list = []
    monkeypatch.setattr(_probe, "_MEASURED_AT", {})
    monkeypatch.setattr(_probe.subprocess, "run", _fake_run({"flops": 2e10, "spread": 0.6, "cpu_share": 0.45,
                                                             "n": 1024, "threads": 1}, calls))
    got = _probe.peak_flops(1, "fp32", store)
    assert "spread 60%" in got["disturbed"] and "45%" in got["disturbed"]
    assert _probe.peak_flops(1, "fp32", store) == got and len(calls) == 1   # the next job: no probe of its own
    monkeypatch.setattr(_probe, "_MEASURED_AT", {k: t - _probe.RETRY_S for k, t in _probe._MEASURED_AT.items()})
    _probe.peak_flops(1, "fp32", store)
    assert len(calls) == 2                                # RETRY_S later: measured again
    torch_version = static_env()["torch"] or ""
    assert store.latest_probe("matmul_peak", socket.gethostname(), 1, "fp32", torch_version, 3600) is None


def test_the_jobs_of_a_lock_step_round_asking_together_get_one_probe(store, monkeypatch):
    """Three probes at once on 2 cores disturb each other, and each was a process importing torch before its job."""
    import threading
    import time

    calls: list = []
    run = _fake_run({"flops": 2e10, "spread": 0.6, "cpu_share": 0.45, "n": 1024, "threads": 1}, calls)

    def slow(cmd, **kwargs):
        time.sleep(0.2)
        return run(cmd, **kwargs)

    monkeypatch.setattr(_probe, "_MEASURED_AT", {})
    monkeypatch.setattr(_probe.subprocess, "run", slow)
    got: list = []
    threads = [threading.Thread(target=lambda: got.append(_probe.peak_flops(1, "fp32", store))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(got) == 3 and all(g["disturbed"] for g in got)
