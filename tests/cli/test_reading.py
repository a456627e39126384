"""Small truths the CLI tells (issue 25, part 4): reading a store that does not exist is a named error and creates
nothing (only writing creates a store), counts and ids below 1 are refused, and a refused tuning command leaves no
database behind. Each CLI case: exit 2, one line on stderr, nothing on disk."""

from __future__ import annotations

from pathlib import Path

import pytest

import tcbench as tc
from tcbench.store.api import StoreError
from tcbench.cli.app import main
from tcbench.store.api import Store, StoreMissing


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _one_line(capsys) -> str:
    cap = capsys.readouterr()
    assert cap.err.startswith("tcbench: ") and cap.err.count("\n") == 1, cap.err
    assert "Traceback" not in cap.out + cap.err
    return cap.err


def _argv(argv: list[str], tmp_path: Path) -> list[str]:
    return [a.replace("{tmp}", str(tmp_path)) for a in argv]


@pytest.fixture
def missing(tmp_path, monkeypatch) -> Path:
    """TCBENCH_DB in a folder that does not exist (like /nonexistent/x.db); the test's folder starts empty."""
    db = tmp_path / "nonexistent" / "x.db"
    monkeypatch.setenv("TCBENCH_DB", str(db))
    return db


@pytest.mark.parametrize("argv", [["runs"], ["comparisons"], ["steps", "1"], ["report", "1", "--out", "{tmp}/r.html"]],
                         ids=lambda a: a[0])
def test_reading_a_missing_store_is_a_named_error_that_creates_nothing(argv, missing, tmp_path, capsys):
    assert main(_argv(argv, tmp_path)) == 2
    err = _one_line(capsys)
    assert f"the store {missing} does not exist" in err and "tcbench run" in err and "tcbench compare" in err
    assert _files(tmp_path) == []


def test_reading_the_default_store_creates_no_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("TCBENCH_DB", raising=False)
    monkeypatch.setenv("TCBENCH_HOME", str(tmp_path / "home"))
    assert main(["runs"]) == 2
    assert f"the store {tmp_path / 'home' / 'tcbench.db'} does not exist" in _one_line(capsys)
    assert _files(tmp_path) == []


READS = {"runs": tc.runs, "comparisons": tc.comparisons, "steps": lambda: tc.steps(1), "get_run": lambda: tc.get_run(1)}


@pytest.mark.parametrize("name", list(READS))
def test_the_history_functions_name_a_missing_store_and_create_nothing(name, missing, tmp_path):
    """Store's own ways to open for reading: tests/store/test_store.py."""
    with pytest.raises(StoreMissing, match=f"the store {missing} does not exist"):
        READS[name]()
    assert _files(tmp_path) == []


def test_only_writing_creates_the_store_then_reading_works(missing, capsys):
    with pytest.raises(StoreError, match="its folder .*nonexistent does not exist"):
        Store()   # a folder outside TCBENCH_HOME that is not there: a typo, never a second history
    assert not missing.parent.exists()
    missing.parent.mkdir()
    Store()   # what every command that runs jobs opens first
    assert missing.is_file()
    assert tc.runs().empty and Store(create=False).comparisons().empty
    assert main(["runs"]) == 0 and "(none)" in capsys.readouterr().out


BELOW_1 = [  # argv, the option or argument named, the value named
    (["runs", "--last", "-1"], "--last", "'-1'"),
    (["runs", "--last", "0"], "--last", "'0'"),
    (["comparisons", "--last", "-5"], "--last", "'-5'"),
    (["comparisons", "--last", "two"], "--last", "'two'"),
    (["steps", "-1"], "run_id", "'-1'"),
    (["report", "0"], "comparison_id", "'0'"),
    (["tune-worker", "s", "--storage", "postgresql://u@127.0.0.1:1/db", "--workers", "0"], "--workers", "'0'"),
    (["retune-lr", "--new-batch-size", "16", "--workers", "-2"], "--workers", "'-2'"),
]


@pytest.mark.parametrize("argv, flag, value", [pytest.param(*case, id=" ".join(case[0][:3])) for case in BELOW_1])
def test_counts_and_ids_below_1_are_refused(argv, flag, value, missing, tmp_path, capsys):
    assert main(argv) == 2
    err = _one_line(capsys)
    assert f"argument {flag}: {value} is not allowed; allowed: a whole number >= 1" in err, err
    assert _files(tmp_path) == []


@pytest.mark.parametrize("argv", [
    ["tune-worker", "s", "--storage", "sqlite:///{tmp}/study.db"],
    ["tune-worker", "s", "--storage", "{tmp}/study.db"],
    ["tune-worker", "s", "--storage", "store"],
    ["retune-lr", "--new-batch-size", "16", "--workers", "2", "--storage", "sqlite:///{tmp}/study.db"],
    ["retune-lr", "--new-batch-size", "16", "--workers", "2"],
], ids=lambda a: " ".join(a[:1] + a[-2:]))
def test_a_refused_tuning_command_creates_no_database(argv, missing, tmp_path, capsys):
    assert main(_argv(argv, tmp_path)) == 2
    err = _one_line(capsys)
    assert "--storage" in err and "allowed: a PostgreSQL URL" in err
    assert _files(tmp_path) == []
