"""The panel's Time to quality tab without a browser and without jobs: ``tc.time_to_quality`` is replaced by a fake
that records its arguments, sends the events a study sends (each job's JobEnded carrying its held-out curve) and
returns a real ``tc.QualityResult`` built by hand: three candidates, three seeds, runs with curves, one candidate
that never reaches the target."""

from __future__ import annotations

import html
import math
import threading
import time
import types

import pytest

import tcbench as tc
from tcbench.core.extras import EvalPoint
from tcbench.core.results import JobResult
from tcbench.tuning.quality import QualityRun
from tcbench.widgets import Workbench

TINY = dict(model="gpt2", size="tiny", batch_size=4, seq_len=32, steps=20, warmup_steps=2, threads=1)
SEEDS = (0, 1, 2)
SPEED = {"native": 1.0, "eager@8": 0.6, "inductor": 1.5}   # wall seconds per evaluation, per candidate
TARGET = 2.5


@pytest.fixture(autouse=True)
def _own_store(tmp_path, monkeypatch):
    monkeypatch.setenv("TCBENCH_DB", str(tmp_path / "panel.db"))


def _curve(label: str, seed: int) -> tuple[EvalPoint, ...]:
    """Ten evaluations every 8 samples; the loss falls 0.25 an evaluation (never below 2.6 for "inductor")."""
    floor = 2.6 if label == "inductor" else 0.0
    return tuple(EvalPoint(steps=i * 2, samples=8 * i, wall_s=round(SPEED[label] * i * (1 + 0.1 * seed), 6),
                           loss=max(floor, 4.0 - 0.25 * i)) for i in range(1, 11))


def _run(label: str, seed: int) -> QualityRun:
    curve = _curve(label, seed)
    at = next((p for p in curve if p.loss <= TARGET), None)
    return QualityRun(label=label, seed=seed, run_id=None, status="ok", reached=at is not None,
                      time_s=None if at is None else at.wall_s, samples=None if at is None else at.samples,
                      steps=None if at is None else at.steps, compile_s=None, cache="warm", curve=curve)


def _result(spec, profile: str = "this-machine") -> tc.QualityResult:
    candidates = [tc.Candidate("native", spec), tc.Candidate("eager@8", spec.replace(batch_size=8, lr=spec.lr * 2)),
                  tc.Candidate("inductor", spec.replace(backend="inductor"))]
    r = tc.QualityResult(target=TARGET, target_source="the reference's median held-out loss at its 20 steps",
                         candidates=candidates, runs=[_run(c.label, s) for c in candidates for s in SEEDS])
    r.profile = profile
    r.premise = types.SimpleNamespace(verdict="lr0 = 0.002 is within 2× of the best <grid> point", held=True)
    r.notes = ["native@8 left out: it does not fit"]
    return r


def _job(label: str, seed: int, spec):
    job = spec.replace(seed=seed, eval_batches=2, eval_every=2)
    res = JobResult(spec=job, status="ok", label=label)
    res.extra.eval_curve = list(_curve(label, seed))
    common = dict(job=f"{label}#{seed}", backend=job.backend, label=label, run_id=None)
    return (tc.events.JobStarted(**common, round=seed, spec=job),
            tc.events.PhaseChanged(**common, phase="measuring"), tc.events.JobEnded(**common, result=res))


def _fake(calls: list, error: Exception | None = None, hold: bool = False, profile: str = "this-machine"):
    def time_to_quality(spec, candidates=None, *, observer=None, stop=None, **kw):
        calls.append(dict(spec=spec, candidates=candidates, stop=stop, **kw))
        if error is not None:
            raise error
        probe = JobResult(spec=spec, status="ok", label="probe")   # a job before the study's: not counted
        observer(tc.events.JobEnded(job="probe", backend="eager", label="probe", run_id=None, result=probe))
        for label in ("native", "eager@8"):
            for seed in SEEDS:
                for event in _job(label, seed, spec):
                    observer(event)
        while hold and not stop.is_set():
            stop.wait(0.02)
        result = _result(spec, profile)
        result.horizon_steps = kw.get("horizon_steps")
        return result
    return time_to_quality


def _run_tab(tab, timeout=30):
    thread = tab.run()
    assert thread is not None, tab.status.value
    thread.join(timeout)
    assert not thread.is_alive()


def test_the_tab_is_appended_after_the_others():
    panel = Workbench(**TINY)
    titles = [panel.tabs.get_title(i) for i in range(len(panel.tabs.children))]
    assert titles == ["Run", "History", "Batch & LR", "Data parallel", "Compile search", "Time to quality"]
    tab = panel.quality
    assert panel.tabs.children[5] is tab.box and "tcb-quality" in tab.box._dom_classes
    assert tab.seeds.value == 5 and tab.seeds.min == 3 and tab.target.value == "" and tab.big_batch.value == ""
    assert tab.budget.value == 3.0 and tab.retune.value is False and tab.stop_button.disabled


def test_run_passes_the_run_tabs_job_and_the_tabs_settings(monkeypatch):
    calls: list = []
    monkeypatch.setattr(tc, "time_to_quality", _fake(calls))
    panel = Workbench(**TINY)
    tab = panel.quality
    _run_tab(tab)
    call = calls[0]
    assert call["spec"] == panel.controls.spec and isinstance(call["stop"], threading.Event)
    assert call["candidates"] is None and call["seeds"] == 5 and call["budget"] == 3.0
    assert call["target_loss"] is None and call["big_batch"] is None and call["retune"] is False
    tab.seeds.value, tab.target.value, tab.budget.value, tab.big_batch.value = 3, " 2.75 ", 2.0, "16"
    tab.retune.value, tab.horizon.value = True, "20,000"
    mine = [tc.Candidate("eager@8", panel.controls.spec.replace(batch_size=8))]
    tab.candidates = mine
    _run_tab(tab)
    call = calls[1]
    assert (call["seeds"], call["target_loss"], call["budget"], call["big_batch"], call["retune"]) == (
        3, 2.75, 2.0, 16, True)
    assert call["horizon_steps"] == 20000 and calls[0]["horizon_steps"] is None
    assert "At the length you train for" in tab.summary.value and "at 20,000 steps, inductor" in tab.summary.value
    # the chart of time to target against the horizon, shown for a study with a horizon only
    assert tab.horizon_box.layout.display == "" and "20,000 steps" in tab.horizon_fig.layout.title.text
    names = [t.name for t in tab.horizon_fig.data]
    assert "native" in names and "eager@8" in names and "your horizon: 20,000 steps" in names
    assert any(n and n.startswith("inductor: not projected") for n in names)   # it never reached the target
    tab.horizon.value = ""
    _run_tab(tab)
    assert tab.horizon_box.layout.display == "none" and not tab.horizon_fig.data
    assert call["candidates"] == mine
    tc.QualityOptions(**{k: v for k, v in call.items() if k not in ("spec", "candidates", "stop")})  # all fields


@pytest.mark.parametrize("field, text, words", [("target", "low", "Target loss 'low' is not a number"),
                                                ("big_batch", "8.5", "Big batch '8.5' is not a whole number"),
                                                ("horizon", "soon", "Horizon 'soon' is not a whole number")])
def test_a_bad_input_is_said_and_nothing_runs(monkeypatch, field, text, words):
    calls: list = []
    monkeypatch.setattr(tc, "time_to_quality", _fake(calls))
    tab = Workbench(**TINY).quality
    getattr(tab, field).value = text
    assert tab.run() is None and not calls
    assert html.escape(words) in tab.status.value and not tab.run_button.disabled


def test_the_result_fills_the_curves_the_bars_the_progress_and_the_table(monkeypatch):
    monkeypatch.setattr(tc, "time_to_quality", _fake([]))
    panel = Workbench(**TINY)
    tab = panel.quality
    tab.seeds.value = 3
    _run_tab(tab)
    assert isinstance(tab.result, tc.QualityResult) and "Done after" in tab.status.value
    # curves: per candidate a faint line per seed and the bold median, in one colour; the target dashed
    fig = tab.curves_fig
    assert len(fig.data) == 3 * (len(SEEDS) + 1)
    medians = [t for t in fig.data if t.showlegend is not False]
    assert [t.name for t in medians] == ["native", "eager@8", "inductor"] and {t.line.width for t in medians} == {3}
    faint = [t for t in fig.data if t.showlegend is False]
    assert len(faint) == 9 and {t.opacity for t in faint} == {0.3} and {t.line.width for t in faint} == {1}
    for m in medians:
        assert {t.line.color for t in faint if t.legendgroup == m.name} == {m.line.color}
    assert len({m.line.color for m in medians}) == 3
    native = medians[0]
    assert list(native.x) == [pytest.approx(1.1 * i) for i in range(1, 11)]   # the median seed's wall times
    assert list(native.y) == [pytest.approx(4.0 - 0.25 * i) for i in range(1, 11)]
    (line,) = fig.layout.shapes
    assert line.y0 == line.y1 == TARGET and line.line.dash == "dash" and "target 2.5" in fig.layout.annotations[0].text
    # bars: the olympic mean of the time to target, its interval as whiskers; inductor never got there
    table = tab.result.table().set_index("candidate")
    bars = tab.bars_fig.data[0]
    assert list(bars.x) == ["native", "eager@8", "inductor"]
    assert list(bars.y[:2]) == [pytest.approx(table.loc[c, "time_to_target_s"]) for c in ("native", "eager@8")]
    assert bars.y[2] == 0.0 and html.escape(str(table.loc["inductor", "note"])) in bars.text[2]
    for i, c in enumerate(("native", "eager@8")):
        assert bars.error_y.array[i] == pytest.approx(table.loc[c, "time_high"] - table.loc[c, "time_to_target_s"])
        assert bars.error_y.arrayminus[i] == pytest.approx(table.loc[c, "time_to_target_s"] - table.loc[c, "time_low"])
    assert bars.error_y.visible and max(bars.error_y.array) > 0
    assert len(tab.bars_fig.data[1].x) == 0 and any("no price" in a.text for a in tab.bars_fig.layout.annotations)
    assert tab.bars_fig.layout.yaxis2.visible is False and list(bars.textposition) == ["inside", "inside", "outside"]
    # progress: the six jobs sent (the probe before them not counted), then the result's nine runs
    assert tab.progress.value == tab.progress.max == 9 and "9 of 9 jobs" in tab.progress_text.value
    # the table and what goes with it
    summary = tab.summary.value
    for words in ("time to target (s)", "speedup ×", "samples ratio ×", "not converged", "samples to target"):
        assert f"<th>{words}</th>" in summary
    assert "cost to target" not in summary and "<td>eager@8</td>" in summary
    e8 = table.loc["eager@8"]
    assert f"{e8.speedup:.3g} [{e8.speedup_low:.3g}–{e8.speedup_high:.3g}]" in summary
    assert html.escape(tab.result.target_source) in summary and html.escape(tab.result.price_basis) in summary
    assert "premise (held)" in summary and "&lt;grid&gt; point" in summary and "native@8 left out" in summary
    assert not tab.run_button.disabled and tab.stop_button.disabled and panel.controls.owner is None


def test_a_priced_profile_shows_the_cost_bars_and_column(monkeypatch):
    monkeypatch.setattr(tc, "time_to_quality", _fake([], profile="ml.g5.2xlarge"))
    tab = Workbench(**TINY).quality
    tab.seeds.value = 3
    _run_tab(tab)
    table = tab.result.table().set_index("candidate")
    cost = tab.bars_fig.data[1]
    assert list(cost.x) == ["native", "eager@8", "inductor"]
    assert cost.y[1] == pytest.approx(table.loc["eager@8", "usd_to_target"]) and cost.y[1] > 0
    assert not any("no price" in a.text for a in tab.bars_fig.layout.annotations) and tab.bars_fig.layout.yaxis2.visible
    assert "<th>cost to target ($)</th>" in tab.summary.value


def test_each_finished_job_draws_its_curve_and_moves_the_progress_bar(monkeypatch):
    seen: list = []
    fake = _fake([])

    def spying(spec, candidates=None, *, observer=None, **kw):
        def observe(event):
            observer(event)
            if isinstance(event, tc.events.JobEnded):
                seen.append((tab.progress.value, tab.progress.max, len(tab.curves_fig.data)))
        return fake(spec, candidates, observer=observe, **kw)

    monkeypatch.setattr(tc, "time_to_quality", spying)
    tab = Workbench(**TINY).quality
    tab.seeds.value = 3
    _run_tab(tab)
    # the default candidates are known as they start: at least two, so 6 planned, then 2 × 3 as eager@8 starts
    assert [s[:2] for s in seen] == [(0, 6), (1, 6), (2, 6), (3, 6), (4, 6), (5, 6), (6, 6)]
    assert [s[2] for s in seen] == [0, 2, 3, 4, 6, 7, 8]   # a faint line per seed, and the median


def test_stop_sets_the_stop_event_and_the_buttons_come_back(monkeypatch):
    calls: list = []
    monkeypatch.setattr(tc, "time_to_quality", _fake(calls, hold=True))
    panel = Workbench(**TINY)
    tab = panel.quality
    thread = tab.run()
    deadline = time.monotonic() + 10
    while not calls and time.monotonic() < deadline:
        time.sleep(0.02)
    assert tab.running and tab.run_button.disabled and not tab.stop_button.disabled
    assert panel.controls.owner == "time-to-quality study" and panel.run_button.disabled
    assert panel.compile.search_button.disabled
    tab.stop_button.click()
    thread.join(10)
    assert calls[0]["stop"].is_set() and not thread.is_alive()
    assert "Stopped after" in tab.status.value
    assert panel.controls.owner is None and not tab.run_button.disabled and tab.stop_button.disabled
    assert not panel.run_button.disabled


def test_a_spec_error_shows_in_the_status_line_in_plain_words(monkeypatch):
    error = tc.SpecError("target_loss", 0.5, "a loss the reference reaches within its budget (its runs ended at 2.9)")
    monkeypatch.setattr(tc, "time_to_quality", _fake([], error=error))
    panel = Workbench(**TINY)
    tab = panel.quality
    _run_tab(tab)
    status = tab.status.value
    assert "Check the settings: target_loss=0.5 is not allowed; allowed: a loss the reference reaches" in status
    assert "Traceback" not in status and "SpecError" not in status
    assert tab.result is None and not tab.run_button.disabled and panel.controls.owner is None
    assert len(tab.curves_fig.data) == 0 and not tab.curves_fig.layout.shapes


def test_an_engine_error_is_a_message(monkeypatch):
    monkeypatch.setattr(tc, "time_to_quality", _fake([], error=RuntimeError("no reference run <evaluated>")))
    tab = Workbench(**TINY).quality
    _run_tab(tab)
    assert "The study failed: RuntimeError: no reference run &lt;evaluated&gt;" in tab.status.value


def test_a_study_stopped_before_its_target_draws_no_line(monkeypatch):
    def stopped(spec, candidates=None, **kw):
        r = _result(spec)
        r.target, r.target_source = math.nan, "stopped by the user before the reference's runs ended"
        r.runs = [QualityRun(label="native", seed=0, run_id=1, status="interrupted", reached=False, time_s=None,
                             samples=None, steps=None, compile_s=None, cache="", curve=_curve("native", 0)[:3])]
        r.premise, r.notes = None, []
        return r

    monkeypatch.setattr(tc, "time_to_quality", stopped)
    tab = Workbench(**TINY).quality
    _run_tab(tab)
    assert not tab.curves_fig.layout.shapes and len(tab.curves_fig.data) == 2   # one seed's line, its median
    summary = tab.summary.value
    assert "No target:" in summary and "stopped by the user" in summary and "premise:</b> not checked" in summary


def test_another_tabs_measurement_keeps_run_off(monkeypatch):
    monkeypatch.setattr(tc, "time_to_quality", lambda *a, **k: pytest.fail("a study started beside a measurement"))
    panel = Workbench(**TINY)
    panel.controls.claim("scaling measurement")
    assert panel.quality.run_button.disabled
    assert panel.quality.run() is None and "scaling measurement is running" in panel.quality.status.value
    panel.controls.release()
    assert not panel.quality.run_button.disabled


def test_a_bad_run_tab_is_said():
    panel = Workbench(**TINY)
    panel.controls.set(batch_size=0)
    assert panel.quality.run() is None and "Fix the Run tab first" in panel.quality.status.value


@pytest.mark.parametrize("job, label, backend, candidate", [
    ("eager@8#1", "eager@8", "eager", "eager@8"),   # the label names the candidate
    ("eager@8", "eager", "eager", "eager@8"),       # a label that is the backend's: the job's name
    ("inductor#2", "inductor", "inductor", "inductor"), ("a#b", "eager", "eager", "a#b")])
def test_each_jobs_candidate_is_its_label_else_its_jobs_name(job, label, backend, candidate):
    event = tc.events.PhaseChanged(job=job, backend=backend, label=label, run_id=None, phase="measuring")
    assert Workbench(**TINY).quality._label(event) == candidate
