"""What a careless user tried (issue 36): each bad input is refused before anything runs, and nothing of theirs is
damaged.

One table of command lines. Each is run against a store of the test's own (``TCBENCH_DB``), with job processes and
the peak-FLOPs probe made to fail the test. Every case must exit 2 with one line that names the flag. No job
process may start, no row may be written, and no file in the test's folder may change, except the test's own
store. The cases with someone else's file (a database that is not tcbench's, a file where a folder should be) also
check that file byte for byte.
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from tcbench.cli.app import main
from tcbench.store.api import Store

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "train_loop.py")

# id, argv ({tmp}: the test's folder, {db}: its store), the flag or word the message names, text in the message;
# an optional fifth item: TCBENCH_DB for the case (default {db})
CASES = [
    # 1. a narrowed or malformed compile search
    ("space-twice", ["tune-compile", "--space", "precision=bf16", "--space", "precision=fp32"], "--space",
     "--space precision is given twice (bf16 and fp32)"),
    ("space-mode-twice", ["tune-compile", "--space", "compile_mode=default", "--space", "compile_mode=max-autotune"],
     "--space", "each field once"),
    ("space-unknown-field", ["tune-compile", "--space", "speed=fast"], "--space", "'speed=fast' is not allowed"),
    ("space-no-choices", ["tune-compile", "--space", "precision="], "--space", "'precision=' is not allowed"),
    ("space-bad-bool", ["tune-compile", "--space", "cpp_wrapper=maybe"], "--space", "allowed for cpp_wrapper: true"),
    ("space-bad-choice", ["tune-compile", "--space", "precision=fp8"], "--space", "--space precision contains 'fp8'"),
    ("no-confirm-with-budget", ["tune-compile", "--no-confirm", "--confirm-budget-s", "30"], "--confirm-budget-s",
     "no confirmation runs"),
    ("confirm-budget-over-budget", ["tune-compile", "--budget-s", "60", "--confirm-budget-s", "90"],
     "--confirm-budget-s", "less than"),
    ("empty-study-name", ["tune-compile", "--study-name", ""], "--study-name", "non-empty name"),
    ("blank-study-name", ["tune-compile", "--study-name", "   "], "--study-name", "non-empty name"),
    ("tune-budget-zero", ["tune-compile", "--budget-s", "0"], "--budget-s", "--budget-s 0"),
    ("tune-budget-negative", ["tune-compile", "--budget-s", "-5"], "--budget-s", "--budget-s -5"),
    ("tune-batch-too-big", ["tune-compile", "--batch-size", "100000"], "--batch-size", "cannot fit gpt2 (tiny)"),
    ("maxbatch-empty-study", ["max-batch", "--study-name", ""], "--study-name", "non-empty name"),
    ("maxbatch-start-too-big", ["max-batch", "--batch-size", "100000"], "--batch-size", "the largest that might fit"),
    ("retune-empty-study", ["retune-lr", "--new-batch-size", "16", "--study-name", ""], "--study-name",
     "non-empty name"),
    ("retune-new-batch-too-big", ["retune-lr", "--new-batch-size", "10000000"], "--new-batch-size",
     "cannot fit gpt2 (tiny)"),
    ("retune-batch-too-big", ["retune-lr", "--new-batch-size", "16", "--batch-size", "100000"], "--batch-size",
     "cannot fit"),
    # 2. what can be known before the first process: the spec against the machine, flags against each other
    ("batch-1e5", ["compare", "--batch-size", "100000"], "--batch-size", "needs at least"),
    ("batch-1e11", ["compare", "--batch-size", "99999999999"], "--batch-size", "the largest that might fit"),
    ("run-batch-1e5", ["run", "--batch-size", "100000"], "--batch-size", "this machine's"),
    ("run-batch-on-a-profile", ["run", "--batch-size", "100000", "--profile", "ml.g5.xlarge"], "--batch-size",
     "the memory budget of 24 GiB"),
    ("noise-floor-batch", ["noise-floor", "--batch-size", "100000"], "--batch-size", "needs at least"),
    ("long-seq-huge-batch", ["run", "--batch-size", "30000", "--seq-len", "128"], "--batch-size", "seq-len 128"),
    ("run-eager-cpp-wrapper", ["run", "--backend", "eager", "--cpp-wrapper"], "--cpp-wrapper", "an Inductor setting"),
    ("run-eager-mode", ["run", "--backend", "eager", "--compile-mode", "max-autotune"], "--compile-mode",
     "no job here runs Inductor"),
    ("run-eager-scope", ["run", "--backend", "eager", "--compile-scope", "blocks"], "--compile-scope", "blocks"),
    ("run-eager-compile-opt", ["run", "--backend", "eager", "--compile-optimizer"], "--compile-optimizer",
     "an Inductor setting"),
    ("run-eager-all", ["run", "--backend", "eager", "--cpp-wrapper", "--compile-scope", "blocks", "--compile-mode",
                       "max-autotune"], "--cpp-wrapper", "Inductor settings"),
    ("run-xla-artifacts", ["run", "--backend", "xla", "--cache", "artifacts"], "--cache", "artifacts"),
    ("compare-xla-only-mode", ["compare", "--backends", "eager,xla", "--compile-mode", "max-autotune"],
     "--compile-mode", "backends: xla"),
    ("compare-aa-scope", ["compare", "--backends", "eager,eager", "--compile-scope", "step"], "--compile-scope",
     "an Inductor setting"),
    ("noise-floor-cpp", ["noise-floor", "--cpp-wrapper"], "--cpp-wrapper", "an Inductor setting"),
    ("max-rounds-beside-rounds", ["compare", "--rounds", "3", "--max-rounds", "10"], "--max-rounds",
     "exactly 3 rounds run"),
    ("max-rounds-1e8", ["compare", "--max-rounds", "100000000"], "--max-rounds", "2..1000"),
    ("max-rounds-1", ["compare", "--max-rounds", "1"], "--max-rounds", "2..1000"),
    ("rounds-1e5", ["compare", "--rounds", "100000"], "--rounds", "1..1000"),
    ("noise-floor-rounds-1e5", ["noise-floor", "--rounds", "100000"], "--rounds", "1..1000"),
    ("stall-1e300", ["compare", "--stall-s", "1e300"], "--stall-s", "604800"),
    ("run-stall-1e300", ["run", "--stall-s", "1e300"], "--stall-s", "604800"),
    ("timeout-1e12", ["run", "--timeout-s", "1e12"], "--timeout-s", "604800"),
    ("budget-over-a-week", ["compare", "--budget-s", "1e9"], "--budget-s", "at most 604800"),
    ("resolve-2", ["compare", "--resolve", "2"], "--resolve", "at most 1"),
    # every output path, before a job starts
    ("report-and-json-same", ["compare", "--report", "{tmp}/same.html", "--json", "{tmp}/same.html"], "--json",
     "--report names the same file"),
    ("report-and-json-same-relative", ["compare", "--report", "{tmp}/./same.json", "--json", "{tmp}/same.json"],
     "--json", "names the same file"),
    ("report-under-a-file", ["compare", "--report", "{tmp}/file.db/r.html"], "--report", "is a file, not a folder"),
    ("json-under-a-file", ["compare", "--json", "{tmp}/file.db/out.json"], "--json", "is a file, not a folder"),
    ("report-missing-folder", ["compare", "--report", "{tmp}/nowhere/r.html"], "--report", "does not exist"),
    ("json-is-a-folder", ["compare", "--json", "{tmp}"], "--json", "it is a folder"),
    ("json-empty", ["compare", "--json", ""], "--json", "an empty path"),
    ("report-is-the-store", ["compare", "--report", "{db}"], "--report", "the store"),
    ("json-is-the-store", ["compare", "--json", "{db}"], "--json", "the store"),
    ("script-same-outputs", ["compare-script", EXAMPLE, "--report", "{tmp}/x.html", "--json", "{tmp}/x.html"],
     "--json", "names the same file"),
    ("report-out-under-a-file", ["report", "1", "--out", "{tmp}/file.db/r.html"], "--out", "is a file, not a folder"),
    ("report-out-missing", ["report", "1", "--out", "{tmp}/nowhere/r.html"], "--out", "does not exist"),
    ("report-out-the-store", ["report", "1", "--out", "{db}"], "--out", "the store"),
    # 3. files that are not ours
    ("their-db-comparisons", ["comparisons"], "theirs.db", "is not a tcbench store", "{tmp}/theirs.db"),
    ("their-db-runs", ["runs"], "theirs.db", "it holds other tables: orders", "{tmp}/theirs.db"),
    ("their-db-show", ["show", "1"], "theirs.db", "is not a tcbench store", "{tmp}/theirs.db"),
    ("their-db-compare", ["compare"], "theirs.db", "tcbench leaves it as it is", "{tmp}/theirs.db"),
    ("their-db-run", ["run"], "theirs.db", "is not a tcbench store", "{tmp}/theirs.db"),
    ("not-a-database", ["runs"], "notes.db", "not an SQLite database", "{tmp}/notes.db"),
    ("not-a-database-compare", ["compare"], "notes.db", "not an SQLite database", "{tmp}/notes.db"),
    ("empty-file-runs", ["runs"], "empty.db", "holds nothing yet", "{tmp}/empty.db"),
    ("empty-file-comparisons", ["comparisons"], "empty.db", "holds nothing yet", "{tmp}/empty.db"),
    ("empty-file-show", ["show", "1"], "empty.db", "holds nothing yet", "sqlite:///{tmp}/empty.db"),
    ("db-folder-typo", ["compare"], "nowhere", "does not exist", "{tmp}/nowhere/x.db"),
    ("db-folder-typo-run", ["run"], "nowhere", "check TCBENCH_DB for a typo", "{tmp}/nowhere/x.db"),
    ("db-under-a-file", ["compare"], "file.db", "is a file, not a folder", "{tmp}/file.db/x.db"),
    # 3b. an output file over the store (however TCBENCH_DB names it), over another database, or over a user's file
    ("report-over-the-store", ["report", "1", "--out", "{db}"], "--out", "that is the store"),
    ("report-over-the-store-by-url", ["report", "1", "--out", "{db}"], "--out", "that is the store",
     "sqlite:///{db}"),
    ("report-over-the-store-wal", ["report", "1", "--out", "{db}-wal"], "--out", "that is the store"),
    ("report-over-their-database", ["report", "1", "--out", "{tmp}/theirs.db"], "--out", "is a SQLite database"),
    ("report-over-their-notes", ["report", "1", "--out", "{tmp}/notes.db"], "--out", "--force to replace it"),
    ("compare-report-over-the-store", ["compare", "--report", "{db}"], "--report", "that is the store"),
    ("compare-json-over-the-store", ["compare", "--json", "{db}"], "--json", "that is the store", "sqlite:///{db}"),
    ("compare-json-over-their-notes", ["compare", "--json", "{tmp}/notes.db"], "--json", "--force to replace it"),
    ("script-report-over-the-store", ["compare-script", EXAMPLE, "--report", "{db}"], "--report", "that is the store"),
    ("quality-report-over-the-store", ["time-to-quality", "--report", "{db}"], "--report", "that is the store",
     "sqlite:///{db}"),
    ("quality-report-over-their-database", ["time-to-quality", "--report", "{tmp}/theirs.db"], "--report",
     "is a SQLite database"),
    # 3c. a study's settings that defeat it, and a launcher that would be ignored
    ("quality-seeds-huge", ["time-to-quality", "--seeds", "99999999999999999999"], "--seeds", "3..100"),
    ("quality-last-seed-past-the-bound", ["time-to-quality", "--seed", "4294967295"], "--seed", "0..4294967291"),
    ("quality-big-batch-below", ["time-to-quality", "--batch-size", "4", "--big-batch", "2"], "--big-batch",
     "above the reference's --batch-size 4"),
    ("quality-big-batch-same", ["time-to-quality", "--batch-size", "4", "--big-batch", "4"], "--big-batch",
     "above the reference's --batch-size 4"),
    ("quality-max-batch-one", ["time-to-quality", "--batch-size", "4", "--max-batch", "1"], "--max-batch",
     "above the reference's --batch-size 4"),
    ("launcher-bogus", ["run"], "TCBENCH_LAUNCHER", "'fork', 'shared', 'spawn'", None, {"TCBENCH_LAUNCHER": "bogus"}),
    ("launcher-empty-compare", ["compare"], "TCBENCH_LAUNCHER", "'fork', 'shared', 'spawn'", None,
     {"TCBENCH_LAUNCHER": ""}),
    ("blocks-on-albert", ["run", "--backend", "inductor", "--model", "albert-base-v2", "--compile-scope", "blocks"],
     "--compile-scope", "ALBERT shares one layer across its depth"),
    ("blocks-on-albert-compare", ["compare", "--model", "albert-base-v2", "--compile-scope", "blocks"],
     "--compile-scope", "allowed: 'model' or 'step'"),
    ("space-blocks-on-albert", ["tune-compile", "--model", "albert-base-v2", "--space", "compile_scope=model,blocks"],
     "--space", "ALBERT shares one layer across its depth"),
    ("space-only-blocks-on-albert", ["tune-compile", "--model", "albert-base-v2", "--space", "compile_scope=blocks"],
     "--space", "allowed: 'model' or 'step'"),
    ("ttq-big-batch-huge", ["time-to-quality", "--big-batch", "1000000000"], "--big-batch",
     "--big-batch 1000000000 cannot fit gpt2 (tiny)"),
    ("ttq-horizon-zero", ["time-to-quality", "--horizon-steps", "0"], "--horizon-steps", "whole number >= 1"),
    ("sampler-seed-negative", ["tune-compile", "--sampler-seed", "-1"], "--sampler-seed", "0..4294967295"),
    ("sampler-seed-huge", ["tune-compile", "--sampler-seed", "4294967296"], "--sampler-seed", "0..4294967295"),
    # 4. messages that mislead
    ("abbreviated-target", ["time-to-quality", "--target", "5"], "--target", "unrecognized arguments"),
    ("abbreviated-no-premise", ["time-to-quality", "--no-premise"], "--no-premise", "unrecognized arguments"),
    ("abbreviated-budget", ["compare", "--budget", "30"], "--budget", "unrecognized arguments"),
    ("lr-negative-exponent", ["check-lr", "--lr", "-1e-3"], "--lr", "it must be a finite number > 0"),
    ("lr-negative-compare", ["compare", "--lr", "-2E-4"], "--lr", "it must be a finite number > 0"),
    ("dashboard-mysql", ["dashboard", "--storage", "mysql://u@127.0.0.1:1/db"], "--storage",
     "the URL of a database that holds studies"),
    ("dashboard-not-a-url", ["dashboard", "--storage", "not a url"], "--storage", "is not allowed"),
]
THEIR_SCHEMA = "CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT); INSERT INTO orders (item) VALUES ('tea');"


def _fill(value: str, tmp: Path, db: Path) -> str:
    return value.replace("{tmp}", str(tmp)).replace("{db}", str(db))


def _snapshot(folder: Path, skip: set[Path]) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*"))
            if p.is_file() and not any(p == s or p.name.startswith(s.name + "-") for s in skip)}


@pytest.mark.parametrize("case", [pytest.param(c, id=c[0]) for c in CASES])
def test_a_careless_input_is_refused_before_anything_runs_and_damages_nothing(case, tmp_path, monkeypatch, capsys,
                                                                              no_process):
    _, argv, named, text, *env = case
    for name, value in (env[1] if len(env) > 1 else {}).items():
        monkeypatch.setenv(name, value)
    env = [e for e in env[:1] if e is not None]
    ours = tmp_path / "cli.db"
    store = Store(ours)
    (tmp_path / "file.db").write_text("a file where a folder was meant\n")
    (tmp_path / "notes.db").write_text("my notes, not a database\n")
    (tmp_path / "empty.db").write_bytes(b"")   # a file the user made for the store: a reader leaves it empty
    con = sqlite3.connect(tmp_path / "theirs.db")
    con.executescript(THEIR_SCHEMA)
    con.close()
    db = _fill(env[0], tmp_path, ours) if env else str(ours)   # a URL stays as it is written
    monkeypatch.setenv("TCBENCH_DB", db)
    before = _snapshot(tmp_path, {ours})
    assert main([_fill(a, tmp_path, ours) for a in argv]) == 2
    cap = capsys.readouterr()
    assert cap.err.startswith("tcbench: ") and cap.err.count("\n") == 1 and "Traceback" not in cap.err, cap.err
    assert named in cap.err and _fill(text, tmp_path, ours) in cap.err, cap.err
    assert store.runs().empty and store.comparisons().empty
    assert _snapshot(tmp_path, {ours}) == before   # nothing of theirs (or anything else here) changed or was added
    assert not (tmp_path / "nowhere").exists()


def test_the_table_holds_at_least_sixty_cases_each_once():
    assert len(CASES) >= 60 and len({c[0] for c in CASES}) == len(CASES)


# -- the same through the API ---------------------------------------------------------------------------------
def test_the_api_entries_refuse_the_same_before_anything_runs(tmp_path, no_process):
    import tcbench as tc
    from tcbench.core.errors import StoreError

    store = Store(tmp_path / "t.db")
    spec = tc.JobSpec()
    refusals = [
        (lambda: tc.tune_compile(spec, space="precision=bf16", store=store), "it must be a mapping"),
        (lambda: tc.tune_compile(spec, space=[("precision", ["bf16"])], store=store), "it must be a mapping"),
        (lambda: tc.tune_compile(spec, confirm=False, confirm_budget_s=30, store=store), "confirm=False"),
        (lambda: tc.tune_compile(spec, study_name="", store=store), "study_name=''"),
        (lambda: tc.find_max_batch(spec, study_name=" ", store=store), "study_name=' '"),
        (lambda: tc.retune_lr(spec, new_batch_size=10**7, store=store), "new_batch_size=10000000 cannot fit"),
        (lambda: tc.compare(spec, rounds=3, max_rounds=10, store=store), "max_rounds=10 is not allowed with rounds=3"),
        (lambda: tc.compare(spec, rounds=10**6, store=store), "1..1000"),
        (lambda: tc.run(tc.JobSpec(batch_size=10**5), store=store), "batch_size=100000 cannot fit"),
        (lambda: tc.JobSpec(stall_s=1e300), "stall_s=1e+300"),
        (lambda: tc.JobSpec(timeout_s=1e12), "timeout_s=1000000000000.0"),
        # wrong types and settings that defeat a study, refused where they are written
        (lambda: tc.tune_compile(spec, seed=-1, store=store), "seed=-1"),
        (lambda: tc.QualityOptions(seeds=-4), "seeds=-4"),
        (lambda: tc.QualityOptions(seeds=10**20), "3..100"),
        (lambda: tc.load_quality(1.5, store=store), "comparison_id=1.5"),
        (lambda: tc.load_quality(True, store=store), "comparison_id=True"),
        (lambda: tc.load_quality("abc", store=store), "comparison_id='abc'"),
        (lambda: tc.load_comparison(0, store=store), "comparison_id=0"),
        (lambda: tc.check_lr("gpt2", store=store), "spec='gpt2'"),
        (lambda: tc.time_to_quality({"model": "gpt2"}, seeds=3, store=store), "spec={'model': 'gpt2'}"),
        (lambda: tc.time_to_quality(spec, "inductor", store=store), "candidates='inductor'"),
        (lambda: tc.time_to_quality(spec, [], store=store), "at least one candidate"),
        (lambda: tc.time_to_quality(spec, [tc.Candidate("", spec.replace(backend="inductor"))], store=store),
         "a non-empty label"),
        (lambda: tc.time_to_quality(spec, [tc.Candidate("bert", tc.JobSpec(model="bert-base-cased"))], store=store),
         "'bert' has model='bert-base-cased' where the reference has 'gpt2'"),
        (lambda: tc.time_to_quality(spec, [tc.Candidate("short", spec.replace(seq_len=32))], store=store),
         "'short' has seq_len=32"),
        (lambda: tc.time_to_quality(spec.replace(batch_size=4), big_batch=2, store=store), "big_batch=2"),
        (lambda: tc.compare_configs(spec, {"other": tc.JobSpec(model="bert-base-cased", backend="inductor")},
                                    store=store), "'other' has model='bert-base-cased'"),
        (lambda: tc.compare_configs(spec, {"longer": spec.replace(seq_len=128, backend="inductor")}, store=store),
         "'longer' has seq_len=128"),
    ]
    for call, text in refusals:
        with pytest.raises(ValueError, match=None) as err:
            call()
        assert text in str(err.value), (text, str(err.value))
    assert store.runs().empty and store.comparisons().empty
    con = sqlite3.connect(tmp_path / "theirs.db")
    con.executescript(THEIR_SCHEMA)
    con.close()
    before = (tmp_path / "theirs.db").read_bytes()
    for how in ({}, {"create": False}, {"readonly": True}):
        with pytest.raises(StoreError, match="is not a tcbench store"):
            Store(tmp_path / "theirs.db", **how)
    assert (tmp_path / "theirs.db").read_bytes() == before


@pytest.mark.parametrize("named", ["path", "sqlite:///path", "sqlite+pysqlite:///path"])
def test_no_writer_of_a_report_writes_over_the_store(named, tmp_path, monkeypatch):
    """A report written from the API, to the path of the store however TCBENCH_DB names it (or of any SQLite file),
    is refused before anything is written: the store keeps its runs byte for byte."""
    import tcbench as tc
    from tcbench.tuning.quality import view as quality_view

    db = tmp_path / "s.db"
    monkeypatch.setenv("TCBENCH_DB", named.replace("path", str(db)))
    store = Store()
    assert Path(store.path).resolve() == db.resolve()
    other = tmp_path / "other.db"
    Store(other)
    before = {p: p.read_bytes() for p in (db, other)}
    cmp = tc.Comparison(spec=tc.JobSpec(), backends=["eager", "inductor"], rounds=1, kind="compare")
    for path, text in ((db, "that is the store"), (other, "is a SQLite database")):
        for write in (lambda: cmp.to_html(str(path)), lambda: quality_view.to_html(object(), path)):
            with pytest.raises(ValueError, match=text):
                write()
    with pytest.raises(ValueError, match="does not exist"):
        cmp.to_html(str(tmp_path / "missing" / "r.html"))
    assert {p: p.read_bytes() for p in (db, other)} == before
    assert not (tmp_path / "plotly.min.js").exists()


def test_a_report_tcbench_wrote_is_replaced_and_a_users_file_only_with_force(tmp_path, monkeypatch, capsys):
    """Rerunning ``report --out r.html`` replaces the report it wrote; a file of the user's needs ``--force``."""
    from tcbench.cli.common import check_writable
    from tcbench.host.paths import GENERATOR_META

    ours, theirs = tmp_path / "r.html", tmp_path / "notes.txt"
    ours.write_text(f"<!doctype html><html><head>{GENERATOR_META}</head></html>")
    theirs.write_text("my notes")
    check_writable(("--out", str(ours)))
    with pytest.raises(ValueError, match="--out .*notes.txt: the file exists and tcbench did not write it"):
        check_writable(("--out", str(theirs)))
    check_writable(("--out", str(theirs)), force=True)
    assert theirs.read_text() == "my notes"   # checking writes nothing


def test_a_narrowed_compile_space_starts_inside_itself():
    """``--space precision=bf16`` left the default (fp32) out, and the search's first trial was the default: Optuna
    refused it after the native job had run. The first trial is now the default where the space holds it."""
    from tcbench.tuning.compile_search.space import CompileConfig, first_in

    space = {"compile_mode": ("default", "max-autotune-no-cudagraphs"), "compile_scope": ("model", "step"),
             "compile_optimizer": (True, False), "precision": ("fp32", "bf16"), "cpp_wrapper": (False, True)}
    default = CompileConfig()
    assert first_in(space, default) == default
    narrowed = {**space, "precision": ("bf16",), "compile_mode": ("max-autotune-no-cudagraphs",)}
    assert first_in(narrowed, default) == CompileConfig(compile_mode="max-autotune-no-cudagraphs", precision="bf16")


def test_refusing_needs_no_statistics_library():
    """A refusal comes in under a second (0.7–0.9 s measured on 2 cores): the command line and the checks import no
    scipy.stats (~0.7 s), which only an interval needs."""
    import subprocess
    import sys

    code = ("import sys; from tcbench.cli.app import main; main(['compare', '--batch-size', '100000']); "
            "print('scipy.stats' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False" and "--batch-size 100000 cannot fit" in out.stderr, out
