"""Data: the shipped review-sentiment task (or a user's CSV/JSONL file) turned into training batches.

(A batch factory ``"package.module:function"`` yields its own batches: see ``tcbench/job/factory.py``.) Text is
tokenized with the shipped tokenizer, or with a local model folder's own tokenizer (``job_tokenizer``).

One tokenization pass per ``batches`` call (the fast tokenizer's ``encode_batch``), then every
batch is a slice of a pre-built id matrix: building a 16 x 128 batch takes tens of microseconds,
so the training loop never waits on data. torch is imported inside the functions only (the panel
imports tcbench without the ML stack).

Padding
  ``max_length``: every batch is ``[B, seq_len]``. Static shapes: a compiler traces once.
  ``longest``: pad to the longest sequence of the batch rounded up to a multiple of 8 (capped at
  ``seq_len``): fewer wasted tokens, but several distinct shapes (with the shipped data and
  seq_len 128 typically 8-16), each of which a compiler may trace again.
  ``bucket``: pad to the next power of two >= 16 (capped at ``seq_len``): at most log2(seq_len/16) + 1
  shapes (3 for seq_len 64) — the fix both compilers understand: XLA compiles one graph per bucket,
  and a compiler that specialises on shapes sees a handful, not every length.

Order
  The stream is an endless concatenation of epochs, each a permutation of the examples drawn
  from ``numpy.random.default_rng([seed, epoch])``, cut into consecutive batches of ``batch_size``
  (a batch may span the end of one epoch and the start of the next; none is dropped or short).
  The same (examples, seed, batch_size, seq_len, padding) gives the same batches in any process.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import re
from pathlib import Path
from typing import Any, Iterator

from tcbench.core.profiles import data_dir
from tcbench.core.spec import PADDINGS, SpecError, allowed_text, check_number

DATA_DIR = data_dir()   # read once per job process

TASKS = ("sequence-classification", "causal-lm", "seq2seq-lm")
SPLITS = ("train", "eval")
LABEL_NAMES = ("negative", "positive")  # the shipped task's labels 0 and 1 (seq2seq target words)
PAD, UNK, CLS, SEP, MASK, BOS, EOS = range(7)  # fixed ids of the shipped tokenizer's special tokens
SEQ2SEQ_TARGET_LEN = 4  # label word + [EOS], padded with -100 (longer label words widen it)
IGNORE = -100  # the label value HF losses ignore


# ---------------------------------------------------------------- examples
EVAL_SHARE = 0.1       # of each label's rows, for a user's single file
SPLIT_SEED = 0         # the held-out split is a property of the file, not of a job's seed
MAX_CLASSES = 1000     # labels 0..999: a larger head is a wrong column, not a classification task
FILE_ALLOWED = "'builtin' or a UTF-8 .csv/.jsonl file with 'text' and 'label' (0..K-1 or class names)"
_NUMBER = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*")


def load_examples(dataset: str = "builtin", split: str = "train") -> list[dict]:
    """Examples ``{"text": str, "label": int, "label_text": str}`` of ``dataset``'s ``split``.

    ``dataset``: ``"builtin"`` (the shipped task, ``data/task/{split}.jsonl``) or the path of a UTF-8
    ``.csv`` / ``.jsonl`` file (a BOM is fine) with fields ``text`` and ``label``. Whole-number labels must
    be 0..K-1, every class present (K <= 1000); text labels are mapped to 0..K-1 in sorted order
    (``label_text`` keeps the text, the seq2seq target). For a user file the held-out ``eval`` split is a
    seeded, stratified 10 % of each label (at least one row of every label that has two or more) and
    ``train`` the rest, both in file order. A bad file is a SpecError naming the file and the line.
    """
    if split not in SPLITS:
        raise ValueError(f"split={split!r} is not known; allowed: {allowed_text(SPLITS)}")
    if dataset == "builtin":
        path = DATA_DIR / "task" / f"{split}.jsonl"
        rows = _read_file(str(path), _mtime(path))
        return [dict(r, label_text=LABEL_NAMES[r["label"]]) for r in rows]
    path = Path(dataset).expanduser()
    mtime = _mtime(path)
    rows, (train, held) = _read_file(str(path), mtime), _split(str(path), mtime)
    return [dict(rows[i]) for i in (train if split == "train" else held)]


def check_dataset(dataset: str) -> int:
    """Read and check ``dataset`` as a job would (a SpecError naming the file and line); its number of classes."""
    if dataset == "builtin":
        return len(LABEL_NAMES)
    path = Path(dataset).expanduser()
    mtime = _mtime(path)
    _split(str(path), mtime)
    return 1 + max(r["label"] for r in _read_file(str(path), mtime))


def _bad(path: str | Path, line: int | None, what: str) -> SpecError:
    where = f" line {line}" if line else ""
    return SpecError("dataset", str(path), FILE_ALLOWED, f"dataset={str(path)!r}{where}: {what}")


def _mtime(path: Path) -> float:
    if path.is_dir():
        raise _bad(path, None, "is a folder; allowed: a .csv or .jsonl file")
    if not path.is_file():
        raise _bad(path, None, "no such file")
    if path.suffix.lower() not in (".csv", ".jsonl"):
        raise _bad(path, None, f"unsupported file type {path.suffix!r}; allowed: '.csv', '.jsonl'")
    return path.stat().st_mtime


def _decode(path: str) -> str:
    """The file's text; UTF-8 with or without a BOM (Excel's "CSV UTF-8" writes one)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise _bad(path, None, f"cannot be read ({exc.strerror or exc})") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _bad(path, data.count(b"\n", 0, exc.start) + 1,
                   f"is not UTF-8 text (byte 0x{data[exc.start]:02x}); save it as UTF-8 (Excel: 'CSV UTF-8')") from None


def _csv_rows(path: str, text: str) -> list[dict]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        for field in ("text", "label"):
            if reader.fieldnames is not None and field not in reader.fieldnames:
                raise _bad(path, 1, f"missing column {field!r} (columns: {reader.fieldnames})")
        return [dict(r, _line=reader.line_num) for r in reader]
    except csv.Error as exc:
        raise _bad(path, reader.reader.line_num, f"is not valid CSV ({exc})") from None   # the line read last


def _jsonl_rows(path: str, text: str) -> list[dict]:
    raw = []
    for i, line in enumerate(text.split("\n"), 1):
        if line.strip():
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise _bad(path, i, f"not valid JSON ({exc})") from None
            if not isinstance(row, dict):
                raise _bad(path, i, "expected an object with 'text' and 'label'")
            raw.append(dict(row, _line=i))
    return raw


@functools.lru_cache(maxsize=8)
def _read_file(path: str, mtime: float) -> tuple[dict, ...]:
    """Rows of a CSV/JSONL file with int labels (cached per path and modification time)."""
    text = _decode(path)
    raw = _csv_rows(path, text) if path.lower().endswith(".csv") else _jsonl_rows(path, text)
    if not raw:
        raise _bad(path, None, "is empty (no rows with 'text' and 'label')")
    for r in raw:
        for field in ("text", "label"):
            if r.get(field) is None or r.get(field) == "":
                raise _bad(path, r["_line"], f"missing field {field!r}")
        if not isinstance(r["text"], str):
            raise _bad(path, r["_line"], f"field 'text' must be a string, got {r['text']!r}")
    labels = _map_labels(raw, path)
    return tuple({"text": r["text"], "label": y, "label_text": t} for r, (y, t) in zip(raw, labels))


def _label_kind(v: Any) -> str:
    """'number' (1, 1.5, "2"), 'text' ("pos") or 'bad' (a bool, a list, ...)."""
    if isinstance(v, bool):
        return "bad"
    if isinstance(v, (int, float)) or (isinstance(v, str) and _NUMBER.fullmatch(v)):
        return "number"
    return "text" if isinstance(v, str) else "bad"


def _map_labels(raw: list[dict], path: str) -> list[tuple[int, str]]:
    """(int label, label text) per row: whole numbers 0..K-1 kept (also "3" in a CSV), text mapped in sorted order."""
    kinds = [_label_kind(r["label"]) for r in raw]
    has_text = "text" in kinds   # once: inside the loop it made labelling quadratic (2.8 s for the shipped task)
    for r, kind in zip(raw, kinds):
        if kind == "bad" or (kind == "number" and has_text and not isinstance(r["label"], str)):
            raise _bad(path, r["_line"], f"label {r['label']!r} is not allowed; use whole numbers 0..K-1 or "
                                         "class names (one kind in the whole file)")
    if has_text:   # class names (a CSV's numeric-looking names among them stay names)
        names = sorted({str(r["label"]) for r in raw})
        if len(names) > MAX_CLASSES:
            first = next(r for r in raw if str(r["label"]) == names[MAX_CLASSES])
            raise _bad(path, first["_line"], f"{len(names):,} distinct labels; at most {MAX_CLASSES} classes")
        index = {n: k for k, n in enumerate(names)}
        return [(index[str(r["label"])], str(r["label"])) for r in raw]
    ints = []
    for r in raw:
        value = float(r["label"])
        if not value.is_integer() or value < 0:
            raise _bad(path, r["_line"], f"label {r['label']!r} is not allowed; labels are whole numbers 0..K-1")
        if value >= MAX_CLASSES:
            raise _bad(path, r["_line"], f"label {r['label']!r} would make a {int(value) + 1:,}-way head; "
                                         f"allowed: 0..{MAX_CLASSES - 1} (at most {MAX_CLASSES} classes)")
        ints.append(int(value))
    absent = sorted(set(range(max(ints) + 1)) - set(ints))
    if absent:
        first = next(r for r, y in zip(raw, ints) if y > absent[0])
        raise _bad(path, first["_line"], f"label {first['label']!r} but no row has label {absent[0]}; labels must "
                                         f"be 0..K-1 with every class present")
    return [(y, str(y)) for y in ints]


@functools.lru_cache(maxsize=8)
def _split(path: str, mtime: float) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(train, eval) row indices of a user file: a seeded shuffle per label, 10 % of each label held out."""
    import numpy as np

    rows = _read_file(path, mtime)
    if len(rows) < 2:
        raise _bad(path, None, f"has {len(rows)} row(s); at least 2 are needed for train and eval")
    by_label: dict[int, list[int]] = {}
    for i, r in enumerate(rows):
        by_label.setdefault(r["label"], []).append(i)
    rng, held = np.random.default_rng(SPLIT_SEED), set()
    for label in sorted(by_label):
        idx = by_label[label]
        if len(idx) >= 2:   # a label's only row trains (the head must know every class)
            held.update(rng.permutation(idx)[: min(len(idx) - 1, max(1, round(len(idx) * EVAL_SHARE)))].tolist())
    if not held:
        raise _bad(path, None, "no label has 2 rows; the held-out split needs one row of a label the job trains on")
    return tuple(i for i in range(len(rows)) if i not in held), tuple(sorted(held))


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


OWN_TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "vocab.txt")   # a folder with one of these has its own


def job_tokenizer(model: str) -> tuple[Any, str]:
    """(tokenizer, where it came from) for a job's text data: a local model folder's own tokenizer when it
    ships one (loaded with ``AutoTokenizer``, offline), else the shipped tokenizer."""
    folder = Path(model)
    if folder.is_dir() and any((folder / name).is_file() for name in OWN_TOKENIZER_FILES):
        import transformers

        tok = transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True, trust_remote_code=False)
        return tok, f"the model folder's own ({type(tok).__name__})"
    return load_tokenizer(), "the shipped tokenizer (data/task/tokenizer.json)"


def _plain(tokenizer) -> tuple[Any, dict[str, int]]:
    """(a ``tokenizers.Tokenizer``, its special ids) for the shipped tokenizer or a transformers fast tokenizer.

    A transformers tokenizer's own specials frame the text: [CLS]/[SEP] (or BOS/EOS when it has no CLS),
    padding with its pad id (else EOS, else 0)."""
    if not hasattr(tokenizer, "backend_tokenizer"):
        return tokenizer, {"pad": PAD, "cls": CLS, "sep": SEP, "bos": BOS, "eos": EOS}
    ids = {k: getattr(tokenizer, f"{k}_token_id", None) for k in ("pad", "cls", "sep", "bos", "eos")}
    cls = ids["cls"] if ids["cls"] is not None else ids["bos"]
    sep = ids["sep"] if ids["sep"] is not None else ids["eos"]
    bos = ids["bos"] if ids["bos"] is not None else cls
    eos = ids["eos"] if ids["eos"] is not None else sep
    pad = next((i for i in (ids["pad"], eos, 0) if i is not None), 0)
    return tokenizer.backend_tokenizer, {"pad": pad, "cls": cls, "sep": sep, "bos": bos, "eos": eos}


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
        raise ValueError(f"task={task!r} is not known; allowed: {allowed_text(TASKS)}")
    if padding not in PADDINGS:
        raise ValueError(f"padding={padding!r} is not known; allowed: {allowed_text(PADDINGS)}")
    for field, value, low in (("batch_size", batch_size, 1), ("seq_len", seq_len, 3), ("seed", seed, 0)):
        check_number(field, value, low, whole=True)
    if not examples:
        raise ValueError("examples is empty: at least one example is needed")
    tokenizer, sp = _plain(tokenizer)
    ids, lengths = _encode(task, examples, tokenizer, seq_len, sp)
    targets = _seq2seq_targets(examples, tokenizer, sp["eos"]) if task == "seq2seq-lm" else None
    labels = np.asarray([e["label"] for e in examples], dtype=np.int64)
    return _stream(task, ids, lengths, labels, targets, batch_size, seq_len, padding, seed, sp["pad"])


_ENCODED: dict[tuple[int, int], tuple[Any, list[list[int]]]] = {}   # (tokenizer id, texts hash) -> (it, ids)


def token_ids(tokenizer, texts: list[str]) -> list[list[int]]:
    """The texts' token ids (no special tokens), encoded once per process for one tokenizer and one list of texts (a
    job forked from the warm launcher finds the shipped task already encoded: ``preload_shipped``), and kept on disk
    for the next process (``_IdsOnDisk``: a launcher imports in every round of a comparison, and the shipped task's
    22,000 texts took 0.6 s of its 10 s to encode)."""
    key = (id(tokenizer), hash(tuple(texts)))
    hit = _ENCODED.get(key)
    if hit is None or hit[0] is not tokenizer:
        if len(_ENCODED) >= 4:
            _ENCODED.clear()
        disk = _IdsOnDisk(tokenizer, texts)
        ids = disk.read()
        if ids is None:
            ids = [e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=False)]
            disk.write(ids)
        hit = _ENCODED[key] = (tokenizer, ids)
    return hit[1]


class _IdsOnDisk:
    """A list of texts' token ids in ``$TCBENCH_HOME/token-ids``, one ``.npz`` per (tokenizer, texts): keyed by
    the tokenizer's whole serialised form, the tokenizers library's version and the texts themselves, so a changed
    file or tokenizer is a new key, never a stale hit. Numbers only (no pickle); the ``KEEP`` newest files are kept.
    A file that cannot be read or written is the cache missing, never the job failing: the texts are encoded."""

    KEEP = 16

    def __init__(self, tokenizer: Any, texts: list[str]) -> None:
        import hashlib

        self.n = len(texts)
        self.path: Path | None = None
        try:
            import tokenizers

            h = hashlib.sha256(f"{tokenizers.__version__}\0{tokenizer.to_str()}\0{self.n}".encode())
            for t in texts:
                h.update(t.encode("utf-8", "surrogatepass") + b"\0")
            from tcbench.host.paths import home

            self.path = home() / "token-ids" / f"{h.hexdigest()[:32]}.npz"   # beside the compile caches (cache/)
        except Exception:  # noqa: BLE001 - a tokenizer that cannot be serialised: no disk cache for it
            self.path = None

    def read(self) -> list[list[int]] | None:
        if self.path is None or not self.path.is_file():
            return None
        import numpy as np

        try:
            with np.load(self.path, allow_pickle=False) as f:
                flat, ends = f["flat"], f["ends"]
            if len(ends) != self.n or (self.n and int(ends[-1]) != len(flat)):
                return None
            starts = np.concatenate(([0], ends[:-1]))
            values = flat.tolist()
            return [values[a:b] for a, b in zip(starts.tolist(), ends.tolist())]
        except Exception:  # noqa: BLE001 - unreadable: encoded again and written anew
            return None

    def write(self, ids: list[list[int]]) -> None:
        if self.path is None:
            return
        import os
        import tempfile

        import numpy as np

        from tcbench.host.paths import private_dir

        tmp = ""
        try:
            folder = private_dir(self.path.parent)
            ends = np.cumsum([len(x) for x in ids], dtype=np.int64)
            flat = np.fromiter((t for x in ids for t in x), dtype=np.int32, count=int(ends[-1]) if len(ends) else 0)
            fd, tmp = tempfile.mkstemp(dir=folder, suffix=".npz.tmp")
            with os.fdopen(fd, "wb") as out:
                np.savez(out, flat=flat, ends=ends)
            os.replace(tmp, self.path)   # whole or absent: a reader never sees half a file
            old = sorted(folder.glob("*.npz"), key=lambda p: p.stat().st_mtime)[:-self.KEEP]
            for p in old:
                p.unlink(missing_ok=True)
        except Exception:  # noqa: BLE001 - a read-only or full disk: the next process encodes again
            if tmp:
                Path(tmp).unlink(missing_ok=True)


def preload_shipped() -> None:
    """Read and encode the shipped task (both splits, the shipped tokenizer): what every catalog job on the built-in
    data does first, done once in the warm launcher before it forks its jobs."""
    tokenizer = load_tokenizer()
    for split in SPLITS:
        token_ids(tokenizer, [e["text"] for e in load_examples("builtin", split)])


def _encode(task: str, examples: list[dict], tokenizer, seq_len: int, sp: dict[str, int]):
    """(int32 id matrix [N, W] padded with [PAD], lengths [N]); W = longest framed sequence <= seq_len."""
    import numpy as np

    encs = token_ids(tokenizer, [e["text"] for e in examples])
    cls, sep, bos, eos = sp["cls"], sp["sep"], sp["bos"], sp["eos"]
    if task == "sequence-classification":  # HF-style truncation: [SEP] is kept
        seqs = [[cls, *e[: seq_len - 2], sep] for e in encs]
    elif task == "causal-lm":  # cut the framed sequence: a long text loses its [EOS]
        seqs = [[bos, *e, eos][:seq_len] for e in encs]
    else:  # T5 convention: the input ends with [EOS], kept on truncation
        seqs = [[*e[: seq_len - 1], eos] for e in encs]
    lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    ids = np.full((len(seqs), int(lengths.max())), sp["pad"], dtype=np.int32)
    for row, s in zip(ids, seqs):
        row[: len(s)] = s
    return ids, lengths


def _seq2seq_targets(examples: list[dict], tokenizer, eos: int = EOS):
    """int64 [N, T]: the token ids of each label word + [EOS], then -100."""
    import numpy as np

    words = sorted({e.get("label_text", str(e["label"])) for e in examples})
    ids = {w: tokenizer.encode(w, add_special_tokens=False).ids + [eos] for w in words}
    width = max(SEQ2SEQ_TARGET_LEN, max(len(v) for v in ids.values()))
    table = {w: v + [IGNORE] * (width - len(v)) for w, v in ids.items()}
    return np.asarray([table[e.get("label_text", str(e["label"]))] for e in examples], dtype=np.int64)


def _stream(task, ids, lengths, labels, targets, batch_size, seq_len, padding, seed, pad=PAD) -> Iterator[dict]:
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
        elif padding == "bucket":
            L = min(seq_len, max(16, 1 << (int(lens.max()) - 1).bit_length()))
        else:
            L = min(seq_len, -(-int(lens.max()) // 8) * 8)
        input_ids = np.full((batch_size, L), pad, dtype=np.int64)
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
