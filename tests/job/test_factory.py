"""Your own model and data: factories "package.module:function" and a local folder with its own tokenizer."""

from __future__ import annotations

import math
import sys
import textwrap

import pytest

import tcbench as tc
from tcbench.job import data as _data
from tcbench.job import factory as _factory

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


@pytest.fixture
def userpkg(tmp_path, monkeypatch):
    """A user's package on the caller's sys.path (as a notebook's sys.path.insert would put it)."""
    pkg = tmp_path / "userpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "models.py").write_text(textwrap.dedent("""
        import torch

        def tiny(size="tiny", seed=0):
            return torch.nn.Linear(4, 2)

        try:
            from math import sqrt as from_try
        except ImportError:
            def from_try(x):
                return x

        NOT_A_FUNCTION = 3
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "userpkg"
    for name in [m for m in sys.modules if m == "userpkg" or m.startswith("userpkg.")]:
        del sys.modules[name]


def test_factory_names_are_models_and_datasets():
    spec = tc.JobSpec(model="examples.cnn:small_cnn", size="small", dataset="examples.cnn:images")
    assert spec.model_kind == "factory" and spec.size == "small"
    with pytest.raises(tc.SpecError) as err:
        tc.JobSpec(model="examples.cnn:")   # not a factory, not a folder, not a catalog name
    assert err.value.field == "model" and "package.module:function" in str(err.value)


def test_preflight_finds_the_factory_without_running_it(userpkg):
    tc.preflight(tc.JobSpec(model="userpkg.models:tiny", dataset="examples.cnn:images"))
    tc.preflight(tc.JobSpec(model="userpkg.models:from_try"))      # defined in a try/except at top level
    assert "userpkg.models" not in sys.modules                     # read, not imported


@pytest.mark.parametrize("model, words", [
    ("nopkg.models:tiny", ["no module named 'nopkg'"]),
    ("userpkg.nothere:tiny", ["no module named 'userpkg.nothere'"]),
    ("userpkg.models:missing", ["defines no 'missing'", "models.py"]),
])
def test_a_factory_that_cannot_be_found_is_named_before_any_process(userpkg, model, words, monkeypatch, tmp_path):
    monkeypatch.setattr("subprocess.Popen", lambda *a, **k: pytest.fail("a process was started"))
    with pytest.raises(tc.SpecError) as err:
        tc.run(tc.JobSpec(model=model), store=tc.Store(str(tmp_path / "s.db")))
    assert err.value.field == "model" and all(w in str(err.value) for w in words)
    with pytest.raises(tc.SpecError) as err:
        tc.preflight(tc.JobSpec(dataset=model))
    assert err.value.field == "dataset"


def test_the_factory_is_called_with_the_arguments_it_accepts():
    seen = {}

    def narrow(size, seed):
        seen.update(size=size, seed=seed)

    def wide(**kw):
        seen.update(kw)

    _factory.call(narrow, {"size": "tiny", "seq_len": 8, "seed": 3})
    assert seen == {"size": "tiny", "seed": 3}
    _factory.call(wide, {"size": "x", "num_labels": 4})
    assert seen["num_labels"] == 4


def test_load_names_what_is_not_a_function(userpkg):
    with pytest.raises(tc.SpecError, match="NOT_A_FUNCTION is int, not a function"):
        _factory.load("userpkg.models:NOT_A_FUNCTION", "model")
    import torch

    sys.modules["userpkg.bad"] = type(sys)("userpkg.bad")
    sys.modules["userpkg.bad"].make = lambda: torch.zeros(1)
    with pytest.raises(tc.SpecError, match="returned a Tensor, not a torch.nn.Module"):
        _factory.build_model("userpkg.bad:make", "tiny", 8, None, None, 0)


def test_loss_of_accepts_a_tensor_an_object_or_a_dict():
    import torch

    loss = torch.tensor(1.5, requires_grad=True)
    assert _factory.loss_of(loss) is loss
    assert _factory.loss_of(type("Out", (), {"loss": loss})()) is loss
    assert _factory.loss_of({"loss": loss, "logits": None}) is loss
    with pytest.raises(TypeError, match="no loss"):
        _factory.loss_of(torch.zeros(4, 2))   # logits, not a loss


def test_batch_factory_items_are_checked(userpkg, tmp_path):
    (tmp_path / "userpkg" / "data.py").write_text(textwrap.dedent("""
        import torch

        def short(batch_size, split):
            for _ in range(2):
                yield {"x": torch.zeros(batch_size, 3)}

        def wrong(batch_size):
            yield [1, 2, 3]
    """))
    it = _factory.batches("userpkg.data:short", 4, 8, 0, "train")
    assert [b["x"].shape[0] for b in (next(it), next(it))] == [4, 4]
    with pytest.raises(tc.SpecError, match="ran out after 2 batches"):
        next(it)
    with pytest.raises(tc.SpecError, match="item 0 of split 'train' is a list"):
        next(_factory.batches("userpkg.data:wrong", 4, 8, 0, "train"))


def test_flops_are_counted_on_the_meta_device():
    sys.path.insert(0, str(ROOT))
    try:
        batch = next(_factory.batches("examples.cnn:images", 8, 1, 0, "train"))
        double = next(_factory.batches("examples.cnn:images", 16, 1, 0, "train"))
        f8 = _factory.count_flops("examples.cnn:small_cnn", "tiny", 1, None, None, 0, batch)
        f16 = _factory.count_flops("examples.cnn:small_cnn", "tiny", 1, None, None, 0, double)
    finally:
        sys.path.remove(str(ROOT))
    # conv1 alone: 2 * (3*3*3) * 8 filters * 32*32 pixels per image, forward; backward about twice more
    assert f8 > 3 * 2 * 27 * 8 * 32 * 32 * 8
    assert f16 == pytest.approx(2 * f8, rel=1e-6)


def _bert_folder_with_own_tokenizer(path):
    """A tiny BERT saved with a tokenizer of its own (a word-piece vocabulary unlike the shipped one)."""
    import transformers

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted({w for e in _data.load_examples()[:200]
                                                                   for w in e["text"].lower().split()})[:300]
    path.mkdir()
    (path / "vocab.txt").write_text("\n".join(words) + "\n")
    tok = transformers.BertTokenizerFast(vocab_file=str(path / "vocab.txt"))
    tok.save_pretrained(str(path))
    cfg = transformers.BertConfig(vocab_size=len(words), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                  intermediate_size=64, max_position_embeddings=64)
    transformers.BertForSequenceClassification(cfg).save_pretrained(str(path))
    return tok


def test_a_folder_with_its_own_tokenizer_is_tokenized_with_it(tmp_path):
    folder = tmp_path / "my-bert"
    tok = _bert_folder_with_own_tokenizer(folder)
    used, source = _data.job_tokenizer(str(folder))
    assert "own" in source
    assert _data.job_tokenizer("bert-base-cased")[1].startswith("the shipped")
    batch = next(_data.batches("sequence-classification", _data.load_examples()[:50], used, 4, 32))
    ids = batch["input_ids"]
    assert (ids[:, 0] == tok.cls_token_id).all() and int(ids.max()) < len(tok)
    # its vocabulary (305 words) is far smaller than the shipped tokenizer's: allowed, since jobs use its own
    tc.preflight(tc.JobSpec(model=str(folder), seq_len=32))
    (folder / "vocab.txt").write_text("")
    (folder / "tokenizer.json").write_text("{not json")
    with pytest.raises(tc.SpecError, match="its tokenizer tokenizer.json cannot be read"):
        tc.preflight(tc.JobSpec(model=str(folder), seq_len=32))


@pytest.mark.integration
def test_a_cnn_from_factories_trains_on_eager_and_inductor(monkeypatch, tmp_path):
    """Not a transformer, not text: the compilers and the summary take any model whose forward returns a loss."""
    monkeypatch.chdir(ROOT)   # the examples package is found from the caller's working directory
    store = tc.Store(str(tmp_path / "s.db"))
    spec = tc.JobSpec(model="examples.cnn:small_cnn", dataset="examples.cnn:images", batch_size=16, steps=24,
                      warmup_steps=3, lr=3e-3, threads=1, eval_batches=2)
    results = {b: tc.run(spec.replace(backend=b), store=store) for b in ("eager", "inductor")}
    for backend, r in results.items():
        assert r.status == "ok", (backend, r.error, r.log_tail[-1500:])
        losses = [x.loss for x in r.records]
        assert sum(losses[-4:]) / 4 < 0.8 * sum(losses[:4]) / 4, (backend, losses)   # it learns
        assert r.extra.flops_per_step > 0 and math.isfinite(r.extra.eval_loss)
        assert all(x.seq_len == 1 and x.tokens_s == pytest.approx(x.samples_s) for x in r.records)
        assert r.figures.samples_s > 0 and (r.figures.mfu is not None or r.figures.mfu_note)   # MFU, or why not
    assert results["inductor"].extra.counters["compiles"] >= 1
    assert len(tc.steps(results["inductor"].run_id, store=store)) == spec.steps


@pytest.mark.integration
def test_a_local_folder_trains_with_its_own_tokenizer(tmp_path):
    folder = tmp_path / "my-bert"
    _bert_folder_with_own_tokenizer(folder)
    r = tc.run(tc.JobSpec(model=str(folder), seq_len=32, batch_size=8, steps=6, warmup_steps=1, threads=1),
               store=tc.Store(str(tmp_path / "s.db")))
    assert r.status == "ok", (r.error, r.log_tail[-1500:])
    assert "own" in r.extra.tokenizer and len(r.records) == 6
