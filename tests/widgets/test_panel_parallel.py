"""The panel's Data parallel tab without a browser and without jobs: tc.scaling and tc.predict_lr are replaced by
fakes that record their arguments and return small results; tc.project_scaling runs for real (it starts no job)."""

from __future__ import annotations

import os
import threading

import pandas as pd
import plotly.graph_objects as go
import pytest

import tcbench as tc
from tcbench.widgets import Workbench
from tcbench.widgets._parallel import parse_counts

TINY = dict(model="gpt2", size="tiny", batch_size=8, seq_len=32, steps=12, warmup_steps=2, threads=1)


@pytest.fixture(autouse=True)
def _own_store(tmp_path, monkeypatch):
    monkeypatch.setenv("TCBENCH_DB", str(tmp_path / "panel.db"))


@pytest.fixture
def cores(monkeypatch):
    """Eight usable cores, whatever the machine has: preflight's processes × threads check then passes for 2."""
    real = os.sched_getaffinity
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)) if pid == 0 else real(pid))


class FakeScaling:
    """What tc.scaling returns, small: a table without the global batch (the tab adds it), words and a figure."""

    def __init__(self, spec, nprocs):
        self.spec, self.nprocs = spec, tuple(nprocs)

    def table(self) -> pd.DataFrame:
        return pd.DataFrame({"nproc": list(self.nprocs), "scaling_factor": [1.0, 0.9][:len(self.nprocs)],
                             "verdict": ["baseline", "scaling factor 0.90×"][:len(self.nprocs)]})

    def describe(self) -> str:
        return "Data-parallel scaling of gpt2: 2 processes (global batch 16): scaling factor 0.90×."

    def plot(self) -> go.Figure:
        fig = go.Figure()
        fig.add_scatter(x=list(self.nprocs), y=[1.0, 0.9], name="measured")
        return fig


def _fake_scaling(calls: list, error: Exception | None = None, hold: threading.Event | None = None):
    def scaling(spec, nprocs=(1, 2), rounds=3, parity=True, observer=None, stop=None, store=None):
        calls.append(dict(spec=spec, nprocs=list(nprocs), rounds=rounds, stop=stop))
        if error is not None:
            raise error
        for n in nprocs:
            job = f"nproc={n}#0"
            observer(tc.events.JobStarted(job=job, backend=spec.backend, label=f"nproc={n}", run_id=n, round=0,
                                          spec=spec.replace(nproc=n)))
            observer(tc.events.PhaseChanged(job=job, backend=spec.backend, label=f"nproc={n}", run_id=n,
                                            phase="measuring"))
        if hold is not None:
            while not stop.is_set():
                stop.wait(0.05)
        return FakeScaling(spec, nprocs)
    return scaling


class FakePrediction:
    def table(self) -> pd.DataFrame:
        return pd.DataFrame({"rule": ["noise scale (surge form)", "linear rule (lr·k)"], "lr": [3e-3, 8e-3]})

    def describe(self) -> str:
        return "global batch 8 (1 × 8) → 32 (4 × 8): lr 0.002 → 0.003"

    def advice(self) -> str:
        return "With Adam(W) the best learning rate grows about as √k (the square-root rule)."


# -- the processes field ---------------------------------------------------------------------------------
@pytest.mark.parametrize("text, counts", [("1,2", (1, 2)), (" 1, 2 ,4", (1, 2, 4)), ("2 1", (2, 1)),
                                          ("1;64", (1, 64))])
def test_processes_parse_into_whole_numbers(text, counts):
    assert parse_counts("processes", text, 64, at_least=2) == counts


@pytest.mark.parametrize("text", ["", "1", "1,1", "0,2", "1,65", "1,x", "1.5,2", "-1,2"])
def test_bad_processes_are_refused_with_field_value_and_allowed(text):
    with pytest.raises(ValueError) as err:
        parse_counts("processes", text, 64, at_least=2)
    message = str(err.value)
    assert message.startswith(f"processes={text!r} is not allowed")
    assert "two or more different whole numbers from 1 to 64" in message


def test_bad_processes_are_shown_before_anything_starts(monkeypatch):
    calls: list = []
    monkeypatch.setattr(tc, "scaling", _fake_scaling(calls))
    tab = Workbench(**TINY).parallel
    tab.nprocs.value = "1,two"
    assert tab.measure() is None and not calls
    assert "processes=&#x27;1,two&#x27; is not allowed" in tab.status.value
    assert "whole numbers from 1 to 64" in tab.status.value and not tab.measure_button.disabled


# -- measured scaling -------------------------------------------------------------------------------------
def test_measure_scaling_calls_tc_scaling_and_shows_table_words_and_plot(monkeypatch):
    calls: list = []
    monkeypatch.setattr(tc, "scaling", _fake_scaling(calls))
    panel = Workbench(**TINY)
    tab = panel.parallel
    assert panel.tabs.get_title(3) == "Data parallel" and tab.box is panel.tabs.children[3]
    tab.nprocs.value, tab.rounds.value = "1, 2", 2
    tab.measure().join(30)
    assert len(calls) == 1
    call = calls[0]
    assert call["spec"] == panel.controls.spec and call["nprocs"] == [1, 2] and call["rounds"] == 2
    assert isinstance(call["stop"], threading.Event)
    assert tab.scaling is not None and not tab.running and not tab.measure_button.disabled
    table = tab.scaling_table.value
    assert "global batch" in table and "<td>16</td>" in table and "scaling factor 0.90×" in table
    assert "global batch 16" in tab.scaling_text.value
    (fig,) = tab.scaling_plot.children
    assert isinstance(fig, go.FigureWidget) and list(fig.data[0].y) == [1.0, 0.9]
    assert len(tab.progress.box.children) == 2            # one progress row per job
    assert "Done" in tab.status.value


def test_measure_scaling_uses_the_chosen_backend(monkeypatch):
    calls: list = []
    monkeypatch.setattr(tc, "scaling", _fake_scaling(calls))
    tab = Workbench(**TINY).parallel
    tab.backend.value = "inductor"
    tab.measure().join(30)
    assert calls[0]["spec"].backend == "inductor"


def test_a_preflight_error_is_one_readable_line(monkeypatch):
    error = tc.SpecError("nproc", 2, "1..1 with threads=2", "nproc=2 processes × threads=2 is more than the 2 "
                         "core(s) this process may use;\nallowed: nproc × threads <= 2")
    monkeypatch.setattr(tc, "scaling", _fake_scaling([], error=error))
    tab = Workbench(**TINY).parallel
    tab.measure().join(30)
    status = tab.status.value
    assert "The scaling measurement failed: SpecError: nproc=2 processes × threads=2" in status
    assert "\n" not in status and "Traceback" not in status
    assert not tab.running and not tab.measure_button.disabled and tab.stop_button.disabled


def test_the_real_preflight_refuses_more_processes_than_cores(monkeypatch):
    """tc.scaling itself: every process count is checked before any job starts (threads = all cores here)."""
    import tcbench.runner.process as runner

    monkeypatch.setattr(runner, "run", lambda *a, **k: pytest.fail("a job was started"))
    panel = Workbench(**{**TINY, "threads": len(os.sched_getaffinity(0))})
    tab = panel.parallel
    tab.nprocs.value = "1,2"
    tab.measure().join(60)
    assert "SpecError: nproc=2 processes × threads=" in tab.status.value, tab.status.value
    assert tab.scaling is None


def test_stop_ends_the_measurement_and_keeps_what_was_measured(monkeypatch):
    monkeypatch.setattr(tc, "scaling", _fake_scaling([], hold=threading.Event()))
    tab = Workbench(**TINY).parallel
    thread = tab.measure()
    assert tab.running and tab.measure_button.disabled and not tab.stop_button.disabled
    tab.stop()
    thread.join(30)
    assert not thread.is_alive() and tab.scaling is not None and "Stopped" in tab.status.value


def test_one_measurement_at_a_time_the_other_tabs_wait_and_say_why(monkeypatch):
    """A scaling measurement holds the panel: the Run tab's and the Tuning tab's start buttons are off, pressing
    them starts nothing and names what runs, the Run tab's fields are locked; Stop gives everything back."""
    monkeypatch.setattr(tc, "scaling", _fake_scaling([], hold=threading.Event()))
    monkeypatch.setattr(tc, "compare", lambda *a, **k: pytest.fail("a paired run started beside the measurement"))
    bench = Workbench(**TINY)
    thread = bench.parallel.measure()
    assert bench.controls.owner == "scaling measurement"
    assert bench.run_button.disabled and bench.noise_button.disabled and bench.controls.batch_size.disabled
    assert bench.tuning.find_button.disabled and bench.tuning.retune_button.disabled
    assert bench.run() is None and "scaling measurement is running" in bench.status.value
    assert bench.tuning.find() is None and "scaling measurement is running" in bench.tuning.message.value
    bench.parallel.stop()
    thread.join(30)
    assert bench.controls.owner is None and not bench.run_button.disabled and not bench.controls.batch_size.disabled
    assert not bench.tuning.find_button.disabled and not bench.parallel.measure_button.disabled


def test_an_invalid_run_tab_is_reported_not_run(monkeypatch):
    calls: list = []
    monkeypatch.setattr(tc, "scaling", _fake_scaling(calls))
    panel = Workbench(**TINY)
    panel.controls.set(batch_size=0)
    assert panel.parallel.measure() is None and not calls
    assert "Fix the Run tab first" in panel.parallel.status.value and "batch_size" in panel.parallel.status.value


# -- projection -------------------------------------------------------------------------------------------
def test_project_shows_the_table_the_assumptions_and_the_plot(monkeypatch):
    calls: list = []
    real = tc.project_scaling
    monkeypatch.setattr(tc, "project_scaling", lambda **kw: calls.append(kw) or real(**kw))
    panel = Workbench(**TINY)
    tab = panel.parallel
    assert tab.profiles.value == ("ml.p3.16xlarge", "ml.p3dn.24xlarge", "ml.p4d.24xlarge")
    assert "this-machine" not in [name for _, name in tab.profiles.options]
    proj = tab.project()
    assert proj is not None and tab.projection is proj, tab.projection_message.value
    assert calls[0]["spec"] == panel.controls.spec and calls[0]["nodes"] == [1, 2, 4, 8]
    assert calls[0]["efa"] is None and calls[0]["profiles"] == list(tab.profiles.value)
    table = tab.projection_table.value
    assert "ml.p4d.24xlarge" in table and "global batch" in table and "scaling factor" in table
    assert "An estimate, not a measurement" in tab.projection_text.value
    (fig,) = tab.projection_plot.children
    assert isinstance(fig, go.FigureWidget) and len(fig.data) == 3
    tab.profiles.value, tab.nodes.value, tab.efa.value = ("ml.p4d.24xlarge",), "1,2", "both"
    proj = tab.project()
    assert calls[-1]["efa"] == "both" and calls[-1]["nodes"] == [1, 2]
    assert set(proj.table["efa"]) == {True, False} and len(tab.projection_plot.children[0].data) == 2


def test_project_refuses_bad_nodes_and_no_profile():
    tab = Workbench(**TINY).parallel
    tab.nodes.value = "1,0"
    assert tab.project() is None
    assert "nodes=&#x27;1,0&#x27; is not allowed" in tab.projection_message.value
    tab.nodes.value, tab.profiles.value = "1,2", ()
    assert tab.project() is None and "select one or more instance profiles" in tab.projection_message.value


def test_an_engine_error_of_the_projection_is_one_line(monkeypatch):
    def broken(**kw):
        raise ValueError("spec.model='x' is not allowed;\nthe parameter count is known for catalog models")
    monkeypatch.setattr(tc, "project_scaling", broken)
    tab = Workbench(**TINY).parallel
    assert tab.project() is None
    assert "The projection failed: ValueError: spec.model=" in tab.projection_message.value
    assert "\n" not in tab.projection_message.value


# -- learning rate for the global batch -------------------------------------------------------------------
def test_predict_lr_for_n_processes(monkeypatch):
    calls: list = []

    def predict_lr(spec, new_batch_size=None, *args, nproc=None, **kw):
        calls.append(dict(spec=spec, new_batch_size=new_batch_size, nproc=nproc, **kw))
        return FakePrediction()

    monkeypatch.setattr(tc, "predict_lr", predict_lr)
    panel = Workbench(**TINY)
    tab = panel.parallel
    tab.lr_nproc.value = 4
    assert tab.lr_button.description == "Predict LR for 4 processes"
    tab.run_predict().join(30)
    assert len(calls) == 1 and calls[0]["nproc"] == 4 and calls[0]["new_batch_size"] is None
    assert calls[0]["spec"] == panel.controls.spec
    assert "global batch 8 (1 × 8) → 32 (4 × 8)" in tab.lr_batches.value
    assert "noise scale (surge form)" in tab.lr_table.value
    assert "lr 0.002 → 0.003" in tab.lr_message.value and "square-root rule" in tab.lr_advice.value
    assert isinstance(tab.prediction, FakePrediction) and not tab.lr_button.disabled


def test_a_failed_prediction_is_one_line(monkeypatch):
    def predict_lr(spec, *args, nproc=None, **kw):
        raise tc.SpecError("nproc", nproc, "a whole number in 1..64")
    monkeypatch.setattr(tc, "predict_lr", predict_lr)
    tab = Workbench(**TINY).parallel
    tab.run_predict().join(30)
    assert "The learning-rate prediction failed: SpecError: nproc=2 is not allowed" in tab.lr_message.value


def test_the_call_fits_predict_lrs_signature():
    """The tab calls ``tc.predict_lr(spec, nproc=N, stop=…, observer=…)``: the engine's signature takes that."""
    import inspect

    inspect.signature(tc.predict_lr).bind(tc.JobSpec(**TINY), nproc=4, stop=threading.Event(), observer=print)


# -- the Run tab's processes ------------------------------------------------------------------------------
def test_the_run_tabs_processes_reach_the_spec_and_show_the_global_batch(monkeypatch, cores):
    specs: list = []
    monkeypatch.setattr(tc, "compare", lambda spec, **kw: specs.append(spec))
    panel = Workbench(**TINY)
    c = panel.controls
    assert c.spec.nproc == 1 and c.batch_help.value == ""
    c.set(nproc=2)
    assert c.spec is not None and c.spec.nproc == 2 and c.spec.global_batch == 16
    assert "global batch 16" in c.batch_help.value and "2 processes (global batch 16)" in c.more_summary.value
    seen: list = []
    panel.status.observe(lambda ch: seen.append(ch["new"]), names="value")
    panel.run().join(30)
    assert specs and specs[0].nproc == 2
    assert any("global batch 16 (8 per process × 2 processes) × seq 32" in s for s in seen), seen


@pytest.mark.parametrize("nproc, words", [(0, "nproc=0"), (65, "nproc=65"), (9, "nproc=9 processes × threads=1")])
def test_bad_processes_on_the_run_tab_are_shown_next_to_the_control(nproc, words, cores):
    panel = Workbench(**TINY)
    panel.controls.set(nproc=nproc)
    assert panel.controls.spec is None and panel.run_button.disabled
    assert words in panel.controls.errors["nproc"].value
    assert panel.controls.more_open   # the control is under "More settings": opened so the message is seen


def test_history_opens_a_stored_scaling_measurement_on_the_data_parallel_tab(monkeypatch):
    spec = tc.JobSpec(model="gpt2", size="tiny", batch_size=8, threads=1)
    stored = FakeScaling(spec, (1, 2))
    stored.comparison_id, stored.results = 7, []

    class Cmp:
        kind = "scaling"

    monkeypatch.setattr(tc, "load_comparison", lambda cid: Cmp())
    monkeypatch.setattr(tc, "load_scaling", lambda cid: stored if cid == 7 else None)
    panel = Workbench(**TINY)
    shown: list = []
    panel.show = shown.append   # a backend comparison would be drawn on the Run tab: it must not be
    panel.history._on_load = shown.append
    assert panel.history.load(7) is stored and not shown
    assert panel.tabs.selected_index == 3 and panel.parallel.scaling is stored
    assert "scaling factor 0.90×" in panel.parallel.scaling_table.value
    assert "#7 from the store" in panel.parallel.status.value and "Data parallel tab" in panel.history.message.value
