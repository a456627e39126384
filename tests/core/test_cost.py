"""Cost arithmetic checked on hand-computed numbers; savings sign; unpriced profiles; bad input."""

from __future__ import annotations

import pandas as pd
import pytest

from tcbench.core.cost import cost, cost_table, savings_pct
from tcbench.core.profiles import Profile, profile

# $3.60 per hour = $0.001 per second: every dollar figure below is seconds / 1000.
PRICED = Profile(name="test.box", family="test", accelerator="X", accelerator_count=1, memory_per_device_gib=16.0,
                 vcpus=4, host_memory_gib=32.0, price_per_hour=3.6, price_region="us-east-1", price_date="2024")


def test_cost_hand_computed():
    # 100 samples/s, batch 10 -> 0.1 s/step -> 1000 steps = 100 s = $0.10
    # 36,000 samples / 100 per s = 360 s = 0.1 h = $0.36;  100 tokens x 100 samples/s = 10^4 tok/s -> 10^6 tok = 100 s
    c = cost(100.0, PRICED, batch_size=10, seq_len=100, dataset_size=36_000)
    assert c["usd_per_1k_steps"] == pytest.approx(0.10)
    assert c["usd_per_epoch"] == pytest.approx(0.36)
    assert c["usd_per_1m_tokens"] == pytest.approx(0.10)
    assert c["hours_per_epoch"] == pytest.approx(0.1)
    assert c["hours_per_1k_steps"] == pytest.approx(100 / 3600)
    assert c["price_per_hour"] == 3.6 and c["profile"] == "test.box"


def test_cost_on_a_catalog_profile():
    # 36 samples/s at batch 36 = 1 s/step; 1000 s at ml.p3.2xlarge's $3.825/h = 3.825 * 1000 / 3600
    p3 = profile("ml.p3.2xlarge")
    c = cost(36.0, "p3.2xlarge", batch_size=36, seq_len=128)
    assert c["price_per_hour"] == p3.price_per_hour
    assert c["usd_per_1k_steps"] == pytest.approx(p3.price_per_hour * 1000 / 3600)
    assert c["hours_per_epoch"] == pytest.approx(100_000 / 36 / 3600)


def test_basis_says_whose_speed_it_is():
    local = cost(50.0, "ml.g5.2xlarge", 8, 128)["basis"]
    assert "this machine's measured speed" in local and "ml.g5.2xlarge" in local and "not that instance's speed" in local
    there = cost(50.0, "ml.g5.2xlarge", 8, 128, measured_on_local=False)["basis"]
    assert "measured on ml.g5.2xlarge" in there and "not that instance" not in there


def test_this_machine_gives_times_but_no_dollars():
    c = cost(100.0, "this-machine", batch_size=10, seq_len=100, dataset_size=36_000)
    assert c["usd_per_1k_steps"] is None and c["usd_per_epoch"] is None and c["usd_per_1m_tokens"] is None
    assert c["price_per_hour"] is None
    assert c["hours_per_epoch"] == pytest.approx(0.1)
    assert "no $ figures" in c["basis"] and "not rented by the hour" in c["basis"]


def test_savings_sign():
    assert savings_pct(10.0, 8.0) == pytest.approx(20.0)
    assert savings_pct(10.0, 12.5) == pytest.approx(-25.0)
    assert savings_pct(10.0, 10.0) == 0.0
    assert savings_pct(None, 8.0) is None and savings_pct(10.0, None) is None
    with pytest.raises(ValueError, match="native_usd"):
        savings_pct(0.0, 1.0)


@pytest.mark.parametrize("field, kwargs", [
    ("samples_s", dict(samples_s=0.0)), ("samples_s", dict(samples_s=-3.0)), ("samples_s", dict(samples_s=float("nan"))),
    ("batch_size", dict(batch_size=0)), ("batch_size", dict(batch_size=2.5)), ("batch_size", dict(batch_size=True)),
    ("seq_len", dict(seq_len=-1)), ("dataset_size", dict(dataset_size=0)),
])
def test_bad_input_names_field_value_and_allowed(field, kwargs):
    args = dict(samples_s=10.0, profile="ml.g5.xlarge", batch_size=8, seq_len=128, dataset_size=1000) | kwargs
    with pytest.raises(ValueError) as err:
        cost(**args)
    text = str(err.value)
    assert text.startswith(f"{field}=") and repr(kwargs[field]) in text and "> 0" in text


def test_unknown_profile_is_a_value_error():
    with pytest.raises(ValueError, match="ml.g5.2xlarge"):
        cost(10.0, "ml.g5.2xlarg", 8, 128)


def test_cost_table_adds_costs_and_savings_vs_eager():
    rows = [dict(backend="eager", samples_s=100.0, batch_size=10, seq_len=100),
            dict(backend="inductor", samples_s=125.0, batch_size=10, seq_len=100),
            dict(backend="xla", samples_s=80.0, batch_size=20, seq_len=100)]
    table = cost_table(rows, PRICED, dataset_size=36_000)
    assert list(table["backend"]) == ["eager", "inductor", "xla"]
    assert table["usd_per_epoch"].tolist() == pytest.approx([0.36, 0.288, 0.45])
    assert table["usd_per_1k_steps"].tolist() == pytest.approx([0.10, 0.08, 0.25])
    assert table["saved_pct"].tolist() == pytest.approx([0.0, 20.0, -25.0])
    assert set(table["profile"]) == {"test.box"}


def test_cost_table_from_dataframe_on_this_machine_keeps_savings():
    frame = pd.DataFrame([dict(backend="eager", samples_s=100.0, batch_size=10, seq_len=100, model="bert"),
                          dict(backend="inductor", samples_s=125.0, batch_size=10, seq_len=100, model="bert")])
    table = cost_table(frame, "this-machine", dataset_size=36_000)
    assert table["usd_per_epoch"].isna().all()
    assert table["saved_pct"].tolist() == pytest.approx([0.0, 20.0])  # the price cancels in a ratio
    assert "model" in table.columns


def test_cost_table_failed_row_and_errors():
    rows = [dict(backend="eager", samples_s=100.0, batch_size=10, seq_len=100),
            dict(backend="xla", samples_s=None, batch_size=10, seq_len=100)]
    table = cost_table(rows, PRICED, dataset_size=36_000)
    assert pd.isna(table.loc[1, "usd_per_epoch"]) and pd.isna(table.loc[1, "saved_pct"])
    with pytest.raises(ValueError, match=r"rows\[1\].*samples_s=-1"):
        cost_table([rows[0], dict(rows[1], samples_s=-1.0)], PRICED)
    with pytest.raises(ValueError, match="seq_len"):
        cost_table([dict(backend="eager", samples_s=1.0, batch_size=1)], PRICED)
    no_eager = cost_table([dict(backend="inductor", samples_s=1.0, batch_size=1, seq_len=1)], PRICED)
    assert no_eager["saved_pct"].isna().all()
