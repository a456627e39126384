"""Data: the shipped review-sentiment task (or a user's CSV/JSONL file) turned into training batches.

One tokenization pass per ``batches`` call (the fast tokenizer's ``encode_batch``), then every
batch is a slice of a pre-built id matrix: building a 16 x 128 batch takes tens of microseconds,
so the training loop never waits on data. torch is imported inside the functions only (the panel
imports tcbench without the ML stack).

Padding
  ``max_length``: every batch is ``[B, seq_len]``. Static shapes: a compiler traces once.
  ``longest``: pad to the longest sequence of the batch rounded up to a multiple of 8 (capped at
  ``seq_len``): fewer wasted tokens, but several distinct shapes (with the shipped data and
  seq_len 128 typically 8-16), each of which a compiler may trace again.

Order
  The stream is an endless concatenation of epochs, each a permutation of the examples drawn
  from ``numpy.random.default_rng([seed, epoch])``, cut into consecutive batches of ``batch_size``
  (a batch may span the end of one epoch and the start of the next; none is dropped or short).
  The same (examples, seed, batch_size, seq_len, padding) gives the same batches in any process.
"""

from __future__ import annotations

import csv
import functools
import json
import os
from pathlib import Path
from typing import Any, Iterator

DATA_DIR = Path(os.environ.get("TCBENCH_DATA") or Path(__file__).resolve().parent.parent / "data")

TASKS = ("sequence-classification", "causal-lm", "seq2seq-lm")
PADDINGS = ("max_length", "longest")
SPLITS = ("train", "eval")
LABEL_NAMES = ("negative", "positive")  # the shipped task's labels 0 and 1 (seq2seq target words)
PAD, UNK, CLS, SEP, MASK, BOS, EOS = range(7)  # fixed ids of the shipped tokenizer's special tokens
SEQ2SEQ_TARGET_LEN = 4  # label word + [EOS], padded with -100 (longer label words widen it)
IGNORE = -100  # the label value HF losses ignore


def _allowed(values) -> str:
    return ", ".join(repr(v) for v in values)


# ---------------------------------------------------------------- examples
def load_examples(dataset: str = "builtin", split: str = "train") -> list[dict]:
    """Examples ``{"text": str, "label": int, "label_text": str}`` of ``dataset``'s ``split``.

    ``dataset``: ``"builtin"`` (the shipped task, ``data/task/{split}.jsonl``) or the path of a
    ``.csv`` / ``.jsonl`` file with fields ``text`` and ``label``. Integer labels are kept; string
    labels are mapped to 0..K-1 in sorted order (``label_text`` keeps the string, the seq2seq target).
    For a user file, ``eval`` is its last 10% (at least one row) and ``train`` the rest.
    """
    if split not in SPLITS:
        raise ValueError(f"split={split!r} is not known; allowed: {_allowed(SPLITS)}")
    if dataset == "builtin":
        path = DATA_DIR / "task" / f"{split}.jsonl"
        rows = _read_file(str(path), _mtime(path, "dataset"))
        return [dict(r, label_text=LABEL_NAMES[r["label"]]) for r in rows]
    path = Path(dataset).expanduser()
    rows = _read_file(str(path), _mtime(path, "dataset"))
    if len(rows) < 2:
        raise ValueError(f"dataset={dataset!r} has {len(rows)} row(s); at least 2 are needed for train and eval")
    n_eval = max(1, len(rows) // 10)
    part = rows[:-n_eval] if split == "train" else rows[-n_eval:]
    return [dict(r) for r in part]


def _mtime(path: Path, field: str) -> float:
    if not path.is_file():
        raise ValueError(f"{field}={str(path)!r}: no such file")
    if path.suffix.lower() not in (".csv", ".jsonl"):
        raise ValueError(f"{field}={str(path)!r}: unsupported file type {path.suffix!r}; allowed: '.csv', '.jsonl'")
    return path.stat().st_mtime


@functools.lru_cache(maxsize=8)
def _read_file(path: str, mtime: float) -> tuple[dict, ...]:
    """Rows of a CSV/JSONL file with int labels (cached per path and modification time)."""
    raw: list[dict] = []
    if path.lower().endswith(".csv"):
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            for field in ("text", "label"):
                if reader.fieldnames is not None and field not in reader.fieldnames:
                    raise ValueError(f"dataset={path!r}: missing column {field!r} (columns: {reader.fieldnames})")
            raw = [dict(r, _line=i + 2) for i, r in enumerate(reader)]
    else:
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f, 1):
                if line.strip():
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError as e:
                        raise ValueError(f"dataset={path!r} line {i}: not valid JSON ({e})") from None
                    if not isinstance(row, dict):
                        raise ValueError(f"dataset={path!r} line {i}: expected an object with 'text' and 'label'")
                    raw.append(dict(row, _line=i))
    if not raw:
        raise ValueError(f"dataset={path!r} is empty (no rows with 'text' and 'label')")
    for r in raw:
        for field in ("text", "label"):
            if r.get(field) is None or r.get(field) == "":
                raise ValueError(f"dataset={path!r} line {r['_line']}: missing field {field!r}")
        if not isinstance(r["text"], str):
            raise ValueError(f"dataset={path!r} line {r['_line']}: field 'text' must be a string, got {r['text']!r}")
    labels = _map_labels([r["label"] for r in raw], path)
    return tuple({"text": r["text"], "label": y, "label_text": t} for r, (y, t) in zip(raw, labels))


def _map_labels(values: list[Any], path: str) -> list[tuple[int, str]]:
    """(int label, label text) per row: ints kept (also "3" in a CSV), strings mapped in sorted order."""
    def as_int(v):
        if isinstance(v, bool):
            return None
        if isinstance(v, int):
            return v
        if isinstance(v, str) and v.strip().lstrip("-").isdigit():
            return int(v)
        return None

    ints = [as_int(v) for v in values]
    if all(i is not None for i in ints):
        bad = [i for i in ints if i < 0]
        if bad:
            raise ValueError(f"dataset={path!r}: field 'label' must be >= 0, got {bad[0]}")
        return [(i, str(i)) for i in ints]
    if not all(isinstance(v, str) for v in values):
        odd = next(v for v in values if not isinstance(v, (str, int)) or isinstance(v, bool))
        raise ValueError(f"dataset={path!r}: field 'label' must be int or str, got {odd!r}")
    names = sorted(set(values))
    index = {n: k for k, n in enumerate(names)}
    return [(index[v], v) for v in values]


def num_labels(examples: list[dict]) -> int:
    """Number of classes: the largest label + 1 (at least 2)."""
    return max(2, 1 + max((e["label"] for e in examples), default=0))


def dataset_size(dataset: str = "builtin") -> int:
    """Number of train examples of ``dataset``."""
    return len(load_examples(dataset, "train"))


# ---------------------------------------------------------------- tokenizer
def load_tokenizer(path: str | None = None):
    """A ``tokenizers.Tokenizer``: the shipped one (``data/task/tokenizer.json``) by default; cached."""
    p = Path(path).expanduser() if path else DATA_DIR / "task" / "tokenizer.json"
    if not p.is_file():
        raise ValueError(f"tokenizer={str(p)!r}: no such file")
    return _tokenizer(str(p.resolve()), p.stat().st_mtime)


@functools.lru_cache(maxsize=4)
def _tokenizer(path: str, mtime: float):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(path)


# ---------------------------------------------------------------- batches
def batches(task: str, examples: list[dict], tokenizer, batch_size: int, seq_len: int,
            padding: str = "max_length", seed: int = 0) -> Iterator[dict]:
    """Endless iterator of batches (dicts of LongTensors) for ``task``; see the module docstring.

    sequence-classification: input_ids/attention_mask ``[B, L]`` of ``[CLS] text [SEP]``, labels ``[B]``.
    causal-lm: ``[BOS] text [EOS]`` cut to ``seq_len``; labels = input_ids with -100 on padding.
    seq2seq-lm: input ``text [EOS]``; labels ``[B, T]`` = label word ids + ``[EOS]``, -100 after
    (T = 4, or more if a label word needs it; fixed for the whole stream).
    """
    import numpy as np

    if task not in TASKS:
        raise ValueError(f"task={task!r} is not known; allowed: {_allowed(TASKS)}")
    if padding not in PADDINGS:
        raise ValueError(f"padding={padding!r} is not known; allowed: {_allowed(PADDINGS)}")
    for field, value, low in (("batch_size", batch_size, 1), ("seq_len", seq_len, 3), ("seed", seed, 0)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError(f"{field}={value!r} must be an int >= {low}")
    if not examples:
        raise ValueError("examples is empty: at least one example is needed")
    ids, lengths = _encode(task, examples, tokenizer, seq_len)
    targets = _seq2seq_targets(examples, tokenizer) if task == "seq2seq-lm" else None
    labels = np.asarray([e["label"] for e in examples], dtype=np.int64)
    return _stream(task, ids, lengths, labels, targets, batch_size, seq_len, padding, seed)


def _encode(task: str, examples: list[dict], tokenizer, seq_len: int):
    """(int32 id matrix [N, W] padded with [PAD], lengths [N]); W = longest framed sequence <= seq_len."""
    import numpy as np

    encs = tokenizer.encode_batch([e["text"] for e in examples], add_special_tokens=False)
    if task == "sequence-classification":  # HF-style truncation: [SEP] is kept
        seqs = [[CLS, *e.ids[: seq_len - 2], SEP] for e in encs]
    elif task == "causal-lm":  # cut the framed sequence: a long text loses its [EOS]
        seqs = [[BOS, *e.ids, EOS][:seq_len] for e in encs]
    else:  # T5 convention: the input ends with [EOS], kept on truncation
        seqs = [[*e.ids[: seq_len - 1], EOS] for e in encs]
    lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    ids = np.full((len(seqs), int(lengths.max())), PAD, dtype=np.int32)
    for row, s in zip(ids, seqs):
        row[: len(s)] = s
    return ids, lengths


def _seq2seq_targets(examples: list[dict], tokenizer):
    """int64 [N, T]: the token ids of each label word + [EOS], then -100."""
    import numpy as np

    words = sorted({e.get("label_text", str(e["label"])) for e in examples})
    ids = {w: tokenizer.encode(w, add_special_tokens=False).ids + [EOS] for w in words}
    width = max(SEQ2SEQ_TARGET_LEN, max(len(v) for v in ids.values()))
    table = {w: v + [IGNORE] * (width - len(v)) for w, v in ids.items()}
    return np.asarray([table[e.get("label_text", str(e["label"]))] for e in examples], dtype=np.int64)


def _stream(task, ids, lengths, labels, targets, batch_size, seq_len, padding, seed) -> Iterator[dict]:
    import numpy as np
    import torch

    n, width = ids.shape
    epoch, pending = 0, np.empty(0, dtype=np.int64)
    while True:
        while len(pending) < batch_size:  # an epoch = one permutation, seeded by (seed, epoch)
            perm = np.random.default_rng([seed, epoch]).permutation(n)
            pending, epoch = np.concatenate([pending, perm]), epoch + 1
        idx, pending = pending[:batch_size], pending[batch_size:]
        lens = lengths[idx]
        if padding == "max_length":
            L = seq_len
        else:
            L = min(seq_len, -(-int(lens.max()) // 8) * 8)
        input_ids = np.full((batch_size, L), PAD, dtype=np.int64)
        w = min(L, width)
        input_ids[:, :w] = ids[idx, :w]
        mask = (np.arange(L)[None, :] < lens[:, None]).astype(np.int64)
        if task == "sequence-classification":
            y = labels[idx]
        elif task == "causal-lm":
            y = np.where(mask == 1, input_ids, IGNORE)
        else:
            y = targets[idx]
        yield {"input_ids": torch.from_numpy(input_ids), "attention_mask": torch.from_numpy(mask),
               "labels": torch.from_numpy(np.ascontiguousarray(y))}


def batch_on_device(batch: dict, device) -> dict:
    """The batch with every tensor moved to ``device`` (non-blocking copies on CUDA)."""
    import torch

    dev = torch.device(device)
    non_blocking = dev.type == "cuda"
    return {k: v.to(dev, non_blocking=non_blocking) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
