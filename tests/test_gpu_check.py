"""The GPU check (benchmarks/gpu_check.py): its CUDA-only arithmetic without a GPU, its budget and failure handling
with fake checks, and the dry run (`--device cpu --quick`) end to end on this CPU, as CI runs it before a GPU is
ever at hand."""

import importlib.util
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tcbench.core.profiles import gpu_datasheet
from tcbench.host.doctor import _gpu_detail
from tcbench.host.requirements import backend_check
from tcbench.job.backends.base import memory_fraction

ROOT = Path(__file__).resolve().parents[1]
# PyTorch's out-of-memory message under set_per_process_memory_fraction (c10/cuda/CUDACachingAllocator.cpp)
CAPPED_OOM = ("CUDA out of memory. Tried to allocate 1.54 GiB. GPU 0 has a total capacity of 79.19 GiB of which "
              "52.31 GiB is free. Including non-PyTorch memory, this process has 26.87 GiB memory in use. 24.00 GiB "
              "allowed; Of the allocated memory 22.91 GiB is allocated by PyTorch, and 512.00 MiB is reserved by "
              "PyTorch but unallocated.")
CARD_OOM = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.68 GiB of which "
            "310.00 MiB is free. Including non-PyTorch memory, this process has 23.37 GiB memory in use.")


@pytest.fixture(scope="module")
def gc():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = mod   # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_bf16_only_where_the_gpu_has_bf16_tensor_cores(gc):
    assert gc.precision_for("cuda", (9, 0)) == "bf16"    # H100, H200
    assert gc.precision_for("cuda", (8, 6)) == "bf16"    # A10G
    assert gc.precision_for("cuda", (7, 5)) == "fp16"    # T4: no bf16
    assert gc.precision_for("cuda", None) == "fp16"
    assert gc.precision_for("cpu", (9, 0)) == "fp32"
    assert gc.plan_for("cuda", False, (8, 0)).precision == "bf16"


def test_the_cap_is_a_share_of_the_card_and_none_when_the_card_is_smaller():
    h100 = 81559 * 2**20
    assert memory_fraction(24.0, h100) == pytest.approx(24 * 1024 / 81559)
    assert memory_fraction(None, h100) is None and memory_fraction(0, h100) is None
    assert memory_fraction(24.0, 24 * 2**30) is None     # an A10G itself: no cap to set
    assert memory_fraction(80.0, 24 * 2**30) is None


def test_a_refused_probe_tells_the_cap_from_the_card(gc):
    capped = gc.cap_evidence(CAPPED_OOM)
    assert capped == {"allowed_gib": 24.0, "card_free_gib": 52.31, "refused_by_cap": True}
    card = gc.cap_evidence(CARD_OOM)
    assert card["allowed_gib"] is None and card["card_free_gib"] == pytest.approx(310 / 1024)
    assert not card["refused_by_cap"] and not gc.cap_evidence("")["refused_by_cap"]


def test_xla_on_a_gpu_or_a_torch_past_its_last_release_says_why_and_offers_no_wrong_command():
    ok, reason, fix = backend_check("xla", {"torch": "2.11.0"}, gpu=True)
    assert not ok and "NVIDIA GPU" in reason and "2.9" in reason and fix is None
    ok, reason, fix = backend_check("xla", {"torch": "2.14.1"}, gpu=False)
    assert not ok and "no release matches torch 2.14.1" in reason and "torch_xla==2.9.*" in fix
    assert "torch_xla==2.14" not in reason + fix
    ok, reason, fix = backend_check("xla", {"torch": "2.9.0"}, gpu=False)
    assert not ok and fix == "pip install 'torch_xla==2.9.*'"
    assert backend_check("xla", {"torch": "2.9.0", "torch_xla": "2.9.0"}, gpu=True)[0]


def test_the_datasheet_peak_of_a_gpu_the_catalog_names():
    acc, peaks, source = gpu_datasheet("NVIDIA H100 80GB HBM3")
    assert acc == "H100" and peaks["bf16"] == 989.5 and "datasheet" in source
    assert gpu_datasheet("NVIDIA H200")[0] == "H200"
    assert gpu_datasheet("NVIDIA A10G")[1]["bf16"] == 70.0
    assert gpu_datasheet("NVIDIA H100 PCIe") is None     # other peaks than the SXM column
    assert "datasheet peak 989.5" in _gpu_detail([("NVIDIA H200", 139.8)])
    assert "no datasheet peak" in _gpu_detail([("NVIDIA H100 PCIe", 79.6)])


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_checks_are_skipped_stopped_or_failed_and_each_written_as_it_ends(gc, monkeypatch):
    clock = _Clock()
    plan = gc.Plan(device="cuda", quick=False, precision="bf16", need_s={"doctor": 5, "compare": 100, "max_batch": 50},
                   cap_s={"max_batch": 0.05})

    def doctor(tc, plan, stop):
        clock.now += 30
        return gc.Outcome("1", "doctor", "doctor", figures={"backends": {}})

    def compare(tc, plan, stop):
        raise RuntimeError("CUDA error: an illegal memory access")

    def max_batch(tc, plan, stop):
        assert stop.wait(5)     # its cap stops it
        return gc.Outcome("3", "max_batch", "max batch", figures={"table": []})

    def never(tc, plan, stop):
        raise AssertionError("a check that cannot fit must not start")

    monkeypatch.setattr(gc, "CHECKS", [("doctor", doctor), ("compare", compare), ("max_batch", max_batch),
                                       ("aa", never), ("tune_compile", never)])
    monkeypatch.setattr(gc, "NUMBERS", {"doctor": "1", "compare": "2", "max_batch": "3", "aa": "4", "tune_compile": "7"})
    plan = gc.Plan(**{**plan.__dict__, "need_s": {**plan.need_s, "aa": 10**6, "tune_compile": 0}})
    written, running = [], []
    outs = gc.run_checks(None, plan, 200, lambda o, r: written.append(o) if o else running.append(r),
                         only={"1", "2", "3", "4"}, clock=clock)
    assert [o.status for o in outs] == ["done", "failed", "stopped", "skipped", "skipped"]
    assert outs[0].seconds == 30
    assert "illegal memory access" in outs[1].reason and "Traceback" in outs[1].figures["traceback"]
    assert "what it measured so far" in outs[2].reason
    assert "needs about 1000000 s" in outs[3].reason and "--only" in outs[4].reason
    assert written == outs and len(running) == 3 and "check 1 (doctor) running" in running[0]
    md = gc.render({"date": "d", "device": "cuda"}, "python3 gpu_check.py", 200, outs, "")
    assert all(f"| {o.check}. {o.name} | {o.status} |" in md for o in outs)


@pytest.mark.integration
@pytest.mark.slow
def test_the_dry_run_writes_every_check_done_or_skipped_with_a_reason(tmp_path):
    """`gpu_check.py --device cpu --quick`: the script the GPU runs, end to end here (CI: under 3 minutes)."""
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--device", "cpu", "--quick",
                           "--budget-s", "170", "--out", str(out)], capture_output=True, text=True, env=env,
                          timeout=400, cwd=ROOT)
    lines = [json.loads(x) for x in (out / "gpu_check.jsonl").read_text().splitlines()]
    by = {x["name"]: x for x in lines}
    assert list(by) == ["doctor", "compare", "max_batch", "aa", "reduce_overhead", "model_bert-base-cased",
                        "model_roberta-base", "model_distilbert-base-uncased", "tune_compile", "time_to_quality"], \
        done.stdout[-3000:]
    for x in lines:
        assert x["status"] in ("done", "skipped", "stopped", "failed")
        assert x["status"] != "skipped" or x["reason"], x
        assert x["status"] != "failed", (x["reason"], x["figures"].get("traceback"))
    assert by["doctor"]["status"] == "done" and by["doctor"]["expect"]["eager available"]
    for name in ("compare", "max_batch", "aa"):
        assert by[name]["status"] in ("done", "stopped"), by[name]
    cmp = by["compare"]["figures"]
    assert [r["label"] for r in cmp["rows"]] == ["eager", "inductor"] and cmp["jobs"]["inductor"]
    assert all(j["launcher"] in ("fork", "spawn") for jobs in cmp["jobs"].values() for j in jobs)
    assert by["max_batch"]["figures"]["table"][0]["backend"] == "eager"
    assert by["aa"]["figures"]["rows"][1]["label"] == "eager (A/A)"
    assert by["reduce_overhead"]["reason"] == "CUDA graphs need a CUDA device"
    assert "--quick" in by["tune_compile"]["reason"] and "--quick" in by["time_to_quality"]["reason"]
    md = (out / "gpu.md").read_text()
    for text in ("date:", "driver", "CUDA", "torch ", "transformers ", "command: `", "--device cpu --quick",
                 "| 7. tune_compile | skipped |"):
        assert text in md, text
