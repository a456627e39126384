"""Inductor's per-process vector-ISA check is made once per compiler, CPU and torch, and replayed after."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(platform.machine() != "x86_64", reason="Inductor checks vector ISAs on x86 only")]

PROBE = r"""
import json
from tcbench.job.backends.inductor import vec_isa_checked_once
from torch._inductor import config, cpu_vec_isa
how = vec_isa_checked_once()
print(json.dumps({"how": how, "list": [str(i) for i in cpu_vec_isa.valid_vec_isa_list()],
                  "vec_isa_ok": config.cpp.vec_isa_ok}))
"""


def _probe(cache: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300, check=True,
                         env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache})
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def checked(tmp_path_factory) -> tuple:
    """A cache folder after a first process's check, and what that process said: both tests start from it (a
    check builds and loads a program per ISA in a process that imports torch, 8-16 s here)."""
    cache = tmp_path_factory.mktemp("vec-isa")
    return cache, _probe(str(cache))


def test_the_first_process_checks_the_next_replays_the_same_answers(checked):
    cache, first = checked
    second = _probe(str(cache))
    assert first["how"].startswith("checked") and second["how"].startswith("replayed"), (first, second)
    assert first["list"] == second["list"]               # the same ISAs as Inductor's own check found
    assert first["vec_isa_ok"] is None and second["vec_isa_ok"] is None   # its config (and cache key) untouched
    records = list(cache.glob("vec-isa-*.json"))
    assert len(records) == 1 and all(isinstance(v, bool) for v in json.loads(records[0].read_text()).values())


def test_a_broken_record_is_checked_again_and_rewritten(checked, tmp_path):
    cache, first = checked
    record = tmp_path / next(cache.glob("vec-isa-*.json")).name   # its key, in a folder of its own, broken
    record.write_text("{not json")
    got = _probe(str(tmp_path))
    assert got["how"].startswith("checked") and got["list"] == first["list"]
    assert json.loads(record.read_text())
