"""Instance profiles: the shipped catalog loads, every figure is positive and sourced, lookups are forgiving."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tcbench.core import profiles as _profiles
from tcbench.core.profiles import SOURCED, Profile, local_profile, profile, profile_names, profiles

CATALOG = Path(__file__).resolve().parents[2] / "data" / "profiles.json"
EXPECTED = {
    "ml.g4dn.xlarge", "ml.g4dn.2xlarge", "ml.g4dn.12xlarge",
    "ml.g5.xlarge", "ml.g5.2xlarge", "ml.g5.4xlarge", "ml.g5.8xlarge", "ml.g5.12xlarge", "ml.g5.24xlarge",
    "ml.g5.48xlarge", "ml.p3.2xlarge", "ml.p3.8xlarge", "ml.p3.16xlarge", "ml.p3dn.24xlarge",
    "ml.p4d.24xlarge", "ml.p4de.24xlarge", "ml.p5.48xlarge", "ml.trn1.2xlarge", "ml.trn1.32xlarge",
}


def _catalog_profiles() -> list[Profile]:
    return [profile(n) for n in profile_names() if n != "this-machine"]


def test_every_catalog_row_loads():
    names = profile_names()
    assert names[0] == "this-machine"
    assert set(names[1:]) == EXPECTED
    assert len(names) == len(set(names))


def test_catalog_figures_positive_and_sourced():
    for p in _catalog_profiles():
        for key in ("accelerator_count", "memory_per_device_gib", "vcpus", "host_memory_gib",
                    "network_gbps", "price_per_hour"):
            assert getattr(p, key) > 0, (p.name, key)
        assert p.peak_tflops and all(v > 0 for v in p.peak_tflops.values()), p.name
        assert p.peak_tflops["fp32"] > 0 and "fp16" in p.peak_tflops, p.name
        for key in SOURCED:
            assert p.sources.get(key, "").strip(), (p.name, key)
        assert p.price_region == "us-east-1" and p.price_date, p.name
        assert not p.is_local


def test_seed_chapter_figures():
    """The book chapter (seeds/003) is the source where it has the numbers."""
    g5 = profile("ml.g5.48xlarge")
    assert (g5.accelerator, g5.accelerator_count, g5.memory_per_device_gib, g5.vcpus) == ("A10G", 8, 24.0, 192)
    assert (g5.host_memory_gib, g5.network_gbps, g5.nvlink) == (768.0, 100.0, False)
    assert profile("ml.g5.xlarge").network_up_to and "Figure 5.1" in profile("ml.g5.xlarge").sources["vcpus"]
    p3dn = profile("ml.p3dn.24xlarge")
    assert (p3dn.memory_per_device_gib, p3dn.vcpus, p3dn.efa, p3dn.nvlink) == (32.0, 96, True, True)
    assert not profile("ml.p3.2xlarge").nvlink and profile("ml.p3.8xlarge").nvlink
    p4d = profile("ml.p4d.24xlarge")
    assert (p4d.accelerator_count, p4d.memory_per_device_gib, p4d.vcpus, p4d.host_memory_gib) == (8, 40.0, 96, 1152.0)
    assert (p4d.network_gbps, p4d.efa, p4d.nvlink) == (400.0, True, True)
    # dtype support: no bf16/tf32 before Ampere
    assert "bf16" not in profile("ml.p3.2xlarge").peak_tflops and "tf32" not in profile("g4dn.xlarge").peak_tflops
    assert profile("ml.p4d.24xlarge").peak_tflops["tf32"] == 156.0


def test_this_machine_is_read_from_the_host():
    me = profile("this-machine")
    assert me.is_local and me.vcpus >= 1 and me.host_memory_gib > 0
    assert me.memory_budget_gb > 0
    assert me.price_per_hour is None
    assert all("host" in me.sources[k] or "this machine" in me.sources[k] for k in ("vcpus", "host_memory_gib"))
    assert me.label.startswith("this machine — ") and f"{me.vcpus} cores" in me.label


def test_nvidia_smi_is_parsed_and_guarded(monkeypatch):
    monkeypatch.setattr(_profiles.shutil, "which", lambda exe: None)
    assert _profiles.nvidia_gpus() == []
    monkeypatch.setattr(_profiles.shutil, "which", lambda exe: "/usr/bin/nvidia-smi")
    answer = subprocess.CompletedProcess([], 0, stdout="NVIDIA A10G, 23028\nNVIDIA A10G, 23028\n", stderr="")
    monkeypatch.setattr(_profiles.subprocess, "run", lambda *a, **k: answer)
    assert _profiles.nvidia_gpus() == [("NVIDIA A10G", 22.5), ("NVIDIA A10G", 22.5)]

    def hang(*a, **k):
        raise subprocess.TimeoutExpired("nvidia-smi", 5)
    monkeypatch.setattr(_profiles.subprocess, "run", hang)
    assert _profiles.nvidia_gpus() == []


def test_intra_node_bandwidth_is_sourced_for_every_multi_device_profile():
    for p in _catalog_profiles():
        if p.accelerator_count > 1:
            assert p.intra_node_gbytes_s is not None and p.intra_node_gbytes_s > 0, p.name
            assert "GB/s" in p.sources["intra_node_gbytes_s"], p.name
        else:
            assert p.intra_node_gbytes_s is None, p.name
    # per device, each way: NVLink 2.0 (V100) 300 GB/s both ways -> 150; A100 NVSwitch 600 -> 300; PCIe Gen3/Gen4 x16
    assert profile("ml.p3.16xlarge").intra_node_gbytes_s == 150.0
    assert profile("ml.p4d.24xlarge").intra_node_gbytes_s == 300.0
    assert profile("ml.g4dn.12xlarge").intra_node_gbytes_s == 16.0 and profile("ml.g5.48xlarge").intra_node_gbytes_s == 32.0
    assert local_profile().intra_node_gbytes_s is None and local_profile().sources["intra_node_gbytes_s"]


@pytest.mark.parametrize("name, value, allowed", [("ml.p4d.24xlarge", -300, "> 0"), ("ml.p4d.24xlarge", None, "GB/s"),
                                                  ("ml.g5.xlarge", 32.0, "null")])
def test_bad_intra_node_bandwidth_names_profile_and_field(tmp_path, monkeypatch, name, value, allowed):
    _write_catalog(tmp_path, monkeypatch, lambda d: _find(d, name).update(intra_node_gbytes_s=value))
    with pytest.raises(ValueError) as err:
        profiles()
    text = str(err.value)
    assert name in text and "'intra_node_gbytes_s'" in text and repr(value) in text and allowed in text


def test_label_and_memory_budget():
    g5 = profile("ml.g5.2xlarge")
    assert g5.label == "ml.g5.2xlarge — 1× A10G 24 GiB — $1.52/h"
    assert g5.memory_budget_gb == 24.0


@pytest.mark.parametrize("spelling", ["ml.g5.2xlarge", "g5.2xlarge", "G5.2XLARGE", " ml.g5.2xlarge "])
def test_ml_prefix_optional(spelling):
    assert profile(spelling).name == "ml.g5.2xlarge"


def test_profile_passes_a_profile_through():
    p = profile("ml.p3.2xlarge")
    assert profile(p) is p
    assert hash(p) == hash(profile("p3.2xlarge"))  # frozen and hashable despite its dict fields


@pytest.mark.parametrize("typo, hint", [("ml.g5.2xlarg", "ml.g5.2xlarge"), ("g5.2xlarg", "ml.g5.2xlarge"),
                                        ("p4", "ml.p4d.24xlarge")])
def test_unknown_name_suggests_close_matches(typo, hint):
    with pytest.raises(ValueError) as err:
        profile(typo)
    text = str(err.value)
    assert repr(typo) in text and repr(hint) in text and "tcbench.profiles()" in text


def test_profiles_dataframe():
    df = profiles()
    assert list(df.columns) == [
        "name", "family", "accelerator", "count", "memory_per_device_gib", "vcpus", "host_memory_gib",
        "network_gbps", "efa", "nvlink", "intra_node_gbytes_s", "peak_fp32_tflops", "peak_bf16_tflops", "peak_fp16_tflops",
        "price_per_hour", "region", "price_date", "label"]
    assert df["name"].iloc[0] == "this-machine" and len(df) == len(EXPECTED) + 1
    row = df.set_index("name").loc["ml.p4d.24xlarge"]
    assert row["peak_bf16_tflops"] == 312.0 and row["price_per_hour"] > 0


# --- a corrupted catalog names the profile and the field -------------------------------------------------


def _write_catalog(tmp_path: Path, monkeypatch, change) -> None:
    doc = json.loads(CATALOG.read_text(encoding="utf-8"))
    change(doc)
    (tmp_path / "profiles.json").write_text(json.dumps(doc), encoding="utf-8")
    monkeypatch.setenv("TCBENCH_DATA", str(tmp_path))


def _find(doc: dict, name: str) -> dict:
    return next(p for p in doc["profiles"] if p["name"] == name)


def test_env_override_is_used(tmp_path, monkeypatch):
    _write_catalog(tmp_path, monkeypatch, lambda d: d.update(profiles=[_find(d, "ml.g5.xlarge")]))
    assert profile_names() == ["this-machine", "ml.g5.xlarge"]


def test_negative_figure_names_profile_and_field(tmp_path, monkeypatch):
    _write_catalog(tmp_path, monkeypatch, lambda d: _find(d, "ml.g5.xlarge").update(vcpus=-4))
    with pytest.raises(ValueError, match=r"ml\.g5\.xlarge.*'vcpus' = -4.*> 0"):
        profiles()


def test_missing_source_names_profile_and_field(tmp_path, monkeypatch):
    _write_catalog(tmp_path, monkeypatch, lambda d: _find(d, "ml.p3.2xlarge")["sources"].pop("host_memory_gib"))
    with pytest.raises(ValueError, match=r"ml\.p3\.2xlarge.*sources\.host_memory_gib.*source"):
        profile("ml.p3.2xlarge")


def test_bad_peak_names_accelerator_and_dtype(tmp_path, monkeypatch):
    _write_catalog(tmp_path, monkeypatch, lambda d: d["accelerators"]["A100"]["peak_tflops"].update(bf16=0))
    with pytest.raises(ValueError, match=r"A100.*peak_tflops\.bf16"):
        profiles()


def test_missing_catalog_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setenv("TCBENCH_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match="TCBENCH_DATA"):
        profiles()


def test_every_figure_shows_its_source_and_date():
    df = profiles(sources=True)
    assert {"name", "figure", "value", "source", "date"} <= set(df.columns)
    g5 = df[df["name"] == "ml.g5.2xlarge"].set_index("figure")
    assert g5.loc["price_per_hour", "date"] == profile("ml.g5.2xlarge").price_date
    assert g5.loc["memory_per_device_gib", "date"] == "2026-11-22" and g5.loc["accelerator", "value"] == "A10G"
    assert "A10" in g5.loc["peak_fp32_tflops", "source"]
    assert (df["source"].str.len() > 0).all(), df[df["source"].str.len() == 0]
    local = df[df["name"] == "this-machine"]
    assert (local["date"] == "read now").all()
