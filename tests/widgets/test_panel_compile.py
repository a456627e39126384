"""The panel's Compile search tab and the Run tab's compiler settings, without a browser and without jobs:
``tc.tune_compile`` is replaced by a fake that records its arguments, sends the events a search sends and returns a
real ``tc.CompileSearch`` (real ``tc.CompileConfig``s, a small trials table, a stand-in for the confirmation)."""

from __future__ import annotations

import dataclasses
import html
import threading
import time
import types

import pandas as pd
import plotly.graph_objects as go
import pytest

import tcbench as tc
from tcbench.core import spec as core_spec
from tcbench.tuning.compile_search.search import FIELDS, TRIAL_COLUMNS
from tcbench.widgets import Workbench
from tcbench.widgets import _controls

TINY = dict(model="gpt2", size="tiny", batch_size=4, seq_len=32, steps=12, warmup_steps=2, threads=1)
DEFAULT = tc.CompileConfig()
BEST = tc.CompileConfig(compile_mode="max-autotune-no-cudagraphs", compile_scope="blocks", compile_optimizer=False,
                        precision="fp32", cpp_wrapper=True)
BF16 = tc.CompileConfig(precision="bf16")
PRUNED = tc.CompileConfig(compile_mode="max-autotune")
FAILED = tc.CompileConfig(cpp_wrapper=True)
NATIVE_MS = 20.0


@pytest.fixture(autouse=True)
def _own_store(tmp_path, monkeypatch):
    monkeypatch.setenv("TCBENCH_DB", str(tmp_path / "panel.db"))


def _row(number, config, state, med, iqr, parity, reason="", duplicate_of=None):
    return {"number": number, "label": config.label(), **dataclasses.asdict(config), "state": state,
            "median_step_ms": med, "step_iqr_ms": iqr, "compile_s": 3.25 if med is not None else None,
            "parity": parity, "loss_diff": 0.001 if parity is not None else None, "reason": reason,
            "duplicate_of": duplicate_of, "run_id": number + 2}


def _trials() -> pd.DataFrame:
    return pd.DataFrame([
        _row(0, DEFAULT, "COMPLETE", 10.0, 1.0, True),
        _row(1, BEST, "COMPLETE", 8.0, 0.5, True),
        _row(2, BF16, "COMPLETE", 6.0, 0.4, False, "rejected: loss parity failed — last window off by 3 %"),
        _row(3, PRUNED, "PRUNED", 14.0, None, None, "pruned at step 9"),
        _row(4, FAILED, "FAIL", None, None, None, "failed: <boom> & more"),
        _row(5, BEST, "COMPLETE", 8.0, None, True, duplicate_of=1),
    ], columns=TRIAL_COLUMNS)


class FakeConfirmation:
    """What the search's confirmation rounds give the tab: the labels and a row per label."""

    def __init__(self):
        self.backends = ["eager", DEFAULT.label(), BEST.label()]

    def row(self, label):
        med = {"eager": NATIVE_MS, DEFAULT.label(): 10.0, BEST.label(): 8.0}[label]
        return types.SimpleNamespace(median_step_ms=med, speedup=NATIVE_MS / med, speedup_ci_low=2.2,
                                     speedup_ci_high=2.8, verdict=f"faster: {NATIVE_MS / med:.2f}× (95 % interval "
                                                                  "2.20×–2.80×)")


def _result(spec, storage=None, best=BEST) -> tc.CompileSearch:
    space = {"compile_mode": ("default", "max-autotune-no-cudagraphs", "max-autotune"), "compile_scope": ("model", "blocks"),
             "compile_optimizer": (True, False), "precision": ("fp32", "bf16"), "cpp_wrapper": (False, True)}
    return tc.CompileSearch(spec=spec, space=space, default=DEFAULT, trials=_trials(), best=best,
                            stop_reason="n_trials=5 configurations were tried", study_name="panel-compile-x",
                            storage=storage, search_s=42.0, comparison_id=1, confirmation=FakeConfirmation(),
                            vs_default=(1.25, 1.1, 1.4), vs_default_verdict="faster: 1.25× (95 % interval 1.10×–1.40×)",
                            notes=["confirmation: resolution reached <in 3 rounds>"])


def _fake(calls: list, error: Exception | None = None, hold: bool = False):
    def tune_compile(spec, observer=None, stop=None, **kw):
        calls.append(dict(spec=spec, stop=stop, **kw))
        if error is not None:
            raise error
        observer(tc.events.JobStarted(job="native reference", backend="eager", label="eager", run_id=1, round=0,
                                      spec=spec))
        for n, config, status in ((0, DEFAULT, "ok"), (1, BEST, "ok"), (3, PRUNED, "pruned")):
            observer(tc.events.CompileTrialStarted(number=n, label=config.label()))
            observer(tc.events.PhaseChanged(job=f"trial#{n}", backend="inductor", label=config.label(), run_id=2 + n,
                                            phase="compiling"))
            observer(tc.events.CompileTrialEnded(number=n, label=config.label(), status=status))
        while hold and not stop.is_set():
            stop.wait(0.02)
        return _result(spec, storage="sqlite:////tmp/tcbench.db" if kw.get("storage") else None)
    return tune_compile


def _search(tab, timeout=30):
    thread = tab.search()
    assert thread is not None, tab.message.value
    thread.join(timeout)
    assert not thread.is_alive()


# -- the Run tab's compiler settings ---------------------------------------------------------------------
def test_the_compile_choices_are_the_engines_and_the_defaults_jobspecs():
    c = Workbench(**TINY).controls
    assert list(c.compile_mode.options) == list(core_spec.INDUCTOR_MODES)
    assert list(c.compile_scope.options) == list(core_spec.COMPILE_SCOPES) and list(c.cache.options) == list(core_spec.CACHE_MODES)
    default = tc.JobSpec()
    for name in ("compile_mode", "compile_scope", "compile_optimizer", "cpp_wrapper", "cache"):
        assert getattr(c, name).value == getattr(default, name) == getattr(c.spec, name)
        assert getattr(c, name) in list(_inside(c.more_box)) and name in _controls.MORE
    assert c.compile_optimizer.value is False and "inductor:" not in c.more_summary.value


def test_the_run_tabs_compile_settings_reach_the_spec_and_the_more_summary():
    c = Workbench(**TINY).controls
    c.set(compile_mode="max-autotune", compile_scope="blocks", compile_optimizer=True, cpp_wrapper=True, cache="cold")
    s = c.spec
    assert (s.compile_mode, s.compile_scope, s.compile_optimizer, s.cpp_wrapper, s.cache) == (
        "max-autotune", "blocks", True, True, "cold")
    assert "inductor: max-autotune · blocks · compiled optimizer · cpp_wrapper · cold cache" in c.more_summary.value
    c.set(compile_mode="default", compile_scope="model", compile_optimizer=False, cpp_wrapper=False, cache="shared")
    assert "inductor:" not in c.more_summary.value


def test_a_compile_setting_the_engine_refuses_is_shown_next_to_its_control(monkeypatch):
    real = tc.JobSpec

    def spec(**kw):   # an engine that refuses cpp_wrapper with blocks: its SpecError takes the usual path
        if kw.get("cpp_wrapper") and kw.get("compile_scope") == "blocks":
            raise tc.SpecError("cpp_wrapper", True, "False with compile_scope='blocks'")
        return real(**kw)

    panel = Workbench(**TINY)
    monkeypatch.setattr(tc, "JobSpec", spec)
    panel.controls.set(compile_scope="blocks", cpp_wrapper=True)
    c = panel.controls
    assert c.spec is None and "cpp_wrapper=True is not allowed" in c.error and panel.run_button.disabled
    assert "⚠" in c.errors["cpp_wrapper"].value and c.more_open
    assert panel.compile.search() is None and "Fix the Run tab first" in panel.compile.message.value
    c.set(cpp_wrapper=False)
    assert c.spec is not None and c.errors["cpp_wrapper"].value == "" and not panel.run_button.disabled


# -- the Compile search tab -------------------------------------------------------------------------------
def test_the_tab_is_appended_and_the_others_keep_their_indexes():
    panel = Workbench(**TINY)
    titles = [panel.tabs.get_title(i) for i in range(len(panel.tabs.children))]
    assert titles[:5] == ["Run", "History", "Batch & LR", "Data parallel", "Compile search"]   # more may follow
    assert panel.tabs.children[4] is panel.compile.box and "tcb-compile" in panel.compile.box._dom_classes
    assert "tcb-compile-search" in panel.compile.search_button._dom_classes
    assert "tcb-use-compile" in panel.compile.use_button._dom_classes and panel.compile.use_button.disabled


def test_search_passes_the_run_tabs_job_and_the_tabs_settings(monkeypatch):
    calls: list = []
    monkeypatch.setattr(tc, "tune_compile", _fake(calls))
    panel = Workbench(**TINY, precision="bf16")
    tab = panel.compile
    tab.budget.value, tab.trials.value = 300.0, 0
    _search(tab)
    call = calls[0]
    assert call["spec"] == panel.controls.spec and isinstance(call["stop"], threading.Event)
    assert call["budget_s"] == 300.0 and call["n_trials"] is None and call["space"] is None
    assert call["storage"] is None and call["study_name"] is None
    tab.trials.value = 6
    tab.fields["precision"].value = tab.fields["cpp_wrapper"].value = False
    tab.keep_study.value = True
    _search(tab)
    call = calls[1]
    assert call["n_trials"] == 6 and call["space"] == {"precision": ["bf16"], "cpp_wrapper": [False]}
    assert call["storage"] == "store" and call["study_name"].startswith("panel-compile-gpt2-")
    assert "tcbench dashboard --storage 'sqlite:////tmp/tcbench.db'" in tab.message.value
    assert set(tab.fields) == set(FIELDS)


def test_progress_shows_a_line_per_finished_trial(monkeypatch):
    seen: list = []
    fake = _fake([])

    def spying(spec, observer=None, **kw):
        def observe(event):
            observer(event)
            seen.append(panel.compile.message.value)
        return fake(spec, observer=observe, **kw)

    monkeypatch.setattr(tc, "tune_compile", spying)
    panel = Workbench(**TINY)
    _search(panel.compile)
    last = seen[-1]
    for line in (f"Trial 0 · {DEFAULT.label()}: ok", f"Trial 1 · {BEST.label()}: ok", f"Trial 3 · {PRUNED.label()}: pruned"):
        assert html.escape(line) in last
    assert any(html.escape(f"Trial 1 · {BEST.label()}: compiling …") in m for m in seen)   # the running trial


def test_a_result_shows_the_answer_the_table_and_the_figure(monkeypatch):
    monkeypatch.setattr(tc, "tune_compile", _fake([]))
    panel = Workbench(**TINY)
    tab = panel.compile
    _search(tab)
    result = tab.result
    assert isinstance(result, tc.CompileSearch) and not tab.running
    msg = tab.message.value
    assert html.escape(result.answer()) in msg and "against native: faster" in msg
    assert "n_trials=5 configurations were tried" in msg and "&lt;in 3 rounds&gt;" in msg
    table = tab.table.value
    for column in ("number", "label", "state", "median_step_ms", "step_iqr_ms", "compile_s", "parity", "reason"):
        assert f"<th>{column}</th>" in table
    assert "loss_diff" not in table and "run_id" not in table
    assert "&lt;boom&gt; &amp; more" in table and "<td>3.25</td>" in table and "<td>–</td>" in table
    assert table.count(f"<td>{BEST.label()}</td>") == 1 and "<td>None</td>" not in table   # a repeat is left out
    fig = tab.fig
    assert isinstance(fig, go.FigureWidget) and [t.name for t in fig.data] == ["kept parity", "rejected", "pruned", "failed"]
    kept, rejected, pruned, failed = fig.data
    assert list(kept.y) == [f"#1 {BEST.label()}", f"#0 {DEFAULT.label()}"] and list(kept.x) == [8.0, 10.0]
    assert list(kept.error_x.array) == [0.25, 0.5] and kept.orientation == "h"   # ± half the IQR
    assert list(rejected.x) == [6.0] and list(pruned.x) == [14.0] and list(failed.text) == ["failed"]
    assert all("#5 " not in y for t in fig.data for y in t.y)   # a duplicate's copy is not drawn twice
    (line,) = fig.layout.shapes
    assert line.x0 == line.x1 == NATIVE_MS and "native 20 ms" in fig.layout.annotations[0].text
    assert not tab.use_button.disabled and not tab.search_button.disabled and tab.stop_button.disabled


def test_a_search_stopped_before_any_trial_shows_why_and_offers_nothing(monkeypatch):
    def stopped(spec, **kw):
        r = _result(spec, best=None)
        r.trials, r.confirmation, r.stop_reason = pd.DataFrame(columns=TRIAL_COLUMNS), None, "stopped by the user"
        return r

    monkeypatch.setattr(tc, "tune_compile", stopped)
    tab = Workbench(**TINY).compile
    _search(tab)
    assert "no configuration kept loss parity" in tab.message.value and "stopped by the user" in tab.message.value
    assert tab.use_button.disabled and not tab.fig.layout.shapes and all(len(t.x) == 0 for t in tab.fig.data)
    tab.use_config()   # nothing to use: the Run tab is left as it was
    assert tc.CompileConfig.of(tab.controls.spec) == DEFAULT


def test_use_this_configuration_sets_the_run_tab(monkeypatch):
    monkeypatch.setattr(tc, "tune_compile", _fake([]))
    panel = Workbench(**TINY)
    _search(panel.compile)
    panel.controls.set(backends=())   # no compiled backend ticked: Use ticks inductor
    assert panel.controls.spec is None
    panel.compile.use_button.click()
    spec = panel.controls.spec
    assert spec is not None and tc.CompileConfig.of(spec) == BEST, panel.controls.error
    assert "inductor" in panel.controls.selected_backends() and panel.controls.cpp_wrapper.value is True
    assert "blocks" in panel.controls.more_summary.value and html.escape(BEST.label()) in panel.compile.message.value


def test_stop_sets_the_stop_event_and_the_buttons_come_back(monkeypatch):
    calls: list = []
    monkeypatch.setattr(tc, "tune_compile", _fake(calls, hold=True))
    panel = Workbench(**TINY)
    tab = panel.compile
    thread = tab.search()
    deadline = time.monotonic() + 10
    while not calls and time.monotonic() < deadline:
        time.sleep(0.02)
    assert tab.running and tab.search_button.disabled and not tab.stop_button.disabled
    assert panel.controls.owner == "compile search" and panel.run_button.disabled and panel.tuning.retune_button.disabled
    tab.stop_button.click()
    thread.join(10)
    assert calls[0]["stop"].is_set() and not thread.is_alive()
    assert panel.controls.owner is None and not tab.search_button.disabled and tab.stop_button.disabled
    assert not panel.run_button.disabled


def test_an_engine_error_is_a_message_and_the_buttons_come_back(monkeypatch):
    monkeypatch.setattr(tc, "tune_compile", _fake([], error=ValueError("study 'x' was started with <other> settings")))
    panel = Workbench(**TINY)
    tab = panel.compile
    _search(tab)
    assert "ValueError: study &#x27;x&#x27; was started with &lt;other&gt; settings" in tab.message.value
    assert tab.result is None and tab.use_button.disabled and not tab.search_button.disabled
    assert tab.stop_button.disabled and panel.controls.owner is None and not panel.run_button.disabled


def test_another_tabs_measurement_keeps_search_off(monkeypatch):
    monkeypatch.setattr(tc, "tune_compile", lambda *a, **k: pytest.fail("a search started beside a measurement"))
    panel = Workbench(**TINY)
    panel.controls.claim("scaling measurement")
    assert panel.compile.search_button.disabled
    assert panel.compile.search() is None and "scaling measurement is running" in panel.compile.message.value
    panel.controls.release()
    assert not panel.compile.search_button.disabled


def _inside(widget):
    yield widget
    for child in getattr(widget, "children", ()):
        yield from _inside(child)
