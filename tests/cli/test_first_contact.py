"""What a newcomer meets first (issue 26, items 3 and 4): help that shows every default, grouped, with a description
and an example, and only the options a command uses; errors in the command line's words; stored verdicts back in
the terminal (``show``, ``comparisons``); ``profiles`` within 120 columns; the report's plotly.js flags.

The stored comparisons are built from hand-made step records (no training job runs)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re

import pytest

import tcbench as tc
from tcbench.cli import common
from tcbench.cli.app import build_parser, main
from tcbench.comparison import DEFAULT_BUDGET_S, DEFAULT_RESOLVE, Comparison
from tcbench.core.results import JobResult, StepRecord, standing_for
from tcbench.core.spec import BACKENDS
from tcbench.measure.metrics import job_figures
from tcbench.store.api import Store

SPEC = dict(steps=12, warmup_steps=2, seq_len=32)


@pytest.fixture(autouse=True)
def _own_store(tmp_path, monkeypatch):
    monkeypatch.setenv("TCBENCH_DB", str(tmp_path / "cli.db"))
    Store()


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _help(*argv: str, capsys) -> str:
    assert main([*argv, "--help"]) == 0
    return capsys.readouterr().out


# -- help --------------------------------------------------------------------------------------------------------
def test_compare_help_shows_every_default_in_groups_with_an_example(capsys):
    text = re.sub(r"\s+", " ", _help("compare", capsys=capsys))
    for title in ("model:", "training:", "compiler:", "measurement:", "data parallel:", "storage and output:"):
        assert title in text
    defaults = {f.name: f.default for f in dataclasses.fields(tc.JobSpec)}
    for name in ("model", "size", "batch_size", "seq_len", "steps", "lr", "threads", "warmup_steps"):
        assert re.search(rf"{common.flag(name)} \S+ .*?\(default: {re.escape(str(defaults[name]))}\)", text), name
    assert f"(default: adaptive, until ±{DEFAULT_RESOLVE * 100:g} % or {DEFAULT_BUDGET_S:g} s)" in text
    assert "(default: the architecture's own)" in text and "None" not in text
    assert "example: tcbench compare" in text and "alternating rounds" in text


def test_every_command_has_a_description_an_example_and_says_each_default():
    for name, p in _subparsers().items():
        assert p.description and p.epilog.startswith("example:\n  tcbench "), name
        formatter = p._get_formatter()
        for action in p._actions:
            if not action.option_strings or action.default in (False, argparse.SUPPRESS) or action.required:
                continue
            if action.default is None and any(action in g._group_actions for g in p._mutually_exclusive_groups
                                              if g.required):
                continue   # one of a required pair (--new-batch-size / --new-nproc)
            assert "default" in formatter._get_help_string(action), f"{name} {action.option_strings[0]}"


def test_each_command_offers_only_the_options_it_uses():
    parsers = _subparsers()
    options = {name: {o for a in p._actions for o in a.option_strings} for name, p in parsers.items()}
    multi_node = {"--nnodes", "--node-rank", "--rdzv-endpoint"}
    for name in ("noise-floor", "max-batch", "retune-lr", "noise-scale", "predict-lr", "scaling", "compare-script"):
        assert not options[name] & multi_node, name
    assert multi_node <= options["compare"] and multi_node <= options["run"]
    assert "--nproc" not in options["scaling"]   # --nprocs names them
    for name in ("noise-scale", "predict-lr"):   # always an eager job
        assert not options[name] & {"--compile-mode", "--cache", "--debug"}, name
    assert not options["compare-script"] & {"--model", "--lr", "--dataset", "--nproc"}
    for name in ("runs", "comparisons", "show", "profiles", "models"):
        assert not options[name] & {"--model", "--threads", "--steps"}, name


def test_every_job_option_is_in_one_group():
    grouped = [name for names in common.GROUPS.values() for name in names]
    assert sorted(grouped) == sorted(f.name for f in common.job_fields())


def test_the_help_reads_defaults_from_jobspec(monkeypatch, capsys):
    fields = {f.name: f for f in dataclasses.fields(tc.JobSpec)}
    monkeypatch.setattr(fields["steps"], "default", 77)
    assert "(default: 77)" in _help("run", capsys=capsys)


# -- CLI words ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, said, not_said", [
    (["run", "--threads", "0"], "--threads 0 is not allowed", "threads="),
    (["run", "--warmup", "12", "--steps", "12"], "--steps 12 must be greater than --warmup 12", "warmup_steps="),
    (["run", "--profile", "p5.nope"], "tcbench profiles", "tcbench.profiles()"),
    (["compare", "--rounds", "1", "--resolve", "0.05"], "--rounds 1", "rounds="),
])
def test_errors_use_the_command_lines_words(argv, said, not_said, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("tcbench: ") and err.count("\n") == 1 and said in err and not_said not in err, err
    assert "None" not in err


def test_cli_words_renames_only_the_commands_options():
    words = {"threads": "--threads", "budget_s": "--budget-s"}
    text = "threads=0 is not allowed; it must be None or a whole number; memory_budget_gb=0; budget_s=3"
    assert common.cli_words(text, words) == ("--threads 0 is not allowed; it must be omitted or a whole number; "
                                             "memory_budget_gb=0; --budget-s 3")


# -- stored comparisons ------------------------------------------------------------------------------------------
def _job(spec: tc.JobSpec, rnd: int, step_s: float) -> JobResult:
    recs = []
    for n in range(spec.steps):
        warm = n < spec.warmup_steps
        s = step_s * (20 if warm and spec.compiled else 1) * (1 + 0.01 * ((n + rnd) % 3 - 1))
        recs.append(StepRecord(step=n, step_s=s, samples_s=spec.batch_size / s, tokens_s=spec.tokens_per_step / s,
                               mem_bytes=50 * 2**20, loss=2.0 - 0.01 * n, warmup=warm, seq_len=spec.seq_len, cpu_s=s))
    return JobResult(spec=spec, status="ok", records=recs, round=rnd, env={"threads": 1},
                     figures=job_figures(recs, spec.batch_size, spec.warmup_steps, threads=1))


def _stored(step_s: dict[str, list[float]], kind: str = "compare") -> int:
    """A finished comparison in the store, as compare() leaves it: runs, steps, and the summary in its row."""
    store, spec = Store(), tc.JobSpec(**SPEC)
    labels = list(step_s)
    cid = store.insert_comparison(kind, spec, labels, 3, {})
    cmp = Comparison(spec=spec, backends=labels, rounds=3, comparison_id=cid, kind=kind)
    for rnd in range(3):
        for label in labels:
            res = _job(dataclasses.replace(spec, backend=standing_for(BACKENDS)[label]), rnd, step_s[label][rnd])
            res.run_id = store.insert_run(res.spec, cid, rnd)
            store.add_steps(res.run_id, res.records)
            store.finish_run(res)
            cmp.results.append(res)
    store.finish_comparison(cid, "done", {"summary": json.loads(cmp.summary().to_json(orient="records"))})
    return cid


FASTER = {"eager": [0.1] * 3, "inductor": [0.050, 0.051, 0.049], "xla": [0.2, 0.21, 0.19]}


def test_show_prints_each_backends_verdict_as_compare_does(capsys):
    cid = _stored(FASTER)
    assert main(["show", str(cid)]) == 0
    out = capsys.readouterr().out
    assert f"comparison {cid}" in out and "median step ms" in out and "speedup" in out
    assert re.search(r"^- eager: baseline", out, re.M)
    assert re.search(r"^- inductor: faster: 2\.0\d× \(95 % interval", out, re.M)
    assert re.search(r"^- xla: slower: 0\.\d\d×", out, re.M)


def test_show_json_is_machine_readable(capsys):
    cid = _stored(FASTER)
    assert main(["show", str(cid), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["comparison_id"] == cid and data["rounds"] == 3 and data["spec"]["steps"] == SPEC["steps"]
    verdicts = {v["backend"]: v for v in data["verdicts"]}
    assert verdicts["inductor"]["verdict_kind"] == "faster" and verdicts["xla"]["verdict_kind"] == "slower"
    low, high = verdicts["inductor"]["speedup_ci_low"], verdicts["inductor"]["speedup_ci_high"]
    assert low <= verdicts["inductor"]["speedup"] <= high
    assert [row["backend"] for row in data["summary"]] == ["eager", "inductor", "xla"]


def test_show_refuses_a_tuning_session_in_one_line(capsys):
    cid = _stored({"eager": [0.1] * 3}, kind="max_batch")
    assert main(["show", str(cid)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"comparison {cid} is a max_batch session" in err


def test_comparisons_show_verdicts_speedups_and_short_times(capsys):
    _stored(FASTER)
    _stored({"eager": [0.1] * 3, "inductor": [0.1, 0.101, 0.099]})
    assert main(["comparisons"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"inductor: faster 2\.0\d× \(\d\.\d\d–\d\.\d\d\); xla: slower 0\.\d\d× ", out), out
    assert re.search(r"inductor: no measurable difference 1\.0\d*× \(", out), out
    assert re.search(r"\b\d\d-\d\d \d\d:\d\d\b", out) and not re.search(r"\d\d:\d\d:\d\d", out), out


# -- profiles ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv", [["profiles"], ["profiles", "--sources"]])
def test_profiles_fit_120_columns_and_wide_shows_the_rest(argv, capsys):
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 120
    assert re.search(r"^prices: .*as listed (on|in) \d{4}.*verify", lines[-1]), lines[-1]
    assert main([*argv, "--wide"]) == 0
    assert max(len(line) for line in capsys.readouterr().out.splitlines()) > 120


# -- report flags ------------------------------------------------------------------------------------------------
@pytest.fixture
def to_html(monkeypatch) -> list[dict]:
    """Comparison.to_html replaced: what it was asked to write, with which plotly.js."""
    calls: list[dict] = []

    def fake(self, path=None, profile=None, plotlyjs="directory"):
        calls.append(dict(path=path, plotlyjs=plotlyjs))
        return "<html></html>"
    monkeypatch.setattr(Comparison, "to_html", fake)
    return calls


@pytest.mark.parametrize("flags, mode", [([], "directory"), (["--cdn"], "cdn"), (["--self-contained"], "inline")])
def test_report_passes_its_path_and_plotlyjs(flags, mode, to_html, tmp_path, capsys):
    cid = _stored(FASTER)
    out = tmp_path / "r.html"
    assert main(["report", str(cid), "--out", str(out), *flags]) == 0
    assert to_html == [dict(path=str(out), plotlyjs=mode)]
    assert f"report written to {out}" in capsys.readouterr().out


def test_cdn_and_self_contained_exclude_each_other(to_html, capsys):
    assert main(["report", "1", "--cdn", "--self-contained"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err and not to_html


def test_compare_report_uses_the_same_flags(to_html, monkeypatch, tmp_path, capsys):
    cid = _stored(FASTER)
    monkeypatch.setattr(tc, "compare", lambda *a, **k: tc.load_comparison(cid))
    out = tmp_path / "c.html"
    assert main(["compare", "--report", str(out), "--cdn"]) == 0
    assert to_html == [dict(path=str(out), plotlyjs="cdn")]


def test_a_default_report_writes_plotly_beside_it(tmp_path, capsys):
    """Needs Comparison.to_html(plotlyjs=...) (the report's own change, issue 26 item 5)."""
    cid = _stored(FASTER)
    out = tmp_path / "r.html"
    assert main(["report", str(cid), "--out", str(out)]) == 0, capsys.readouterr().err
    assert out.is_file() and (tmp_path / "plotly.min.js").is_file()
