"""A time-to-quality study shown: read back from the store (``tc.load_quality``), in words, as figures (seeds faint,
median bold, the target a line; bars with the seeds' intervals), as an HTML report, and on the command line
(``tcbench time-to-quality``, ``show``, ``report``). Against test_study.py's fake runner."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import tcbench as tc
from tcbench.cli.app import main

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_study import INDUCTOR, SPEC, _fake, _predicted  # noqa: E402


@pytest.fixture
def calls(monkeypatch):
    import tcbench.runner.process as runner

    out: list = []
    monkeypatch.setattr(runner, "run", _fake(out))
    return out


@pytest.fixture
def study(calls, store):
    return tc.time_to_quality(SPEC, INDUCTOR, seeds=3, eval_batches=2, profile="ml.g4dn.xlarge", store=store)


def test_a_stored_study_reads_back_as_it_was_measured(study, store):
    back = tc.load_quality(study.comparison_id, store)
    assert [c.label for c in back.candidates] == ["native", "inductor"] and back.target == pytest.approx(study.target)
    cols = ["candidate", "time_to_target_s", "samples_to_target", "speedup", "speedup_low", "usd_to_target"]
    assert back.table()[cols].equals(study.table()[cols])
    assert [len(r.curve) for r in back.runs] == [len(r.curve) for r in study.runs]


def test_load_quality_refuses_another_kind_by_name(store):
    cid = store.insert_comparison("compare", SPEC, ["eager", "inductor"], 1, {})
    with pytest.raises(ValueError, match=f"comparison {cid} is a compare session; allowed: the id of a time-to-quality"):
        tc.load_quality(cid, store)


def test_the_figures_draw_each_seed_faint_the_median_bold_and_the_target(study):
    fig = study.plot()
    medians = [t for t in fig.data if (t.meta or {}).get("median")]
    seeds = [t for t in fig.data if "seed" in (t.meta or {})]
    assert len(medians) == 2 and len(seeds) == 6 and all(t.opacity < 1 for t in seeds)
    assert fig.layout.shapes[0].y0 == pytest.approx(study.target)
    bars = study.plot_bars()
    time_bar = bars.data[0]
    assert list(time_bar.x) == ["native", "inductor"] and len(bars.data) == 2   # time, and cost: a priced profile
    assert all(v >= 0 for v in time_bar.error_y.array) and all(v >= 0 for v in time_bar.error_y.arrayminus)


def test_the_words_say_the_target_the_ratios_the_price_and_the_premise(study):
    text = study.describe()
    assert "target held-out loss" in text and "sooner: 1.0" in text and "not that instance's speed" in text
    assert "lr premise: not checked" in text


def test_the_html_report_holds_the_summary_table_and_figures(study, tmp_path):
    out = study.to_html(str(tmp_path / "q.html"), plotlyjs="cdn")
    page = out.read_text()
    assert "Time to quality: gpt2 tiny" in page and "tcb-quality" in page and page.count("plotly-graph-div") >= 2


def test_the_command_line_runs_shows_and_reports_a_study(calls, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("TCBENCH_DB", str(tmp_path / "cli.db"))
    _predicted(monkeypatch, [])
    code = main(["time-to-quality", "--model", "gpt2", "--size", "tiny", "--batch-size", "4", "--seq-len", "32",
                 "--steps", "20", "--warmup", "2", "--seeds", "3", "--eval-batches", "2", "--big-batch", "8"])
    out = capsys.readouterr().out
    assert code == 0 and "inductor@8" in out and "native@8" in out and "target held-out loss" in out
    cid = int(out.rsplit("stored as comparison ", 1)[1].split()[0])
    assert main(["show", str(cid)]) == 0 and "inductor@8" in capsys.readouterr().out
    assert main(["report", str(cid), "--out", str(tmp_path / "r.html"), "--cdn"]) == 0
    assert "Time to quality" in (tmp_path / "r.html").read_text()


def test_a_bad_setting_on_the_command_line_is_one_line_before_any_job(calls, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("TCBENCH_DB", str(tmp_path / "cli.db"))
    code = main(["time-to-quality", "--model", "gpt2", "--size", "tiny", "--seeds", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--seeds 2 is not allowed" in err[0] and not calls
