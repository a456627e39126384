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


def test_the_first_process_checks_the_next_replays_the_same_answers(tmp_path):
    first, second = _probe(str(tmp_path)), _probe(str(tmp_path))
    assert first["how"].startswith("checked") and second["how"].startswith("replayed"), (first, second)
    assert first["list"] == second["list"]               # the same ISAs as Inductor's own check found
    assert first["vec_isa_ok"] is None and second["vec_isa_ok"] is None   # its config (and cache key) untouched
    records = list(tmp_path.glob("vec-isa-*.json"))
    assert len(records) == 1 and all(isinstance(v, bool) for v in json.loads(records[0].read_text()).values())


def test_a_broken_record_is_checked_again_and_rewritten(tmp_path):
    first = _probe(str(tmp_path))
    record = next(tmp_path.glob("vec-isa-*.json"))
    record.write_text("{not json")
    got = _probe(str(tmp_path))
    assert got["how"].startswith("checked") and got["list"] == first["list"]
    assert json.loads(record.read_text())
