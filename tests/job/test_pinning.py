"""A job's steady steps run pinned to the same CPUs (the last ``threads`` usable ones), and it says which."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PROBE = r"""
import json, os, sys, threading
from tcbench.job.process_tools import pin_cpus
other = threading.Thread(target=threading.Event().wait, args=(5,), daemon=True)
other.start()
cpus = pin_cpus(int(sys.argv[1]), int(sys.argv[2]))
tids = os.listdir("/proc/self/task")
print(json.dumps({"cpus": cpus, "each": sorted({tuple(sorted(os.sched_getaffinity(int(t)))) for t in tids})}))
"""


def _probe(threads: int, world: int, **env: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, str(threads), str(world)], capture_output=True, text=True,
                         env={**os.environ, **env}, check=True)
    return json.loads(out.stdout)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning needs 2 usable CPUs")
def test_every_thread_is_pinned_to_the_last_usable_cpus():
    last = sorted(os.sched_getaffinity(0))[-1]
    got = _probe(1, 1)
    assert got["cpus"] == [last] and got["each"] == [[last]]   # the main thread and the other one


def test_no_pinning_for_data_parallel_ranks_all_cores_or_when_turned_off():
    usable = sorted(os.sched_getaffinity(0))
    assert _probe(1, 2)["cpus"] is None
    assert _probe(len(usable), 1)["cpus"] is None
    off = _probe(1, 1, TCBENCH_PIN="0")
    assert off["cpus"] is None and off["each"] == [usable]


BESIDE = r"""
import json, subprocess, sys, time
from tcbench.job.process_tools import pin_cpus, send_sched, steady_start
cpus = pin_cpus(1, 1)
busy = subprocess.Popen(["taskset", "-c", str(cpus[0]), sys.executable, "-c", "while True: pass"])
time.sleep(0.3)
sent = []
class Chan:
    def send(self, m):
        sent.append(m)
since = steady_start(main_only=None, cpus=cpus)
end = time.perf_counter() + 1.5
while time.perf_counter() < end:
    pass
send_sched(Chan(), since, main_only=None, cpus=cpus)
busy.kill()
print(json.dumps({"others": sent[0].others_share, "wait": sent[0].wait_s, "cpus": sent[0].cpus}))
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning needs 2 usable CPUs")
def test_a_process_on_the_pinned_cpu_shows_as_other_processes_share():
    """A busy loop on the job's own pinned CPU takes about half of it: the job's ``Sched`` says so (others_share),
    with no run-queue wait when asked for none (``main_only=None``: a runtime's own threads)."""
    out = subprocess.run([sys.executable, "-c", BESIDE], capture_output=True, text=True, check=True, timeout=60)
    got = json.loads(out.stdout)
    assert got["wait"] is None and got["cpus"] == [sorted(os.sched_getaffinity(0))[-1]]
    assert got["others"] > 0.2, got
