"""Every catalog model builds offline at every preset's dimensions and trains one step on the shipped data."""

from __future__ import annotations

import os

import pytest

import tcbench as tc
from tcbench.job import data as _data
from tcbench.core.catalog import MODELS, approx_params, dims, max_positions, usable_positions
from tcbench.job.models import build_model, check_local_model, count_params, flops_per_step, model_task

os.environ["USE_TORCH_XLA"] = "0"


@pytest.mark.parametrize("name", list(MODELS))
def test_tiny_model_builds_and_takes_a_step(name):
    import torch

    task = model_task(name)
    ex = _data.load_examples("builtin", "train")[:64]
    m = tc.build_model(name, "tiny")
    batch = next(_data.batches(task, ex, _data.load_tokenizer(), 4, 32, "max_length", 0))
    loss = m(**batch).loss
    loss.backward()
    assert torch.isfinite(loss)
    n = count_params(m)
    assert abs(n - approx_params(name, "tiny")) / n < 0.15, (n, approx_params(name, "tiny"))


@pytest.mark.parametrize("name", list(MODELS))
def test_the_model_a_job_trains_compiles_to_one_graph(name):
    """Forward and loss in one graph: GPT-2's loss (a logger call) and T5's decoder cache each broke it."""
    import torch

    from tcbench.job.worker import Workload

    work = Workload(tc.JobSpec(model=name, size="tiny", batch_size=2, seq_len=16, steps=2, warmup_steps=1,
                                 threads=1))
    m = work.model().train()
    batch = next(iter(work.batches("train")))
    torch._dynamo.reset()
    explained = torch._dynamo.explain(m)(**batch)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), [
        str(r.reason)[:200] for r in explained.break_reasons]


@pytest.mark.parametrize("name", ["bert-base-cased", "gpt2", "t5-base", "roberta-large", "albert-base-v2"])
def test_base_size_has_the_published_dimensions(name):
    """Config only (no weights allocated): the published layer/width/vocab figures."""
    import transformers

    from tcbench.core.catalog import size_config

    cfg = getattr(transformers, MODELS[name].config_class)(**size_config(name, "base"))
    d = dims(name, "base")
    published = {"bert-base-cased": (12, 768, 28996), "gpt2": (12, 768, 50257), "t5-base": (24, 768, 32128),
                 "roberta-large": (24, 1024, 50265), "albert-base-v2": (12, 768, 30000)}[name]
    assert (d["layers"], d["hidden"], d["vocab"]) == published
    assert cfg.vocab_size == published[2]


def test_bert_base_parameter_count_matches_the_published_110m():
    # BERT-base-cased with a classification head: ~108 M parameters
    assert 100e6 < approx_params("bert-base-cased", "base") < 115e6


def test_local_folder_is_loaded_without_the_hub(tmp_path):
    m = build_model("gpt2", "tiny")
    m.save_pretrained(tmp_path / "my-gpt2")
    again = tc.build_model(str(tmp_path / "my-gpt2"))
    assert model_task(str(tmp_path / "my-gpt2")) == "causal-lm"
    assert count_params(again) == count_params(m)
    tc.JobSpec(model=str(tmp_path / "my-gpt2"))  # a folder path is a valid model
    check_local_model(str(tmp_path / "my-gpt2"), 512, _data.load_tokenizer().get_vocab_size())
    with pytest.raises(tc.SpecError, match="seq_len=513 is beyond the 512 positions") as e:
        check_local_model(str(tmp_path / "my-gpt2"), 513, 4096)
    assert e.value.field == "seq_len"
    with pytest.raises(tc.SpecError, match="vocab_size=4,104 is smaller than the data's tokenizer") as e:
        check_local_model(str(tmp_path / "my-gpt2"), 32, 5000)
    assert e.value.field == "model"


def test_positions_after_the_padding_offset():
    assert usable_positions("roberta", 514) == 512 and usable_positions("xlm-roberta", 66, pad_token_id=1) == 64
    assert usable_positions("bert", 512) == 512 and usable_positions("t5", None) is None
    assert max_positions("roberta-base", "base") == 512 and max_positions("gpt2", "tiny") == 512


def test_missing_local_folder_is_a_clear_error():
    with pytest.raises(ValueError, match="neither a catalog model"):
        build_model("./no/such/folder")


def test_flops_estimate_is_six_n_t_plus_attention():
    f = flops_per_step("bert-base-cased", "tiny", 400_000, 8, 64)
    d = dims("bert-base-cased", "tiny")
    dense = 400_000 - d["vocab"] * d["hidden"]
    assert f == 6 * dense * 512 + 12 * d["layers"] * d["hidden"] * 64 * 512
