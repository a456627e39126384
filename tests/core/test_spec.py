import dataclasses

import pytest

import tcbench as tc
from tcbench import JobSpec


def test_defaults_valid_and_frozen():
    s = JobSpec()
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.batch_size = 3  # type: ignore[misc]
    assert s.tokens_per_step == s.batch_size * s.seq_len


def test_pair_differs_only_in_backend():
    s = JobSpec(model="gpt2", size="tiny")
    c = dataclasses.replace(s, backend="inductor")
    diff = {k for k, v in s.to_dict().items() if c.to_dict()[k] != v}
    assert diff == {"backend"}


@pytest.mark.parametrize("field,value,needle", [
    ("model", "bert-huge", "model='bert-huge'"),
    ("size", "medium", "size='medium'"),
    ("backend", "tvm", "backend='tvm'"),
    ("batch_size", 0, "batch_size=0"),
    ("batch_size", 2.5, "batch_size=2.5"),
    ("seq_len", 4096, "seq_len=4096"),
    ("lr", 0.0, "lr=0.0"),
    ("lr", -1e-3, "lr=-0.001"),
    ("precision", "int8", "precision='int8'"),
    ("padding", "dynamic", "padding='dynamic'"),
    ("dropout", 1.5, "dropout=1.5"),
])
def test_bad_values_name_field_value_and_allowed(field, value, needle):
    with pytest.raises(ValueError) as e:
        JobSpec(**{field: value})
    msg = str(e.value)
    assert needle in msg
    assert "allowed" in msg or "must" in msg


def test_steps_must_exceed_warmup():
    with pytest.raises(ValueError, match="steps=5 must be greater than warmup_steps=5"):
        JobSpec(steps=5, warmup_steps=5)


def test_seq_len_limit_is_the_models_positions():
    JobSpec(model="gpt2", size="base", seq_len=1024)
    with pytest.raises(ValueError, match="1..512"):
        JobSpec(model="bert-base-cased", size="base", seq_len=513)
    JobSpec(model="t5-base", size="base", seq_len=2048)  # relative positions: no limit


def test_unknown_model_lists_catalog():
    with pytest.raises(ValueError) as e:
        JobSpec(model="llama")
    for name in tc.MODELS:
        assert name in str(e.value)


def test_json_round_trip_and_unknown_keys():
    s = JobSpec(model="roberta-base", backend="xla", lr=3e-4, dropout=0.0)
    assert JobSpec.from_json(s.to_json()) == s
    with pytest.raises(ValueError, match="unknown JobSpec field"):
        JobSpec.from_dict({"model": "gpt2", "batchsize": 4})


def test_catalog_has_the_tested_models():
    names = set(tc.models()["model"])
    assert {"bert-base-cased", "bert-base-uncased", "distilbert-base-uncased", "gpt2", "roberta-base",
            "roberta-large", "xlm-roberta-base", "albert-base-v2", "t5-base"} <= names


def test_import_does_not_load_torch():
    import subprocess
    import sys

    code = "import sys, tcbench; tcbench.models(); tcbench.backends(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("field,value", [
    ("timeout_s", "60"), ("timeout_s", float("nan")), ("timeout_s", 0), ("debug", "no"), ("debug", 0),
    ("dropout", "0.1"), ("dropout", float("nan")), ("seed", 2**32), ("seed", 2**70), ("seed", True),
    ("threads", 1.0), ("threads", "2"), ("memory_budget_gb", float("inf")), ("memory_budget_gb", -1.0),
    ("lr", float("inf")), ("lr", "1e-3"), ("steps", "30"), ("profile", "p5.nope"), ("dataset", ""),
])
def test_types_and_ranges_are_checked_by_value_only(field, value):
    with pytest.raises(tc.SpecError) as e:
        JobSpec(**{field: value})
    assert e.value.field == field and e.value.value is value and f"{field}={value!r}" in str(e.value)


def test_edges_that_are_allowed_and_numpy_scalars_become_python_numbers():
    import numpy as np

    s = JobSpec(seed=2**32 - 1, dropout=0, threads=np.int64(1), lr=np.float32(0.5), memory_budget_gb=1)
    assert (s.seed, s.dropout, s.threads, s.lr) == (2**32 - 1, 0, 1, 0.5)
    assert type(s.threads) is int and type(s.lr) is float and JobSpec.from_json(s.to_json()) == s
    assert JobSpec(dataset="no/such/file.csv").dataset == "no/such/file.csv"   # the disk is preflight's job


def test_profiles_are_known_names_in_the_catalogs_spelling():
    assert JobSpec(profile=" G5.2xlarge ").profile == "ml.g5.2xlarge"
    assert JobSpec(profile="this-machine").profile == "this-machine"
    with pytest.raises(tc.SpecError, match="did you mean 'ml.g5.2xlarge'"):
        JobSpec(profile="ml.g5.2xlarg")


def test_a_stored_spec_loads_even_when_todays_checks_refuse_it():
    """History must read what an older tcbench stored: unknown profile kept, removed fields dropped, new ones defaulted."""
    import json

    data = JobSpec(model="gpt2", size="tiny").to_dict()
    data.update(profile="p5.nope", retired_field=1)
    del data["eval_batches"]
    spec = JobSpec.from_stored(json.dumps(data))
    assert spec.profile == "p5.nope" and spec.eval_batches == 0 and spec.model == "gpt2"
    good = JobSpec(model="gpt2", size="tiny", profile="g5.2xlarge")
    assert JobSpec.from_stored(good.to_json()) == good
