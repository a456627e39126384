"""The panel's logic without a browser: set widget values, press the buttons programmatically,
wait for the background thread, then check the figures' traces, the table and the words.

The fast tests replace ``tc.compare`` by a scripted one that sends the same events; the
``integration`` test runs real tiny jobs (eager + inductor) through the real engine.
"""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest

import tcbench as tc
from tcbench import Comparison, JobResult, StepRecord
from tcbench.widgets import Workbench

TINY = dict(model="bert-base-cased", size="tiny", batch_size=4, seq_len=32, steps=8, warmup_steps=2)


@pytest.fixture(autouse=True)
def _own_store(tmp_path, monkeypatch):
    monkeypatch.setenv("TCBENCH_DB", str(tmp_path / "panel.db"))


def _scripted_compare(step_s: dict, status: dict | None = None, pause: float = 0.0):
    """A stand-in for tc.compare: same events and return type, no processes."""
    status = status or {}

    def compare(spec, backends=("inductor",), rounds=1, observer=None, stop=None):
        order = [spec.backend, *backends]
        cmp = Comparison(spec=spec, backends=order, rounds=rounds, comparison_id=None)
        notify = observer or (lambda e: None)
        for rnd in range(rounds):
            for i, backend in enumerate(order):
                if stop is not None and stop.is_set():
                    break
                job, js = f"{backend}#{rnd}", dataclasses.replace(spec, backend=backend)
                notify({"type": "start", "job": job, "backend": backend, "round": rnd, "run_id": i, "spec": js})
                notify({"type": "log", "job": job, "line": f"[tcbench] Found configuration for compiler {backend}."})
                recs, end = [], status.get(backend, "ok")
                for n in range(spec.steps):
                    if stop is not None and stop.is_set():
                        end = "interrupted"
                        break
                    if end != "ok" and n == 3:
                        break
                    s = step_s[backend] * (20 if n < spec.warmup_steps and backend != "eager" else 1)
                    rec = StepRecord(step=n, step_s=s, samples_s=spec.batch_size / s, tokens_s=spec.tokens_per_step / s,
                                     mem_bytes=(40 + 10 * i) * 2**20, loss=0.7 - 0.01 * n, warmup=n < spec.warmup_steps,
                                     seq_len=spec.seq_len)
                    recs.append(rec)
                    notify({"type": "step", "job": job, "backend": backend, "run_id": i, "record": rec})
                    time.sleep(pause)
                med = step_s[backend]
                ok = end == "ok"
                res = JobResult(spec=js, status=end, run_id=i, records=recs,
                                error="" if ok else "RuntimeError: out of memory (scripted)",
                                median_step_s=med if ok else None, samples_s=spec.batch_size / med if ok else None,
                                tokens_s=spec.tokens_per_step / med if ok else None,
                                compile_latency_s=(19 * med * spec.warmup_steps if backend != "eager" else None) if ok else None,
                                peak_mem_bytes=(40 + 10 * i) * 2**20 if ok else None, final_loss=recs[-1].loss if recs else None,
                                recompiles_after_warmup=0)
                notify({"type": "end", "job": job, "backend": backend, "run_id": i, "result": res})
                cmp.results.append(res)
                cmp.rounds_of.append(rnd)
        return cmp

    return compare


def _panel(**values) -> Workbench:
    panel = Workbench()
    panel.controls.set(**{**TINY, **values})
    return panel


def test_labels_show_family_params_and_profile_figures():
    panel = Workbench()
    labels = [label for label, _ in panel.controls.model.options]
    assert any("bert" in label and "params" in label for label in labels)
    profiles = panel.controls.profile.options
    assert profiles[0][1] == "this-machine" and profiles[0][0].startswith("this machine")
    gpu = [label for label, name in profiles if name != "this-machine"]
    assert gpu and all("GiB" in label for label in gpu) and any("/h" in label for label in gpu)


@pytest.mark.parametrize("field, value, control", [
    ("batch_size", 0, "batch_size"), ("seq_len", 100000, "seq_len"), ("lr", -1.0, "lr"),
    ("warmup_steps", 50, "steps"), ("rounds", 0, "rounds"),
])
def test_invalid_input_is_refused_next_to_its_control(field, value, control, monkeypatch):
    called = []
    monkeypatch.setattr(tc, "compare", lambda *a, **k: called.append(1))
    panel = _panel(**{field: value})
    assert panel.controls.spec is None
    assert panel.run_button.disabled
    assert "⚠" in panel.controls.errors[control].value
    assert panel.run() is None and not called
    panel.controls.set(**{field: {**TINY, "rounds": 1, "lr": 5e-5}[field]})
    assert not panel.run_button.disabled and panel.controls.errors[control].value == ""


def test_keyword_presets_fill_the_controls():
    panel = Workbench(model="distilbert-base-uncased", steps=12, warmup_steps=3, backends=("inductor", "xla"))
    assert panel.controls.spec.model == "distilbert-base-uncased" and panel.controls.spec.steps == 12
    assert panel.controls.selected_backends() == ("inductor", "xla")


def test_no_compiled_backend_is_refused():
    panel = _panel(backends=())
    assert panel.run_button.disabled and "at least one compiled backend" in panel.controls.errors["backends"].value


def test_run_paired_draws_live_figures_table_and_words(monkeypatch, tmp_path):
    monkeypatch.setattr(tc, "compare", _scripted_compare({"eager": 0.2, "inductor": 0.1}))
    panel = _panel(backends=("inductor",))
    main = threading.current_thread()
    seen = []
    real_observe = panel._observe
    monkeypatch.setattr(panel, "_observe", lambda e: (seen.append(threading.current_thread()), real_observe(e)))
    panel.run_button.click()
    cmp = panel.wait(timeout=30)
    assert cmp is not None and [r.status for r in cmp.results] == ["ok", "ok"]
    assert seen and all(t is not main for t in seen), "compare must run off the kernel's main thread"
    drawn = panel.figures.traces()
    assert set(drawn["loss"]) == {"eager", "inductor"}
    assert set(drawn["step_time"]) == {"eager", "inductor"}
    assert any("2.00×" in text for text in drawn["throughput_text"])
    assert "<table" in panel.summary.value and "speedup" in panel.summary.value
    assert "pays off after" in panel.words.value
    assert panel.failures.value == ""
    assert "Done" in panel.status.value and not panel.run_button.disabled and panel.stop_button.disabled
    assert len(panel.progress.box.children) == 2
    assert "Found configuration" in panel.log.value
    assert panel.comparison.summary()["backend"].tolist() == ["eager", "inductor"]


def test_slowdown_and_failure_are_told_in_words(monkeypatch):
    monkeypatch.setattr(tc, "compare", _scripted_compare({"eager": 0.1, "inductor": 0.2, "xla": 0.1},
                                                         status={"xla": "oom"}))
    panel = _panel(backends=("inductor", "xla"))
    panel.run()
    panel.wait(timeout=30)
    assert "slower" in panel.words.value and "never" in panel.words.value
    assert "xla" in panel.failures.value and "oom" in panel.failures.value and "out of memory" in panel.failures.value
    assert not panel.run_button.disabled  # the panel stays usable
    assert panel.run() is not None
    panel.wait(timeout=30)


def test_stop_button_interrupts_and_keeps_measured_steps(monkeypatch):
    monkeypatch.setattr(tc, "compare", _scripted_compare({"eager": 0.1, "inductor": 0.1}, pause=0.05))
    panel = _panel(steps=200, warmup_steps=2)
    panel.run()
    deadline = time.monotonic() + 10
    while not panel.progress._rows and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    assert not panel.stop_button.disabled
    panel.stop_button.click()
    t0 = time.monotonic()
    cmp = panel.wait(timeout=10)
    assert time.monotonic() - t0 < 2.0
    assert [r.status for r in cmp.results] == ["interrupted"] and cmp.results[0].records
    assert "Stopped" in panel.status.value and "interrupted" in panel.failures.value


def test_a_crashing_engine_is_a_message_not_an_exception(monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("engine exploded")
    monkeypatch.setattr(tc, "compare", boom)
    panel = _panel()
    panel.run()
    assert panel.wait(timeout=10) is None
    assert "engine exploded" in panel.status.value and not panel.run_button.disabled


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_real_paired_run_history_and_export(tmp_path):
    """Real tiny jobs through tc.compare (eager + inductor), then History and Export."""
    panel = _panel(backends=("inductor",))
    panel.run_button.click()
    cmp = panel.wait(timeout=580)
    assert cmp is not None, panel.status.value
    assert [r.status for r in cmp.results] == ["ok", "ok"], panel.failures.value
    drawn = panel.figures.traces()
    assert {"eager", "inductor"} <= set(drawn["loss"])
    assert any("×" in text for text in drawn["throughput_text"])
    assert "<table" in panel.summary.value
    # History: the comparison is in the store and redraws without rerunning
    panel.tabs.selected_index = 1
    assert cmp.comparison_id in panel.history.picker.options[1][1:] or any(
        v == cmp.comparison_id for _, v in panel.history.picker.options)
    panel.summary.value = ""
    panel.history.picker.value = cmp.comparison_id
    assert panel.comparison.comparison_id == cmp.comparison_id and "<table" in panel.summary.value
    assert {"eager", "inductor"} <= set(panel.figures.traces()["loss"])
    # Export
    out = panel.export(tmp_path / "report.html")
    assert out is not None and out.read_text().lstrip().lower().startswith(("<!doctype", "<html"))
