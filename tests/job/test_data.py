"""The shipped task, its tokenizer and the batch builder (tcbench.job.data). Fast: no model is built."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import tcbench as tc
from tcbench.job import data as d

ROOT = Path(__file__).resolve().parents[2]
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[BOS]", "[EOS]"]


@pytest.fixture(scope="module")
def tok():
    return d.load_tokenizer()


@pytest.fixture(scope="module")
def few():
    """A slice of the train split: tokenizing 20,000 texts per test would be slow on 2 cores."""
    return d.load_examples("builtin", "train")[:600]


def _take(it, n):
    return [next(it) for _ in range(n)]


# ---------------------------------------------------------------- shipped files
def test_tokenizer_vocab_and_special_ids(tok):
    assert tok.get_vocab_size() == 4096
    assert [tok.token_to_id(t) for t in SPECIALS] == list(range(7))
    assert (d.PAD, d.UNK, d.CLS, d.SEP, d.MASK, d.BOS, d.EOS) == tuple(range(7))
    # the seq2seq target words are single tokens; byte-level BPE never needs [UNK]
    assert all(len(tok.encode(w, add_special_tokens=False).ids) == 1 for w in d.LABEL_NAMES)
    assert d.UNK not in tok.encode("Zürich, 日本 ☃", add_special_tokens=False).ids
    assert d.load_tokenizer() is tok  # cached


def test_builtin_splits():
    train, eval_ = d.load_examples(), d.load_examples("builtin", "eval")
    assert len(train) == d.dataset_size() == 20000 and len(eval_) == 2000
    assert {e["label"] for e in train} == {0, 1} and d.num_labels(train) == 2
    assert 0.45 < np.mean([e["label"] for e in train]) < 0.55
    assert {e["label_text"] for e in eval_} == {"negative", "positive"}
    words = [len(e["text"].split()) for e in train]
    assert min(words) <= 8 and max(words) >= 100 and 12 <= np.median(words) <= 24
    lines = (ROOT / "data" / "task" / "train.jsonl").read_text().splitlines()
    assert set(json.loads(lines[0])) == {"text", "label"}
    size = sum(p.stat().st_size for p in (ROOT / "data" / "task").iterdir())
    assert size < 3.2e6


def test_bag_of_words_learns_the_labels():
    """A logistic regression on word counts, 2,000 train texts: the labels are learnable, not noise.

    Sparse numpy (bincount gathers/scatters, no BLAS): quick even on a busy 2-core machine.
    """
    t0 = time.perf_counter()
    train, eval_ = d.load_examples()[:2000], d.load_examples("builtin", "eval")
    word = re.compile(r"[a-z']+")
    vocab: dict[str, int] = {}
    for e in train:
        for w in word.findall(e["text"].lower()):
            vocab.setdefault(w, len(vocab))

    def features(examples):  # (row, column) per known word occurrence; repeats count
        pairs = [(i, vocab[w]) for i, e in enumerate(examples) for w in word.findall(e["text"].lower()) if w in vocab]
        rows, cols = np.array(pairs).T
        return rows, cols, np.array([e["label"] for e in examples], np.float64)

    def scores(rows, cols, n, w, b):
        return np.bincount(rows, weights=w[cols], minlength=n) + b

    (rows, cols, y), (erows, ecols, ye) = features(train), features(eval_)
    w, b = np.zeros(len(vocab)), 0.0
    m, v = np.zeros_like(w), np.zeros_like(w)
    for t in range(1, 301):  # full-batch Adam, L2 3e-3
        g = 1 / (1 + np.exp(-scores(rows, cols, len(y), w, b))) - y
        gw = np.bincount(cols, weights=g[rows], minlength=len(w)) / len(y) + 3e-3 * w
        m, v = 0.9 * m + 0.1 * gw, 0.999 * v + 0.001 * gw * gw
        w -= 0.05 * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
        b -= 0.05 * g.mean()
    acc = float(((scores(erows, ecols, len(ye), w, b) > 0) == ye).mean())
    assert acc > 0.8, acc
    print(f"bag-of-words eval accuracy {acc:.3f}")
    assert time.perf_counter() - t0 < 5
    # negation is what a bag of words cannot see: it stays well below the grammar's ~96% ceiling
    assert acc < 0.93, acc


def test_labels_follow_the_documented_rule():
    """Re-derive each eval label from the text with data/task/README.md's rule: agreement ~96% (4% noise)."""
    sys.path.insert(0, str(ROOT / "data"))
    try:
        import generate_task as g
    finally:
        sys.path.remove(str(ROOT / "data"))
    pos = set(g.POS_ADJ) | {w for pair in g.POS_VERB for phrase in pair for w in phrase.split()[1:]}
    neg = set(g.NEG_ADJ) | {w for pair in g.NEG_VERB for phrase in pair for w in phrase.split()[1:]}
    neutral = {"i", "did", "didn't", "do", "would", "not", "never", "buying"}
    pos, neg = pos - neutral, neg - neutral
    agree = 0
    eval_ = d.load_examples("builtin", "eval")
    for e in eval_:
        score = 0
        for sentence in re.split(r"(?<=\.) ", e["text"]):
            words = re.findall(r"[a-z']+", sentence.lower())
            polarity = sum(w in pos for w in words) - sum(w in neg for w in words)
            assert polarity in (-1, 0, 1), sentence  # one polarity word per opinion clause, none in fillers
            if any(w in ("not", "never", "hardly", "far") or w.endswith("n't") for w in words):
                polarity = -polarity
            score += polarity * (2 if any(sentence.startswith(v) for v in g.VERDICT) else 1)
        assert score != 0, e["text"]
        agree += (score > 0) == e["label"]
    print(f"rule agreement {agree / len(eval_):.3f}")
    assert 0.94 < agree / len(eval_) < 0.98


# ---------------------------------------------------------------- batches
@pytest.mark.parametrize("task", d.TASKS)
@pytest.mark.parametrize("padding", d.PADDINGS)
def test_batch_shapes(task, padding, few, tok):
    for b in _take(d.batches(task, few, tok, 8, 64, padding), 5):
        ids, mask, labels = b["input_ids"], b["attention_mask"], b["labels"]
        assert set(b) == {"input_ids", "attention_mask", "labels"}
        assert all(t.dtype == torch.long for t in b.values())
        L = ids.shape[1]
        assert ids.shape == mask.shape == (8, L)
        assert L == 64 if padding == "max_length" else (L % 8 == 0 and L <= 64)
        lens = mask.sum(1)
        assert bool((ids[mask == 0] == d.PAD).all()) and int(lens.max()) <= L
        assert bool((mask[:, :-1] >= mask[:, 1:]).all())  # right padding
        rows = range(8)
        if task == "sequence-classification":
            assert labels.shape == (8,) and set(labels.tolist()) <= {0, 1}
            assert bool((ids[:, 0] == d.CLS).all()) and all(ids[i, lens[i] - 1] == d.SEP for i in rows)
        elif task == "causal-lm":
            assert labels.shape == (8, L) and bool((ids[:, 0] == d.BOS).all())
            assert torch.equal(labels, torch.where(mask == 1, ids, torch.full_like(ids, -100)))
        else:
            assert labels.shape == (8, d.SEQ2SEQ_TARGET_LEN)
            assert all(ids[i, lens[i] - 1] == d.EOS for i in rows)
            assert bool((labels[:, 1] == d.EOS).all()) and bool((labels[:, 2:] == -100).all())
            neg, pos = (tok.token_to_id("Ġ" + w) for w in d.LABEL_NAMES)
            assert set(labels[:, 0].tolist()) <= {neg, pos}


def test_batches_are_deterministic(few, tok):
    a = _take(d.batches("causal-lm", few, tok, 16, 128, "longest", seed=3), 80)  # > 2 epochs
    b = _take(d.batches("causal-lm", few, tok, 16, 128, "longest", seed=3), 80)
    assert all(torch.equal(x[k], y[k]) for x, y in zip(a, b) for k in x)
    c = next(d.batches("causal-lm", few, tok, 16, 128, "longest", seed=4))
    assert not torch.equal(a[0]["input_ids"][:, :8], c["input_ids"][:, :8])


def test_epochs_cover_every_example(few, tok):
    def rows(t):
        return sorted(tuple(r) for r in t.tolist())

    everything = rows(next(d.batches("sequence-classification", few, tok, len(few), 32))["input_ids"])
    bs = _take(d.batches("sequence-classification", few, tok, 100, 32, seed=1), 12)  # exactly 2 epochs
    epoch1, epoch2 = (torch.cat([b["input_ids"] for b in part]) for part in (bs[:6], bs[6:]))
    assert rows(epoch1) == rows(epoch2) == everything
    assert not torch.equal(epoch1, epoch2)  # reshuffled


def test_longest_gives_several_shapes_in_multiples_of_8(few, tok):
    shapes = {b["input_ids"].shape[1] for b in _take(d.batches("sequence-classification", few, tok, 16, 128,
                                                               "longest"), 60)}
    assert len(shapes) >= 3 and all(s % 8 == 0 and s <= 128 for s in shapes)
    # a seq_len that is not a multiple of 8 caps the rounding
    capped = {b["input_ids"].shape[1] for b in _take(d.batches("causal-lm", few, tok, 16, 20, "longest"), 20)}
    assert capped <= {8, 16, 20} and 20 in capped


def test_bucket_pads_to_a_few_powers_of_two_and_keeps_every_token(few, tok):
    longest = _take(d.batches("sequence-classification", few, tok, 4, 128, "longest"), 60)
    bucket = _take(d.batches("sequence-classification", few, tok, 4, 128, "bucket"), 60)
    shapes = {b["input_ids"].shape[1] for b in bucket}
    assert shapes <= {16, 32, 64, 128} and len(shapes) < len({b["input_ids"].shape[1] for b in longest})
    for lo, bu in zip(longest, bucket):   # the same examples, only more padding
        w = lo["input_ids"].shape[1]
        assert bu["input_ids"].shape[1] >= w and torch.equal(bu["input_ids"][:, :w], lo["input_ids"])
        assert int(bu["attention_mask"].sum()) == int(lo["attention_mask"].sum())
    capped = {b["input_ids"].shape[1] for b in _take(d.batches("causal-lm", few, tok, 16, 20, "bucket"), 20)}
    assert capped <= {16, 20}


def test_truncation_keeps_the_frame(few, tok):
    # every shipped text has at least 6 tokens, so seq_len 6 truncates them all
    b = next(d.batches("sequence-classification", few, tok, 32, 6))
    assert b["input_ids"].shape == (32, 6) and bool((b["input_ids"][:, -1] == d.SEP).all())
    b = next(d.batches("seq2seq-lm", few, tok, 32, 6))
    assert bool((b["input_ids"][:, -1] == d.EOS).all())
    b = next(d.batches("causal-lm", few, tok, 32, 6))
    assert bool((b["labels"] != -100).all()) and not bool((b["input_ids"] == d.EOS).any())


def test_batch_building_is_fast(tok):
    it = d.batches("sequence-classification", d.load_examples()[:4000], tok, 16, 128)
    next(it)
    t0 = time.perf_counter()
    _take(it, 200)
    assert (time.perf_counter() - t0) / 200 < 2e-3


def test_batch_on_device(few, tok):
    b = next(d.batches("causal-lm", few, tok, 4, 32))
    moved = d.batch_on_device(b, "cpu")
    assert set(moved) == set(b) and all(torch.equal(moved[k], b[k]) and moved[k].device.type == "cpu" for k in b)


# ---------------------------------------------------------------- user files
def test_user_csv_with_string_labels(tmp_path, tok):
    path = tmp_path / "reviews.csv"
    rows = [("great stuff, really", "pos"), ("awful", "neg"), ('said "meh"', "neutral")] * 10
    path.write_text("id,text,label\n" + "".join(f'{i},"{t.replace(chr(34), 2 * chr(34))}",{y}\n'
                                                for i, (t, y) in enumerate(rows)))
    train, eval_ = d.load_examples(str(path)), d.load_examples(str(path), "eval")
    assert len(train) == 27 and len(eval_) == 3 and d.dataset_size(str(path)) == 27
    assert sorted(e["label_text"] for e in eval_) == ["neg", "neutral", "pos"]   # 10 % of each label
    by_text = {e["text"]: e for e in train}
    assert by_text["great stuff, really"] == {"text": "great stuff, really", "label": 2, "label_text": "pos"}
    assert by_text['said "meh"']["label"] == 1 and d.num_labels(train) == 3   # neg=0 neutral=1 pos=2
    b = next(d.batches("seq2seq-lm", train, tok, 4, 16))
    assert b["labels"].shape[0] == 4 and b["labels"].shape[1] >= d.SEQ2SEQ_TARGET_LEN


def test_user_jsonl_and_csv_int_labels(tmp_path):
    jl = tmp_path / "x.jsonl"
    jl.write_text("\n".join(json.dumps({"text": f"t{i}", "label": i % 3, "extra": 1}) for i in range(20)) + "\n\n")
    ex, held = d.load_examples(str(jl)), d.load_examples(str(jl), "eval")
    assert len(ex) == 17 and len(held) == 3 and d.num_labels(ex) == 3   # 7, 7 and 6 rows: one of each held out
    assert sorted(e["label"] for e in held) == [0, 1, 2]
    texts = [e["text"] for e in ex]
    assert texts == sorted(texts, key=lambda t: int(t[1:])) and not set(texts) & {e["text"] for e in held}
    csv_path = tmp_path / "y.csv"
    csv_path.write_text("text,label\na,1\nb,0\nc,1\n")
    assert sorted(e["label"] for e in d.load_examples(str(csv_path))) == [0, 1]   # label 0's only row trains


@pytest.mark.parametrize("content, suffix, field", [
    ("", ".csv", "empty"),
    ("text,label\n", ".csv", "empty"),
    ("text,y\na,1\n", ".csv", "'label'"),
    ('{"text": "a"}\n{"text": "b", "label": 1}\n', ".jsonl", "'label'"),
    ('{"label": 1}\n{"text": "b", "label": 1}\n', ".jsonl", "'text'"),
    ('{"text": "a", "label": -1}\n{"text": "b", "label": 1}\n', ".jsonl", "line 1: label -1"),
    ('{"text": "a", "label": 1}\n{"text": "b", "label": "pos"}\n', ".jsonl", "line 1: label 1"),
    ('{"text": "a", "label": 0.5}\n{"text": "b", "label": 1}\n', ".jsonl", "line 1: label 0.5"),
    ('{"text": "a", "label": true}\n{"text": "b", "label": 1}\n', ".jsonl", "line 1: label True"),
    ('{"text": "a", "label": 0}\n\n{"text": "b", "label": 3}\n', ".jsonl", "line 3: label 3 but no row has label 1"),
    ('not json\n', ".jsonl", "line 1: not valid JSON"),
    ("text,label\na,1\n", ".txt", "'.csv'"),
])
def test_bad_user_files(tmp_path, content, suffix, field):
    path = tmp_path / f"bad{suffix}"
    path.write_text(content)
    with pytest.raises(tc.SpecError, match=re.escape(field)) as e:
        d.load_examples(str(path))
    assert e.value.field == "dataset" and str(path) in str(e.value)


def test_a_bom_and_whole_float_labels_are_read(tmp_path):
    """Excel's "CSV UTF-8" starts with a BOM; pandas writes 1.0 for an int column with a gap filled."""
    csv_path = tmp_path / "excel.csv"
    csv_path.write_bytes(b"\xef\xbb\xbftext,label\r\n" + b"".join(b"r%d,%d.0\r\n" % (i, i % 2) for i in range(10)))
    rows = d.load_examples(str(csv_path)) + d.load_examples(str(csv_path), "eval")
    assert sorted(r["text"] for r in rows) == sorted(f"r{i}" for i in range(10))
    assert {r["label"] for r in rows} == {0, 1} and {r["label_text"] for r in rows} == {"0", "1"}
    jl = tmp_path / "bom.jsonl"
    jl.write_bytes(b"\xef\xbb\xbf" + b"\n".join(b'{"text": "t%d", "label": %d}' % (i, i % 2) for i in range(4)))
    assert len(d.load_examples(str(jl))) + len(d.load_examples(str(jl), "eval")) == 4


def test_the_held_out_split_is_stratified_seeded_and_in_file_order(tmp_path):
    """A file sorted by label (the usual export) still gets every class in its held-out split."""
    path = tmp_path / "sorted.csv"
    path.write_text("text,label\n" + "".join(f"t{i},{i // 50}\n" for i in range(200)) + "single,4\n")
    train, held = d.load_examples(str(path)), d.load_examples(str(path), "eval")
    assert [sum(e["label"] == k for e in held) for k in range(5)] == [5, 5, 5, 5, 0]   # 10 % of each label
    assert {e["label"] for e in train} == {0, 1, 2, 3, 4}   # a label's only row trains
    assert len(train) + len(held) == 201 and not {e["text"] for e in train} & {e["text"] for e in held}
    order = [int(e["text"][1:]) for e in held]
    last_tenth = [i for k in range(4) for i in range(50 * k + 45, 50 * k + 50)]   # what an unshuffled split holds
    assert order == sorted(order) and order != last_tenth
    d._read_file.cache_clear(), d._split.cache_clear()
    assert d.load_examples(str(path), "eval") == held   # the same split in every process


def test_class_names_are_limited_too(tmp_path):
    path = tmp_path / "names.csv"
    path.write_text("text,label\n" + "".join(f"t,c{i}\n" for i in range(d.MAX_CLASSES + 1)))
    with pytest.raises(tc.SpecError, match=r"line \d+: 1,001 distinct labels; at most 1000 classes"):
        d.load_examples(str(path))


def test_bad_arguments(few, tok, tmp_path):
    with pytest.raises(ValueError, match="dataset=.*no such file"):
        d.load_examples(str(tmp_path / "missing.csv"))
    with pytest.raises(ValueError, match="split='test'.*'train', 'eval'"):
        d.load_examples("builtin", "test")
    with pytest.raises(ValueError, match="task='mlm'.*'causal-lm'"):
        d.batches("mlm", few, tok, 8, 32)
    with pytest.raises(ValueError, match="padding='dynamic'.*'longest'"):
        d.batches("causal-lm", few, tok, 8, 32, padding="dynamic")
    for kwargs, field in ((dict(batch_size=0), "batch_size"), (dict(seq_len=2), "seq_len"), (dict(seed=-1), "seed")):
        args = dict(batch_size=8, seq_len=32) | kwargs
        with pytest.raises(ValueError, match=field):
            d.batches("causal-lm", few, tok, **args)
    with pytest.raises(ValueError, match="examples"):
        d.batches("causal-lm", [], tok, 8, 32)
    with pytest.raises(ValueError, match="tokenizer"):
        d.load_tokenizer(str(tmp_path / "nope.json"))


# ---------------------------------------------------------------- generator and layering
def test_generator_is_reproducible(tmp_path, monkeypatch):
    script = ROOT / "data" / "generate_task.py"
    for name in ("a", "b"):
        subprocess.run([sys.executable, str(script), "--out", str(tmp_path / name / "task"), "--n-train", "300",
                        "--n-eval", "40"], check=True, capture_output=True, timeout=120)
    files = sorted(p.name for p in (tmp_path / "a" / "task").iterdir())
    assert files == ["README.md", "eval.jsonl", "tokenizer.json", "train.jsonl"]
    for f in files:
        assert (tmp_path / "a" / "task" / f).read_bytes() == (tmp_path / "b" / "task" / f).read_bytes(), f
    monkeypatch.setattr(d, "DATA_DIR", tmp_path / "a")  # what TCBENCH_DATA does
    assert d.dataset_size() == 300 and len(d.load_examples("builtin", "eval")) == 40
    small = d.load_tokenizer()
    assert small.get_vocab_size() == 4096 and [small.token_to_id(t) for t in SPECIALS] == list(range(7))


def test_data_module_does_not_import_torch():
    code = "import sys, tcbench.job.data; assert 'torch' not in sys.modules and 'ipywidgets' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=60)


class _CountingTokenizer:
    """A tokenizer (``tokenizers.Tokenizer``'s two methods a job uses here) that counts its encodings."""

    def __init__(self, vocab: str = "v1") -> None:
        self.vocab, self.calls = vocab, 0

    def to_str(self) -> str:
        return json.dumps({"vocab": self.vocab})

    def encode_batch(self, texts, add_special_tokens=False):
        self.calls += 1
        return [type("Enc", (), {"ids": [len(w) + (self.vocab == "v2") for w in t.split()]})() for t in texts]


def test_token_ids_are_kept_on_disk_for_the_next_process_and_never_served_stale(tmp_path, monkeypatch):
    """A launcher imports in every round and encoded the shipped task each time (0.6 s of 10 s): the ids are kept in
    the home's cache, keyed by the tokenizer's whole form and the texts, so a new process reads them back; another
    tokenizer or other texts are another key, and a damaged file is encoded again and replaced, never a failure."""
    monkeypatch.setenv("TCBENCH_HOME", str(tmp_path))
    monkeypatch.setattr(d, "_ENCODED", {})
    texts = ["a bb ccc", "dddd", ""]
    first = _CountingTokenizer()
    assert d.token_ids(first, texts) == [[1, 2, 3], [4], []] and first.calls == 1
    files = list((tmp_path / "token-ids").glob("*.npz"))
    assert len(files) == 1
    monkeypatch.setattr(d, "_ENCODED", {})   # a new process: nothing in memory
    again = _CountingTokenizer()
    assert d.token_ids(again, texts) == [[1, 2, 3], [4], []] and again.calls == 0   # read from disk
    other = _CountingTokenizer("v2")
    assert d.token_ids(other, texts) == [[2, 3, 4], [5], []] and other.calls == 1   # another tokenizer: its own
    fewer = _CountingTokenizer()
    assert d.token_ids(fewer, texts[:2]) == [[1, 2, 3], [4]] and fewer.calls == 1   # other texts: their own
    files[0].write_bytes(b"not an npz")
    monkeypatch.setattr(d, "_ENCODED", {})
    damaged = _CountingTokenizer()
    assert d.token_ids(damaged, texts) == [[1, 2, 3], [4], []] and damaged.calls == 1
    monkeypatch.setattr(d, "_ENCODED", {})
    fixed = _CountingTokenizer()
    assert d.token_ids(fixed, texts) == [[1, 2, 3], [4], []] and fixed.calls == 0   # rewritten whole
