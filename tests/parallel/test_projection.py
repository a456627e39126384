"""The data-parallel scaling projection: the ring all-reduce arithmetic, the table's behaviour, EFA, the calibration
of this machine's link, bad inputs and the CLI command. Pure computation: no job, no torch, no timings."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import tcbench as tc
from tcbench.cli.app import build_parser, main
from tcbench.parallel import (LinkAssumptions, ScalingProjection, calibrate_link, gradient_bytes, project_scaling,
                              ring_allreduce_s, ring_bytes_per_device)
from tcbench.parallel import projection as projection_module
from tcbench.cli.parallel import cmd_project_scaling

MIB = 2**20
BERT_LARGE = 340_000_000


# --- the reference's arithmetic --------------------------------------------------------------------------


def test_bert_large_in_half_precision_is_about_650_mib():
    d = gradient_bytes(BERT_LARGE, "fp16")
    assert d == 680_000_000 and 640 <= d / MIB <= 660   # "about 650 MB": 648 MiB
    assert gradient_bytes(BERT_LARGE, "bf16") == d and gradient_bytes(BERT_LARGE, "fp32") == 2 * d
    res = project_scaling(params=BERT_LARGE, precision="fp16", profiles=["ml.p4d.24xlarge"], nodes=(1, 2))
    assert (res.table["grad_mib"].between(640, 660)).all() and 640 <= res.grad_mib <= 660


@pytest.mark.parametrize("devices, factor", [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75), (64, 2 * 63 / 64)])
def test_ring_traffic_is_2_n_minus_1_over_n_of_d(devices, factor):
    assert ring_bytes_per_device(1000.0, devices) == pytest.approx(1000.0 * factor)


def test_one_device_sends_nothing_and_waits_for_nothing():
    assert ring_allreduce_s(680e6, 1, gbytes_s=1.0, alpha_s=1.0) == 0.0
    res = project_scaling(params=BERT_LARGE, profiles=["ml.p3.16xlarge", "ml.p4d.24xlarge"])
    one = res.table[res.table["devices"] == 1]
    assert len(one) == 2 and (one["allreduce_ms"] == 0).all() and (one["ring_mib_per_device"] == 0).all()
    expected = 2 * (res.table["devices"] - 1) / res.table["devices"] * res.table["grad_mib"]
    assert np.allclose(res.table["ring_mib_per_device"], expected)


def test_allreduce_time_grows_with_devices_and_shrinks_with_bandwidth():
    devices = [1, 2, 3, 4, 8, 16, 32, 64]
    times = [ring_allreduce_s(680e6, n, gbytes_s=10.0, alpha_s=20e-6) for n in devices]
    assert times == sorted(times)
    by_bandwidth = [ring_allreduce_s(680e6, 16, gbytes_s=b, alpha_s=20e-6) for b in (1, 5, 25, 150, 300)]
    assert by_bandwidth == sorted(by_bandwidth, reverse=True)
    res = project_scaling(params=BERT_LARGE, profiles=["ml.p3.16xlarge", "ml.p3dn.24xlarge", "ml.p4d.24xlarge"])
    for _, g in res.table.groupby(["profile", "efa"]):
        assert g["allreduce_ms"].is_monotonic_increasing and g["devices"].is_monotonic_increasing


def test_devices_one_node_subsets_then_whole_nodes():
    res = project_scaling(params=1_000_000, profiles=["ml.p4d.24xlarge", "ml.g4dn.12xlarge", "ml.g5.2xlarge"],
                          nodes=(1, 2, 8))
    plan = {name: list(zip(g["nodes"], g["devices"])) for name, g in res.table.groupby("profile")}
    assert plan["ml.p4d.24xlarge"] == [(1, 1), (1, 2), (1, 4), (1, 8), (2, 16), (8, 64)]
    assert plan["ml.g4dn.12xlarge"] == [(1, 1), (1, 2), (1, 4), (2, 8), (8, 32)]
    assert plan["ml.g5.2xlarge"] == [(1, 1), (2, 2), (8, 8)]
    assert project_scaling(params=1_000_000, profiles=["ml.p4d.24xlarge"], nodes=(2,)).table["devices"].tolist() == [16]


@pytest.mark.parametrize("overlap", [0.0, 0.5, 1.0])
def test_scaling_factor_is_at_most_one_and_one_for_one_device(overlap):
    res = project_scaling(params=BERT_LARGE, overlap=overlap, efa="both",
                          profiles=["ml.p3.16xlarge", "ml.p3dn.24xlarge", "ml.p4d.24xlarge", "ml.g5.48xlarge"])
    t = res.table
    assert (t["scaling_factor"] <= 1.0 + 1e-12).all() and (t["scaling_factor"] > 0).all()
    assert (t.loc[t["devices"] == 1, "scaling_factor"] == 1.0).all()
    assert np.allclose(t["samples_s"], t["devices"] * res.per_device_batch / (t["step_ms"] / 1e3))
    if overlap == 0.0:   # nothing hidden: every multi-device step pays its all-reduce
        assert (t.loc[t["devices"] > 1, "scaling_factor"] < 1.0).all()


def test_efa_off_is_slower_across_nodes_and_identical_inside_one_node():
    res = project_scaling(params=BERT_LARGE, profiles=["ml.p4d.24xlarge"], nodes=(1, 2, 4, 8, 32), efa="both",
                          overlap=0.0)
    t = res.table
    on, off = t[t["efa"]].set_index("devices"), t[~t["efa"]].set_index("devices")
    inside, across = on["nodes"] == 1, on["nodes"] > 1
    columns = ["allreduce_ms", "step_ms", "samples_s", "scaling_factor", "link_gbytes_s"]
    pd.testing.assert_frame_equal(on.loc[inside, columns], off.loc[inside, columns])
    assert (off.loc[across, "allreduce_ms"] > on.loc[across, "allreduce_ms"]).all()
    assert (off.loc[across, "samples_s"] < on.loc[across, "samples_s"]).all()
    only_off = project_scaling(params=BERT_LARGE, profiles=["ml.p4d.24xlarge"], nodes=(1, 2, 4, 8, 32), efa=False,
                               overlap=0.0).table
    assert not only_off["efa"].any() and np.allclose(only_off["step_ms"], t.loc[~t["efa"], "step_ms"])
    follows = project_scaling(params=BERT_LARGE, profiles=["ml.p4d.24xlarge", "ml.p3.16xlarge"]).table
    assert follows.groupby("profile")["efa"].unique().map(list).to_dict() == {
        "ml.p4d.24xlarge": [True], "ml.p3.16xlarge": [False]}


def test_slowest_link_sets_the_pace_and_the_ring_order_matters_across_nodes():
    a = LinkAssumptions()
    t = project_scaling(params=BERT_LARGE, profiles=["ml.p4d.24xlarge"], nodes=(1, 2)).table.set_index("devices")
    assert t.loc[8, "link_gbytes_s"] == 300.0 and t.loc[8, "alpha_us"] == pytest.approx(a.intra_alpha_s * 1e6)
    assert t.loc[16, "link_gbytes_s"] == pytest.approx(400 / 8 * a.efa_efficiency)
    worst = project_scaling(params=BERT_LARGE, profiles=["ml.p4d.24xlarge"], nodes=(1, 2),
                            assumptions=LinkAssumptions(ring_order="interleaved")).table.set_index("devices")
    assert worst.loc[16, "link_gbytes_s"] == pytest.approx(400 / 8 * a.efa_efficiency / 8)
    assert worst.loc[8, "allreduce_ms"] == t.loc[8, "allreduce_ms"] and worst.loc[16, "allreduce_ms"] > t.loc[16, "allreduce_ms"]


def test_compute_given_or_estimated_from_flops():
    est = project_scaling(params=BERT_LARGE, profiles=["ml.p4d.24xlarge"], nodes=(1,), per_device_batch=8,
                          seq_len=128).table
    flops = 6 * BERT_LARGE * 8 * 128
    assert est["compute_ms"].iloc[0] == pytest.approx(flops / (312e12 * 0.35) * 1e3)
    assert est["compute_source"].iloc[0].startswith("estimate")
    given = project_scaling(params=BERT_LARGE, profiles=["ml.p4d.24xlarge", "ml.p3.16xlarge"], nodes=(1,),
                            compute_step_s={"p4d.24xlarge": 0.25}).table.set_index("profile")
    assert given.loc["ml.p4d.24xlarge", "compute_ms"].tolist() == [250.0] * 4
    assert set(given.loc["ml.p4d.24xlarge", "compute_source"]) == {"given"}
    assert given.loc["ml.p3.16xlarge", "compute_source"].str.startswith("estimate").all()


def test_params_and_defaults_from_a_catalog_spec():
    spec = tc.JobSpec(model="bert-base-cased", size="base", batch_size=16, seq_len=64, precision="bf16")
    res = project_scaling(spec=spec, profiles=["ml.p4d.24xlarge"], nodes=(1,))
    catalog = tc.models().set_index(["model", "size"]).loc[("bert-base-cased", "base"), "params"]
    assert res.params == catalog and (res.per_device_batch, res.seq_len, res.precision) == (16, 64, "bf16")
    assert project_scaling(params=5, spec=spec, profiles=["ml.p4d.24xlarge"], nodes=(1,)).params == 5


def test_cost_per_epoch_bills_whole_instances():
    res = project_scaling(params=BERT_LARGE, profiles=["ml.p4d.24xlarge"], nodes=(1, 2), dataset_samples=100_000,
                          per_device_batch=32)
    t, price = res.table, tc.profile("ml.p4d.24xlarge").price_per_hour
    steps = np.ceil(100_000 / (t["devices"] * 32))
    assert np.allclose(t["epoch_h"], steps * t["step_ms"] / 3.6e6)
    assert np.allclose(t["cost_per_epoch"], t["epoch_h"] * price * t["nodes"])
    assert "cost_per_epoch" not in project_scaling(params=BERT_LARGE).table.columns


def test_result_states_its_assumptions_and_plots():
    res = project_scaling(params=BERT_LARGE, efa="both", assumptions=LinkAssumptions(efa_efficiency=0.8, mfu=0.4))
    assert isinstance(res, ScalingProjection) and res.assumptions.efa_efficiency == 0.8
    text = res.describe()
    assert "estimate, not a measurement" in text and "× 0.8 with EFA" in text and "MFU 0.4" in text
    assert "648 MiB" in text and "2(N−1)/N × D" in text and "hierarchical" in text
    assert {"link", "link_gbytes_s", "alpha_us", "efficiency", "overlap", "compute_source"} <= set(res.table.columns)
    fig = res.plot()
    assert sorted(tr.name for tr in fig.data) == sorted(
        ["ml.p3.16xlarge (no EFA)", "ml.p3dn.24xlarge (EFA)", "ml.p3dn.24xlarge (no EFA)", "ml.p4d.24xlarge (EFA)",
         "ml.p4d.24xlarge (no EFA)"])
    assert fig.layout.xaxis.title.text == "devices" and "estimate" in fig.layout.title.text


# --- this machine's link, fitted from measured all-reduces -----------------------------------------------


def _synthetic(alpha_s: float, gbytes_s: float, world_size: int) -> list[dict]:
    sizes = [2**k for k in range(16, 27, 2)] * 2
    return [{"bytes": s, "seconds": ring_allreduce_s(s, world_size, gbytes_s, alpha_s)} for s in sizes]


@pytest.mark.parametrize("world_size", [2, 4])
def test_calibration_recovers_a_known_link(world_size):
    link = calibrate_link(_synthetic(40e-6, 1.3, world_size), world_size=world_size)
    assert link.measured_alpha_s == pytest.approx(40e-6, rel=1e-6)
    assert link.measured_gbytes_s == pytest.approx(1.3, rel=1e-6)
    assert "fitted on this machine" in link.source and link.efa_efficiency == LinkAssumptions().efa_efficiency
    res = project_scaling(params=1_000_000, precision="fp32", profiles=["this-machine"], nodes=(1, 2, 4),
                          compute_step_s=0.05, assumptions=link)
    t = res.table.set_index("devices")
    assert t.loc[4, "allreduce_ms"] == pytest.approx(ring_allreduce_s(4e6, 4, 1.3, 40e-6) * 1e3)
    assert t.loc[2, "link"] == "measured on this machine"


def test_calibration_keeps_the_base_and_takes_a_dataframe():
    base = LinkAssumptions(tcp_efficiency=0.3)
    link = calibrate_link(pd.DataFrame(_synthetic(0.0, 2.0, 2)), base=base)
    assert link.tcp_efficiency == 0.3 and link.measured_gbytes_s == pytest.approx(2.0)
    assert link.measured_alpha_s == pytest.approx(0.0, abs=1e-9)


def _dp_result(run_id: int, bucket_bytes: int, seconds: list[float], world_size: int = 2):
    spec = tc.JobSpec(batch_size=4, nproc=world_size, warmup_steps=1, steps=len(seconds))
    res = tc.JobResult(spec=spec, status="ok", run_id=run_id)
    res.extra = dataclasses.replace(res.extra, world_size=world_size,
                                    allreduce_steps=[[i, 2 * bucket_bytes, 2 * s, 2] for i, s in enumerate(seconds)])
    return res


def test_calibration_takes_finished_data_parallel_jobs_bucket_by_bucket():
    gb, alpha = 0.8, 30e-6   # a link; each job's steps all-reduce two equal buckets
    small, large = 1_467_656, 16_000_000
    jobs = [_dp_result(1, small, [ring_allreduce_s(small, 2, gb, alpha)] * 4),
            _dp_result(2, large, [ring_allreduce_s(large, 2, gb, alpha)] * 4)]
    rows = tc.link_samples(jobs)
    assert len(rows) == 6 and set(rows["bytes"]) == {small, large}   # the warmup step left out; per bucket
    assert set(rows["run_id"]) == {1, 2} and set(rows["world_size"]) == {2}
    link = calibrate_link(jobs, world_size=2)
    assert link.measured_gbytes_s == pytest.approx(gb, rel=1e-6) and link.measured_alpha_s == pytest.approx(alpha)
    with pytest.raises(ValueError, match=r"world_size=4.*they ran with \[2\]"):
        calibrate_link(jobs, world_size=4)
    plain = tc.JobResult(spec=tc.JobSpec(), status="ok", run_id=3)
    with pytest.raises(ValueError, match=r"results\[0\]=.*nproc > 1"):
        tc.link_samples([plain])


@pytest.mark.parametrize("samples, kwargs, field, allowed", [
    ([{"bytes": 1024, "seconds": 0.01}] * 3, {}, "samples", "2 distinct sizes"),
    ([], {}, "samples", "2 distinct sizes"),
    ([{"bytes": 1024, "seconds": 0.01}, {"bytes": -5, "seconds": 0.02}], {}, "samples[1]['bytes']", "> 0"),
    ([{"bytes": 1024, "seconds": 0.01}, {"bytes": 2048}], {}, "samples[1]['seconds']", "seconds > 0"),
    ([{"bytes": 1024, "seconds": 0.02}, {"bytes": 4096, "seconds": 0.01}], {}, "samples", "must grow"),
    ([{"bytes": 1024, "seconds": 0.01}, {"bytes": 4096, "seconds": 0.02}], {"world_size": 1}, "world_size", ">= 2"),
])
def test_calibration_refuses_what_it_cannot_fit(samples, kwargs, field, allowed):
    with pytest.raises(ValueError) as err:
        calibrate_link(samples, **kwargs)
    assert str(err.value).startswith(f"{field}=") and allowed in str(err.value)


# --- bad inputs: one error naming the field, the value and what is allowed, before any computing ------------


@pytest.mark.parametrize("kwargs, expected", [
    (dict(profiles=["ml.p9.huge"]), ("profile='ml.p9.huge'", "tcbench.profiles()")),
    (dict(nodes=(0, 2)), ("nodes=(0, 2)", ">= 1")),
    (dict(nodes=(1, 2.5)), ("nodes=(1, 2.5)", ">= 1")),
    (dict(precision="int8"), ("precision='int8'", "fp32, fp16, bf16")),
    (dict(overlap=1.5), ("overlap=1.5", "<= 1")),
    (dict(overlap=-0.1), ("overlap=-0.1", ">= 0")),
    (dict(compute_step_s=-1.0), ("compute_step_s=-1.0", "> 0")),
    (dict(compute_step_s={"ml.g5.2xlarge": 0.1}), ("compute_step_s={'ml.g5.2xlarge': 0.1}", "not among profiles")),
    (dict(params=0), ("params=0", "> 0")),
    (dict(params=None), ("params=None", "spec=")),
    (dict(per_device_batch=0), ("per_device_batch=0", ">= 1")),
    (dict(efa=True), ("efa=True", "'ml.p3.16xlarge' has no EFA")),
    (dict(efa="maybe"), ("efa='maybe'", "'both'")),
    (dict(precision="bf16"), ("precision='bf16'", "'ml.p3.16xlarge' (V100) has no bf16 peak", "fp32, fp16")),
    (dict(profiles=["this-machine"], nodes=(1, 2), compute_step_s=0.1), ("assumptions=", "calibrate_link")),
    (dict(dataset_samples=-3), ("dataset_samples=-3", ">= 1")),
])
def test_bad_inputs_name_field_value_and_what_is_allowed(kwargs, expected, monkeypatch):
    def computed(*a, **k):
        raise AssertionError("computed before the inputs were checked")
    monkeypatch.setattr(projection_module, "_row", computed)
    with pytest.raises(ValueError) as err:
        project_scaling(**(dict(params=BERT_LARGE, profiles=["ml.p3.16xlarge", "ml.p4d.24xlarge"]) | kwargs))
    for part in expected:
        assert part in str(err.value), (part, str(err.value))


@pytest.mark.parametrize("change, field", [(dict(efa_efficiency=0.0), "efa_efficiency"), (dict(mfu=1.5), "mfu"),
                                           (dict(tcp_alpha_s=-1e-6), "tcp_alpha_s"), (dict(ring_order="tree"), "ring_order"),
                                           (dict(measured_gbytes_s=1.0), "measured_gbytes_s")])
def test_bad_assumptions_name_the_field(change, field):
    with pytest.raises(ValueError, match=rf"LinkAssumptions\.{field}="):
        LinkAssumptions(**change)
    assert dataclasses.replace(LinkAssumptions(), mfu=0.5).mfu == 0.5


def test_exported_from_tcbench_without_importing_torch():
    assert tc.project_scaling is project_scaling and tc.calibrate_link is calibrate_link
    assert {"project_scaling", "ScalingProjection", "LinkAssumptions", "calibrate_link"} <= set(tc.__all__)
    code = ("import sys, tcbench as tc\n"
            "tc.project_scaling(spec=tc.JobSpec(model='gpt2', size='base'), precision='fp16')\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False"


# --- the CLI ----------------------------------------------------------------------------------------------


def test_cli_project_scaling_parses_and_prints_a_table(capsys):
    a = build_parser().parse_args(["project-scaling", "--params", "340000000", "--profiles", "ml.p4d.24xlarge",
                                   "--nodes", "1,2", "--efa", "both", "--dataset-samples", "10000"])
    assert a.func is cmd_project_scaling and a.precision == "fp16" and a.overlap == 0.5
    assert cmd_project_scaling(a) == 0
    out = capsys.readouterr().out
    header = out.splitlines()[0].split()
    assert header[:4] == ["profile", "efa", "nodes", "devices"] and "scaling_factor" in header
    assert "cost_per_epoch" in header and out.count("ml.p4d.24xlarge") == 10   # 5 device counts × EFA on/off
    assert "648.5" in out and "estimate, not a measurement" in out


def test_cli_uses_the_catalog_model_and_reports_bad_values_in_one_line(capsys):
    a = build_parser().parse_args(["project-scaling", "--model", "gpt2", "--size", "base", "--nodes", "1"])
    assert cmd_project_scaling(a) == 0
    assert "gpt2" not in capsys.readouterr().err
    assert main(["project-scaling", "--nodes", "0,2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tcbench: --nodes '0,2' is not allowed") and len(err.strip().splitlines()) == 1
    assert main(["project-scaling", "--overlap", "2"]) == 2
    assert "--overlap 2.0" in capsys.readouterr().err
