"""Every bad input is a named error before any process starts (issue 8, item 4).

One table of bad inputs, each tried through the API (``tc.JobSpec(...)`` then ``tc.run(spec)``) and, where
``tcbench run`` has a flag for it, through the CLI: the error names the field and the value, the CLI prints
one line and exits 2, no traceback, no job process and no stored run. Then what must keep working: a CSV
with a BOM, a label-sorted file, relative paths from another working directory, a profile's memory budget.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

import tcbench as tc
from tcbench.job import data as _data
from tcbench.runner import process as _runner
from tcbench.core.catalog import SHIPPED_VOCAB
from tcbench.runner.preflight import check
from tcbench.store.api import Store
from tcbench.cli.app import main

VOCAB = SHIPPED_VOCAB + 8   # what the catalog's tiny models use: the shipped tokenizer's ids fit
WIDE = "x" * 140_000        # longer than the csv module's field limit (131,072)

FILES: dict[str, bytes] = {
    "latin1.csv": b"text,label\nfine,0\ncaf\xe9,1\n",
    "no-label.csv": b"text,y\na,1\n",
    "huge-labels.csv": b"text,label\n" + b"".join(b"t,%d\n" % y for y in (0, 1, 2, 1_900_000)),
    "gap.csv": b"text,label\na,0\nb,0\nc,2\n",
    "negative.csv": b"text,label\na,0\nb,-1\n",
    "half.jsonl": b'{"text": "a", "label": 0}\n{"text": "b", "label": 1.5}\n',
    "broken.jsonl": b'{"text": "a", "label": 0}\n{"text": "b", "label": \n',
    "list.jsonl": b'{"text": "a", "label": 0}\n["b", 1]\n',
    "mixed.jsonl": b'{"text": "a", "label": "pos"}\n{"text": "b", "label": 1}\n',
    "bool.jsonl": b'{"text": "a", "label": true}\n{"text": "b", "label": false}\n',
    "no-text.csv": b"text,label\n,1\nb,0\n",
    "number-text.jsonl": b'{"text": "a", "label": 0}\n{"text": 7, "label": 1}\n',
    "one-row.csv": b"text,label\na,0\n",
    "singletons.csv": b"text,label\na,0\nb,1\n",
    "empty.csv": b"",
    "wide.csv": b"text,label\na,0\n" + WIDE.encode() + b",1\n",
    "notes.txt": b"text,label\na,0\n",
}


def _file(name: str, what: str) -> tuple:
    """A table row: the dataset file ``name`` (API only); ``what`` follows the file's name in the message."""
    sep = "" if what.startswith("line") else ":"
    return f"dataset-{name}", dict(dataset=f"{{data}}/{name}"), None, "dataset", f"{name}'{sep} {what}"


def _folder(name: str, what: str) -> tuple:
    """A table row: the local model folder ``name`` (API only); ``what`` follows the folder's name."""
    return f"model-{name}", dict(model=f"{{models}}/{name}"), None, "model", f"{name}': {what}"


# id, JobSpec keywords (None: CLI only), `tcbench ...` arguments (None: no flag), field, text in the message.
# {data} and {models} stand for the folders the fixtures write.
CASES = [
    # issue 8's list
    ("profile-unknown", dict(profile="p5.nope"), ["run", "--profile", "p5.nope"], "profile", "'p5.nope'"),
    ("timeout-as-text", dict(timeout_s="60"), None, "timeout_s", "timeout_s='60'"),
    ("debug-as-text", dict(debug="no"), None, "debug", "debug='no'"),
    ("dropout-as-text", dict(dropout="0.1"), None, "dropout", "dropout='0.1'"),
    ("seed-2**70", dict(seed=2**70), ["run", "--seed", str(2**70)], "seed", f"seed={2**70}"),
    ("threads-100000", dict(threads=100000), ["run", "--threads", "100000"], "threads", "threads=100000"),
    ("labels-to-1.9M", dict(dataset="{data}/huge-labels.csv"), ["run", "--dataset", "{data}/huge-labels.csv"],
     "dataset", "huge-labels.csv' line 5: label '1900000' would make a 1,900,001-way head"),
    ("vocab-smaller-than-tokenizer", dict(model="{models}/small-vocab"), ["run", "--model", "{models}/small-vocab"],
     "model", "vocab_size=1,000 is smaller than the data's tokenizer"),
    ("positions-fewer-than-seq-len", dict(model="{models}/few-positions", seq_len=128),
     ["run", "--model", "{models}/few-positions", "--seq-len", "128"], "seq_len", "seq_len=128 is beyond the 64 positions"),
    # numbers: text, bools, non-finite, ranges
    ("batch-as-text", dict(batch_size="8"), None, "batch_size", "batch_size='8'"),
    ("batch-as-bool", dict(batch_size=True), None, "batch_size", "batch_size=True"),
    ("batch-zero", dict(batch_size=0), ["run", "--batch-size", "0"], "batch_size", "batch_size=0"),
    ("steps-zero", dict(steps=0, warmup_steps=0), ["run", "--steps", "0", "--warmup", "0"], "steps", "steps=0"),
    ("warmup-negative", dict(warmup_steps=-1), ["run", "--warmup", "-1"], "warmup_steps", "warmup_steps=-1"),
    ("seed-negative", dict(seed=-1), ["run", "--seed", "-1"], "seed", "seed=-1"),
    ("seed-as-float", dict(seed=1.0), None, "seed", "seed=1.0"),
    ("threads-zero", dict(threads=0), ["run", "--threads", "0"], "threads", "threads=0"),
    ("threads-as-bool", dict(threads=True), None, "threads", "threads=True"),
    ("threads-above-cores", dict(threads=len(os.sched_getaffinity(0)) + 1),
     ["run", "--threads", str(len(os.sched_getaffinity(0)) + 1)], "threads", "core(s) this process may use"),
    ("lr-nan", dict(lr=float("nan")), ["run", "--lr", "nan"], "lr", "lr=nan"),
    ("lr-inf", dict(lr=float("inf")), ["run", "--lr", "inf"], "lr", "lr=inf"),
    ("lr-as-text", dict(lr="1e-3"), None, "lr", "lr='1e-3'"),
    ("dropout-nan", dict(dropout=float("nan")), ["run", "--dropout", "nan"], "dropout", "dropout=nan"),
    ("dropout-one", dict(dropout=1.0), ["run", "--dropout", "1"], "dropout", "dropout=1.0"),
    ("budget-zero", dict(memory_budget_gb=0), None, "memory_budget_gb", "memory_budget_gb=0"),
    ("budget-inf", dict(memory_budget_gb=float("inf")), None, "memory_budget_gb", "memory_budget_gb=inf"),
    ("budget-as-text", dict(memory_budget_gb="4"), None, "memory_budget_gb", "memory_budget_gb='4'"),
    ("timeout-zero", dict(timeout_s=0), None, "timeout_s", "timeout_s=0"),
    ("timeout-nan", dict(timeout_s=float("nan")), None, "timeout_s", "timeout_s=nan"),
    ("timeout-inf", dict(timeout_s=float("inf")), None, "timeout_s", "timeout_s=inf"),
    ("stall-text", dict(stall_s="300"), None, "stall_s", "stall_s='300'"),
    ("stall-negative", dict(stall_s=-1.0), None, "stall_s", "stall_s=-1.0"),
    ("debug-as-int", dict(debug=1), None, "debug", "debug=1"),
    ("eval-batches-negative", dict(eval_batches=-1), None, "eval_batches", "eval_batches=-1"),
    ("loss-every-zero", dict(loss_every=0), ["run", "--loss-every", "0"], "loss_every", "loss_every=0"),
    ("seq-len-beyond-bert", dict(seq_len=4096), ["run", "--seq-len", "4096"], "seq_len", "seq_len=4096"),
    # names
    ("profile-as-number", dict(profile=5), None, "profile", "profile=5"),
    ("profile-empty", dict(profile=""), ["run", "--profile", ""], "profile", "profile=''"),
    ("model-unknown", dict(model="llama"), ["run", "--model", "llama"], "model", "model='llama'"),
    ("size-unknown", dict(size="huge"), ["run", "--size", "huge"], "size", "size='huge'"),
    ("compile-mode-unknown", dict(compile_mode="fast"), None, "compile_mode", "compile_mode='fast'"),
    ("cli-compile-mode", None, ["run", "--compile-mode", "fast"], "--compile-mode", "invalid choice: 'fast'"),
    ("backend-unknown", dict(backend="tvm"), None, "backend", "backend='tvm'"),
    ("dataset-empty", dict(dataset=""), ["run", "--dataset", ""], "dataset", "dataset=''"),
    ("dataset-none", dict(dataset=None), None, "dataset", "dataset=None"),
    # dataset files: every error names the file, and the line where there is one
    ("dataset-missing", dict(dataset="{data}/missing.csv"), ["run", "--dataset", "{data}/missing.csv"], "dataset",
     "missing.csv': no such file"),
    ("dataset-is-a-folder", dict(dataset="{data}/folder.csv"), ["run", "--dataset", "{data}/folder.csv"], "dataset",
     "folder.csv': is a folder"),
    ("dataset-latin1", dict(dataset="{data}/latin1.csv"), ["run", "--dataset", "{data}/latin1.csv"], "dataset",
     "latin1.csv' line 3: is not UTF-8 text (byte 0xe9)"),
    _file("notes.txt", "unsupported file type '.txt'"),
    _file("empty.csv", "is empty"),
    _file("no-label.csv", "line 1: missing column 'label'"),
    _file("gap.csv", "line 4: label '2' but no row has label 1"),
    _file("negative.csv", "line 3: label '-1' is not allowed"),
    _file("half.jsonl", "line 2: label 1.5 is not allowed"),
    _file("bool.jsonl", "line 1: label True"),
    _file("mixed.jsonl", "line 2: label 1"),
    _file("broken.jsonl", "line 2: not valid JSON"),
    _file("list.jsonl", "line 2: expected an object"),
    _file("no-text.csv", "line 2: missing field 'text'"),
    _file("number-text.jsonl", "line 2: field 'text' must be a string"),
    _file("wide.csv", "line 3: is not valid CSV (field larger than field limit"),
    _file("one-row.csv", "has 1 row(s)"),
    _file("singletons.csv", "no label has 2 rows"),
    # local model folders
    ("model-folder-missing", dict(model="{models}/nope"), ["run", "--model", "{models}/nope"], "model",
     "nope': no such folder"),
    _folder("no-config", "has no config.json"),
    _folder("broken-config", "its config.json cannot be read"),
    _folder("vit", "model_type 'vit' has no sequence-classification head"),
    _folder("no-weights", "has no weights"),
    _folder("big-tokenizer", "its own tokenizer (vocab.txt) has 5,000 tokens but vocab_size=4,104"),
    ("gpt2-positions", dict(model="{models}/gpt2-short", seq_len=64), None, "seq_len",
     "seq_len=64 is beyond the 32 positions"),
    ("roberta-padding-offset", dict(model="{models}/roberta", seq_len=65), None, "seq_len",
     "seq_len=65 is beyond the 64 positions"),
    # the CLI only: usage errors, unknown ids, unwritable files
    ("cli-threads-not-a-number", None, ["run", "--threads", "abc"], "--threads", "invalid int value: 'abc'"),
    ("cli-seed-not-whole", None, ["run", "--seed", "1.5"], "--seed", "invalid int value: '1.5'"),
    ("cli-unknown-flag", None, ["run", "--timeout-minutes", "5"], "--timeout-minutes", "unrecognized arguments"),
    ("cli-timeout-text", None, ["run", "--timeout-s", "abc"], "--timeout-s", "invalid float value: 'abc'"),
    ("cli-timeout-negative", None, ["run", "--timeout-s", "-5"], "timeout_s", "timeout_s=-5.0"),
    ("cli-stall-zero", None, ["run", "--stall-s", "0"], "stall_s", "stall_s=0.0"),
    ("cli-precision", None, ["run", "--precision", "int8"], "--precision", "invalid choice: 'int8'"),
    ("cli-backend", None, ["run", "--backend", "tvm"], "--backend", "invalid choice: 'tvm'"),
    ("cli-backends", None, ["compare", "--backends", "eager,tvm"], "--backends", "'eager,tvm'"),
    ("cli-report-unknown", None, ["report", "99999"], "tcbench comparisons", "comparison 99999 is not in the store"),
    ("cli-show-unknown", None, ["show", "99999"], "tcbench comparisons", "comparison 99999 is not in the store"),
    ("cli-report-out", None, ["report", "99999", "--out", "{data}/no-folder/x.html"], "--out",
     "{data}/no-folder/x.html"),
    ("cli-steps-unknown", None, ["steps", "99999"], "tcbench runs", "run 99999 is not in the store"),
    ("cli-compare-profile", None, ["compare", "--profile", "p5.nope"], "profile", "'p5.nope'"),
    ("cli-compare-dataset", None, ["compare", "--dataset", "{data}/gap.csv"], "dataset", "gap.csv' line 4"),
    ("cli-max-batch-threads", None, ["max-batch", "--threads", "100000"], "threads", "threads=100000"),
    ("cli-rounds-with-resolve", None, ["compare", "--rounds", "1", "--resolve", "0.05"], "--rounds",
     "--rounds 1 is not allowed with resolve/budget_s"),
    ("cli-profile-names-the-command", None, ["run", "--profile", "p5.nope"], "--profile", "tcbench profiles ("),
]
JOB_FIELDS = {f.name for f in dataclasses.fields(tc.JobSpec)}


def _cli_words(field: str, needle: str) -> tuple[str, str]:
    """A row's field and message as the CLI says them: ``--threads 0``, not the JobSpec's ``threads=0``."""
    if field not in JOB_FIELDS:
        return field, needle
    flag = {"warmup_steps": "--warmup"}.get(field, "--" + field.replace("_", "-"))
    return flag, needle.replace(f"{field}=", f"{flag} ")


@pytest.fixture(scope="session")
def paths(tmp_path_factory) -> dict[str, str]:
    """The bad dataset files and the local model folders the table names."""
    data = tmp_path_factory.mktemp("data")
    for name, content in FILES.items():
        (data / name).write_bytes(content)
    (data / "folder.csv").mkdir()
    return {"data": str(data), "models": str(_model_folders(tmp_path_factory.mktemp("models")))}


def _model_folders(root: Path) -> Path:
    """Tiny models saved by save_pretrained (no download): one good, the rest each wrong in one way."""
    import transformers

    def bert(**changes):
        return transformers.BertConfig(**{**dict(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1,
                                                 num_attention_heads=2, intermediate_size=32), **changes})

    for name, cfg in (("good", bert()), ("small-vocab", bert(vocab_size=1000)),
                      ("few-positions", bert(max_position_embeddings=64)), ("big-tokenizer", bert())):
        transformers.BertForSequenceClassification(cfg).save_pretrained(root / name)
    (root / "big-tokenizer" / "vocab.txt").write_text("".join(f"t{i}\n" for i in range(5000)))
    transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=VOCAB, n_embd=16, n_layer=1, n_head=2,
                                                         n_positions=32)).save_pretrained(root / "gpt2-short")
    roberta = transformers.RobertaConfig(**{**bert().to_dict(), "max_position_embeddings": 66, "pad_token_id": 1})
    transformers.RobertaForSequenceClassification(roberta).save_pretrained(root / "roberta")
    bert().save_pretrained(root / "no-weights")
    transformers.ViTConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=32).save_pretrained(root / "vit")
    (root / "no-config").mkdir()
    (root / "broken-config").mkdir()
    (root / "broken-config" / "config.json").write_text("{not json")
    return root


def _fill(value, paths: dict[str, str]):
    if isinstance(value, str):
        return value.format(**paths)
    if isinstance(value, list):
        return [_fill(v, paths) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, paths) for k, v in value.items()}
    return value


@pytest.mark.parametrize("kwargs, field, needle",
                         [pytest.param(k, f, n, id=i) for i, k, _, f, n in CASES if k is not None])
def test_the_api_refuses_by_name_before_any_process(kwargs, field, needle, paths, no_process, store):
    with pytest.raises(tc.SpecError) as e:
        tc.run(tc.JobSpec(**_fill(kwargs, paths)), store=store)
    msg = str(e.value)
    assert e.value.field == field and f"{field}=" in msg and e.value.allowed
    assert _fill(needle, paths) in msg
    assert store.runs().empty and store.comparisons().empty


@pytest.mark.parametrize("argv, field, needle",
                         [pytest.param(c, f, n, id=i) for i, _, c, f, n in CASES if c is not None])
def test_the_cli_prints_one_line_and_exits_2(argv, field, needle, paths, no_process, capsys, tmp_path,
                                              monkeypatch):
    db = tmp_path / "cli.db"
    monkeypatch.setenv("TCBENCH_DB", str(db))
    store = Store(db)   # the unknown ids are looked up in a store that exists (reading never creates one)
    assert main(_fill(argv, paths)) == 2
    cap = capsys.readouterr()
    assert cap.err.startswith("tcbench: ") and cap.err.count("\n") == 1, cap.err
    assert "Traceback" not in cap.out + cap.err
    flag, text = _cli_words(field, _fill(needle, paths))
    assert flag in cap.err and text in cap.err, cap.err
    assert f"{field}=" not in cap.err and "None" not in cap.err and "tcbench.profiles()" not in cap.err
    assert store.runs().empty and store.comparisons().empty


def test_the_table_is_large_and_its_guards_can_fail(paths, monkeypatch, store):
    """At least 40 bad inputs; a good spec does reach the process start the guard refuses, and stores a run."""
    assert sum(k is not None for _, k, _, _, _ in CASES) >= 40 and len({c[0] for c in CASES}) == len(CASES)
    monkeypatch.setattr(_runner, "_probe", lambda spec, store: {})
    monkeypatch.setattr(_runner.subprocess, "Popen", lambda *a, **k: (_ for _ in ()).throw(AssertionError("started")))
    with pytest.raises(AssertionError, match="started"):
        tc.run(tc.JobSpec(model=_fill("{models}/good", paths)), store=store)
    assert len(store.runs()) == 1


# -- what must keep working -----------------------------------------------------------------------------------
@pytest.fixture
def captured(monkeypatch):
    """Stop ``run`` where the job process would start and keep the spec it would have sent."""
    specs: list[tc.JobSpec] = []

    def execute(spec, result, *args):
        specs.append(spec)
        result.status, result.error = "failed", "stopped by the test before the job process"
    monkeypatch.setattr(_runner, "_execute", execute)
    return specs


def test_good_local_folders_and_files_pass(paths):
    models = paths["models"]
    assert check(tc.JobSpec(model=f"{models}/good")).model == f"{models}/good"
    assert check(tc.JobSpec(model=f"{models}/gpt2-short", seq_len=32)).seq_len == 32
    assert check(tc.JobSpec(model=f"{models}/roberta", seq_len=64)).seq_len == 64   # 66 minus the padding offset
    spec = check(tc.JobSpec(profile="ml.g5.2xlarge"))
    assert check(spec) is spec   # idempotent: run() checks again what compare() checked


def test_a_csv_with_a_bom_runs(tmp_path, captured, store):
    path = tmp_path / "excel.csv"
    path.write_bytes("\ufefftext,label\r\n".encode() + b"".join(b"review %d,%d\r\n" % (i, i % 3) for i in range(30)))
    tc.run(tc.JobSpec(dataset=str(path)), store=store)
    rows = _data.load_examples(captured[0].dataset) + _data.load_examples(captured[0].dataset, "eval")
    assert len(rows) == 30 and {r["label"] for r in rows} == {0, 1, 2}
    assert not any("\ufeff" in r["text"] for r in rows)


def test_a_label_sorted_file_holds_out_every_class(tmp_path):
    path = tmp_path / "sorted.jsonl"
    path.write_text("".join(json.dumps({"text": f"t{i}", "label": i // 40}) + "\n" for i in range(160)))
    spec = check(tc.JobSpec(dataset=str(path)))
    held = _data.load_examples(spec.dataset, "eval")
    assert sorted({e["label"] for e in held}) == [0, 1, 2, 3] and len(held) == 16


def test_relative_paths_are_resolved_against_the_callers_cwd(tmp_path, paths, captured, store, monkeypatch):
    """The job runs in its run folder: it must get absolute paths, found from where the caller stood."""
    import shutil

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "my.csv").write_text("text,label\n" + "".join(f"t{i},{i % 2}\n" for i in range(20)))
    shutil.copytree(Path(paths["models"]) / "good", tmp_path / "models" / "mine")
    monkeypatch.chdir(tmp_path)
    tc.run(tc.JobSpec(dataset="data/my.csv", model="./models/mine", seq_len=32), store=store)
    spec = captured[0]
    assert spec.dataset == str(tmp_path / "data" / "my.csv") and spec.model == str(tmp_path / "models" / "mine")
    assert json.loads(store.runs()["spec_json"].iloc[0])["dataset"] == spec.dataset   # stored as the job ran
    monkeypatch.chdir(Path(paths["data"]))   # somewhere else, as the job's own cwd is
    assert len(_data.load_examples(spec.dataset)) == 18 and check(spec) is spec


def test_a_profile_budget_applies_in_the_api_the_cli_and_compare(captured, store, monkeypatch, tmp_path, capsys):
    budget = tc.profile("ml.g5.2xlarge").memory_budget_gb
    tc.run(tc.JobSpec(profile="ml.g5.2xlarge"), store=store)
    tc.run(tc.JobSpec(profile="ml.g5.2xlarge", memory_budget_gb=2.0), store=store)   # an explicit budget wins
    tc.run(tc.JobSpec(), store=store)   # this machine: no budget
    monkeypatch.setenv("TCBENCH_DB", str(tmp_path / "cli.db"))
    assert main(["run", "--profile", "g5.2xlarge", "--steps", "3", "--warmup", "1"]) == 1   # the stub "fails"
    tc.compare(tc.JobSpec(profile="ml.g5.2xlarge"), backends=["inductor"], rounds=1, store=store)
    assert [s.memory_budget_gb for s in captured] == [budget, 2.0, None, budget, budget, budget]
    assert captured[3].profile == "ml.g5.2xlarge"   # the catalog's spelling
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("entry", ["compare", "find_max_batch", "retune_lr"])
def test_sessions_refuse_before_storing_anything(entry, paths, no_process, store):
    spec = tc.JobSpec(dataset=_fill("{data}/gap.csv", paths))
    call = {"compare": lambda: tc.compare(spec, store=store),
            "find_max_batch": lambda: tc.find_max_batch(spec, backends=["eager"], store=store),
            "retune_lr": lambda: tc.retune_lr(spec, new_batch_size=16, n_trials=2, store=store)}[entry]
    with pytest.raises(tc.SpecError, match="gap.csv' line 4"):
        call()
    assert store.runs().empty and store.comparisons().empty
