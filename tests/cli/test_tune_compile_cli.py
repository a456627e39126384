"""tcbench tune-compile: the answer and the trials on the terminal, --space parsed (booleans included), a bad
--space one line and exit 2, --json the whole result. Against the fake job of tests/tuning/compile_search/test_compile_search.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tcbench.cli.app import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tuning" / "compile_search"))
from test_compile_search import fake_run  # noqa: E402


@pytest.fixture
def calls(monkeypatch):
    import tcbench.comparison.running
    import tcbench.host.env
    import tcbench.runner.process

    out: list = []
    monkeypatch.setattr(tcbench.runner.process, "run", fake_run(out))
    monkeypatch.setattr(tcbench.comparison.running, "run", fake_run(out))
    monkeypatch.setattr(tcbench.host.env, "cpu_flags", lambda: frozenset({"avx2"}))
    return out


def test_tune_compile_prints_the_trials_and_the_answer(calls, capsys):
    code = main(["tune-compile", "--steps", "20", "--warmup", "2", "--dropout", "0", "--trials", "3",
                 "--space", "compile_mode=default", "--space", "cpp_wrapper=true,false", "--budget-s", "600"])
    out = capsys.readouterr().out
    assert code == 0
    assert "inductor · default" in out and "against native: faster" in out and "search: n_trials=3" in out
    jobs = [s for s, _ in calls if s.backend == "inductor"]
    assert {s.compile_mode for s in jobs} == {"default"} and {s.cpp_wrapper for s in jobs} <= {True, False}


def test_json_is_the_whole_result(calls, capsys):
    assert main(["tune-compile", "--steps", "20", "--warmup", "2", "--trials", "2", "--no-confirm", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["best_label"] and len(data["trials"]) == 2 and data["confirmation_id"] is None


@pytest.mark.parametrize("space, words", [("mode=default", "FIELD one of compile_mode"),
                                          ("cpp_wrapper=maybe", "allowed for cpp_wrapper: true, false"),
                                          ("precision", "FIELD=V1,V2")])
def test_a_bad_space_is_one_line_and_exit_2(calls, capsys, space, words):
    code = main(["tune-compile", "--space", space])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and words in err[0] and not calls
