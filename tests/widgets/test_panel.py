"""The panel's logic without a browser: set widget values, press the buttons programmatically,
wait for the background thread, then check the figures' traces, the table, the verdicts and the status.

The fast tests replace ``tc.compare`` (and ``tc.noise_floor``) by scripted ones that send the engine's
events (start, phase, compiler, step, log, end) and return real ``Comparison`` objects, so the verdicts
come from the engine's own summary; the ``integration`` test runs real tiny jobs through the real engine.
"""

from __future__ import annotations

import dataclasses
import html
import re
import statistics
import threading
import time

import pytest

import tcbench as tc
from tcbench import Comparison, JobResult, StepRecord
from tcbench.core.extras import CompilerSettings
from tcbench.measure.interval import PILOT_ROUNDS, RoundsRule
from tcbench.widgets import Workbench
from tcbench.widgets._controls import MORE
from tcbench.widgets._live import LiveFigures

TINY = dict(model="gpt2", size="tiny", batch_size=4, seq_len=32, steps=12, warmup_steps=2)
RESTORE = {**TINY, "rounds": 3, "lr": 2e-3, "threads": 1}


@pytest.fixture(autouse=True)
def _own_store(tmp_path, monkeypatch):
    monkeypatch.setenv("TCBENCH_DB", str(tmp_path / "panel.db"))


def _all_backends_available(monkeypatch) -> None:
    """Every backend's box enabled, whatever is installed here (the leg on the newest torch has no torch_xla): for
    tests of presets and words, not of availability."""
    import pandas as pd

    monkeypatch.setattr(tc, "backends", lambda: pd.DataFrame([dict(backend=b, available=True, reason="installed")
                                                              for b in ("eager", "inductor", "xla")]))


def _figures(spec, step_s: float, recs: list) -> tc.JobFigures:
    steady = [r.step_s for r in recs if not r.warmup]
    med = statistics.median(steady)
    return tc.JobFigures(median_step_s=med, samples_s=spec.batch_size / med, tokens_s=spec.tokens_per_step / med,
                         steady_steps=len(steady), step_cv=statistics.pstdev(steady) / statistics.fmean(steady),
                         compile_latency_s=19 * step_s * spec.warmup_steps if spec.compiled else None,
                         peak_mem_bytes=recs[-1].mem_bytes, final_loss=recs[-1].loss, recompiles_after_warmup=0)


def _job(spec, label: str, rnd: int, run_id: int, step_s: float, status: str, notify, stop, pause: float):
    """One scripted job: the runner's events in the worker's order, then its JobResult."""
    base = {"job": f"{label}#{rnd}", "backend": spec.backend, "label": label, "run_id": run_id}
    notify(tc.events.JobStarted(**base, round=rnd, spec=spec))
    notify(tc.events.PhaseChanged(**base, phase="loading"))
    if spec.compiled:
        settings = CompilerSettings(backend=spec.backend, mode=spec.compile_mode, precision=spec.precision, debug=False)
        notify(tc.events.CompilerConfigured(**base, settings=settings))
    notify(tc.events.PhaseChanged(**base, phase="compiling" if spec.compiled else "warmup"))
    recs, end = [], status
    for n in range(spec.steps):
        if stop is not None and stop.is_set():
            end = "interrupted"
            break
        if end != "ok" and n == 3:
            break
        if n == spec.warmup_steps:
            notify(tc.events.PhaseChanged(**base, phase="measuring"))
        warm = n < spec.warmup_steps
        s = step_s * (20 if warm and spec.compiled else 1) * (1 + 0.02 * (n % 3 - 1))  # a little spread
        rec = StepRecord(step=n, step_s=s, samples_s=spec.batch_size / s, tokens_s=spec.tokens_per_step / s,
                         mem_bytes=(40 + 10 * tc.BACKENDS.index(spec.backend)) * 2**20, loss=8.3 - 0.05 * n,
                         warmup=warm, seq_len=spec.seq_len)
        recs.append(rec)
        notify(tc.events.StepMeasured(**base, record=rec))
        time.sleep(pause)
    ok = end == "ok"
    res = JobResult(spec=spec, status=end, run_id=run_id, records=recs, round=rnd,
                    label=label if label != spec.backend else "",
                    error="" if ok else "RuntimeError: out of memory (scripted)",
                    figures=_figures(spec, step_s, recs) if ok else tc.JobFigures())
    notify(tc.events.JobEnded(**base, result=res))
    return res


def _scripted_compare(step_s: dict, status: dict | None = None, pause: float = 0.0, calls: list | None = None):
    """A stand-in for tc.compare: the same events, alternating rounds (A B, B A, …) and return type, no processes."""
    status = status or {}

    def compare(spec, backends=("inductor",), rounds=None, observer=None, stop=None, resolve=None, budget_s=None):
        if calls is not None:
            calls.append(dict(spec=spec, backends=tuple(backends), rounds=rounds, resolve=resolve, budget_s=budget_s))
        spec = tc.preflight(spec)   # as tc.compare does: the profile's budget is in the spec every event carries
        labels = [spec.backend, *[b + " (A/A)" if b == spec.backend else b for b in backends]]
        rule = RoundsRule(resolve, budget_s) if resolve else None
        rounds = rounds or PILOT_ROUNDS                  # adaptive rounds: the first stage only
        cmp = Comparison(spec=spec, backends=labels, rounds=rounds, comparison_id=None, rule=rule,
                         stop_reason="resolution reached" if rule else "all rounds ran")
        for rnd in range(rounds):
            for label in (labels if rnd % 2 == 0 else labels[::-1]):
                if stop is not None and stop.is_set():
                    break
                backend = label.removesuffix(" (A/A)")
                js = dataclasses.replace(spec, backend=backend)
                cmp.results.append(_job(js, label, rnd, len(cmp.results), step_s[backend], status.get(backend, "ok"),
                                        observer or (lambda e: None), stop, pause))
        return cmp

    return compare


def _scripted_noise_floor(calls: list, pause: float = 0.0):
    """A stand-in for tc.noise_floor: the job against itself through the scripted compare."""
    def noise_floor(spec, rounds=3, observer=None, stop=None):
        calls.append(dict(spec=spec, rounds=rounds))
        cmp = _scripted_compare({"eager": 0.1}, pause=pause)(spec, [spec.backend], rounds, observer, stop)
        row = cmp.summary().iloc[1]
        return tc.NoiseFloor(cmp, row["speedup"], row["speedup_ci_low"], row["speedup_ci_high"],
                             row["verdict_kind"], row["verdict"])

    return noise_floor


def _panel(**values) -> Workbench:
    panel = Workbench()
    panel.controls.set(**{**TINY, **values})
    return panel


def _run(panel: Workbench) -> Comparison:
    panel.run_button.click()
    return panel.wait(timeout=30)


def _badges(words: str) -> list[str]:
    """The verdict kinds shown as badges, in order (the style block names every kind, so read the spans)."""
    return re.findall(r'<span class="tcb-kind tcb-kind-([a-z-]+)">', words)


def _inside(box) -> list:
    """Every widget under ``box`` (children of children, …)."""
    out = []
    for child in getattr(box, "children", ()):
        out += [child, *_inside(child)]
    return out


def _watch(widget) -> list[str]:
    seen: list[str] = []
    widget.observe(lambda ch: seen.append(ch["new"]), names="value")
    return seen


# -- controls --------------------------------------------------------------------------------------------
def test_default_job_is_tiny_gpt2_on_one_thread_with_three_rounds():
    panel = Workbench()
    spec = panel.controls.spec
    assert (spec.model, spec.size, spec.batch_size, spec.seq_len, spec.steps, spec.warmup_steps) == \
        ("gpt2", "tiny", 8, 64, 40, 5)
    assert spec.lr == pytest.approx(2e-3) and spec.threads == 1
    assert panel.controls.rounds.value == 3
    assert "keeps the measurement honest" in panel.controls.threads.tooltip
    assert "keeps the measurement honest" in panel.controls.threads_help.value


def test_labels_show_family_params_and_profile_figures():
    panel = Workbench()
    labels = [label for label, _ in panel.controls.model.options]
    assert any("gpt2" in label and "params" in label for label in labels)
    profiles = panel.controls.profile.options
    assert profiles[0][1] == "this-machine" and profiles[0][0].startswith("this machine")
    gpu = [label for label, name in profiles if name != "this-machine"]
    assert gpu and all("GiB" in label for label in gpu) and any("/h" in label for label in gpu)


@pytest.mark.parametrize("field, value, control", [
    ("batch_size", 0, "batch_size"), ("seq_len", 100000, "seq_len"), ("lr", -1.0, "lr"),
    ("warmup_steps", 50, "warmup_steps"), ("rounds", 0, "rounds"), ("threads", 0, "threads"),
])
def test_invalid_input_is_refused_next_to_its_control(field, value, control, monkeypatch):
    called = []
    monkeypatch.setattr(tc, "compare", lambda *a, **k: called.append(1))
    panel = _panel(**{field: value})
    assert panel.controls.spec is None
    assert panel.run_button.disabled and panel.noise_button.disabled
    assert "⚠" in panel.controls.errors[control].value
    assert [name for name, err in panel.controls.errors.items() if err.value] == [control]
    # a field folded under "More settings" opens it, so its message is seen; a shown field leaves it closed
    assert panel.controls.more_open == (control in MORE)
    assert panel.controls.more_box.layout.display == ("flex" if control in MORE else "none")
    assert html.escape(panel.controls.error) in panel.status.value   # and beside the Run button as well
    assert panel.run() is None and not called
    panel.controls.set(**{field: RESTORE[field]})
    assert not panel.run_button.disabled and panel.controls.errors[control].value == ""


def test_the_form_shows_model_profile_batch_and_backends_and_folds_the_rest():
    panel = Workbench()
    c = panel.controls
    assert not c.more_open and c.more_box.layout.display == "none"
    folded = _inside(c.more_box)
    shown = [x for x in _inside(c.box()) if x not in folded and x is not c.more_box]
    assert all(getattr(c, name) in folded for name in MORE)
    assert [name for name in c.FIELDS + c.ROUND_FIELDS if getattr(c, name) in shown] == ["model", "profile", "batch_size"]
    assert all(cb in shown for cb in c.backends.values()) and c.eager_text in shown
    run_tab = panel.tabs.children[0]
    assert panel.run_button in _inside(run_tab) and panel.run_button not in folded
    summary = c.more_summary.value   # the folded values at a glance
    assert "seq 64" in summary and "40 steps (5 warmup)" in summary and "until ±5 % or 60 s" in summary
    c.show_more()
    assert c.more_open and c.more_box.layout.display == "flex"
    c.set(steps=12, rounds=1)
    assert "12 steps" in c.more_summary.value and "1 round " in c.more_summary.value
    c.show_more(False)
    assert c.more_box.layout.display == "none"


def test_a_preset_with_a_bad_folded_field_opens_more_settings():
    panel = Workbench(warmup_steps=50)
    assert panel.controls.more_open and "warmup_steps=50" in panel.controls.errors["warmup_steps"].value
    assert panel.run_button.disabled


def test_each_backend_box_carries_its_own_label(monkeypatch):
    import pandas as pd
    monkeypatch.setattr(tc, "backends", lambda: pd.DataFrame([
        dict(backend="eager", available=True, reason="native PyTorch"),
        dict(backend="inductor", available=True, reason="torch.compile (Inductor)"),
        dict(backend="xla", available=False, reason="torch_xla is not installed")]))
    c = Workbench().controls
    assert c.backends["inductor"].description == "inductor — torch.compile (Inductor)"
    assert c.backends["xla"].description == "xla — unavailable: torch_xla is not installed"
    assert c.backends["xla"].disabled and c.selected_backends() == ("inductor",)
    assert "eager" in c.eager_text.value and "always runs" in c.eager_text.value   # text, not a box
    c.set_disabled(False)
    assert c.backends["xla"].disabled   # still unavailable after a run


def test_keyword_presets_fill_the_controls(monkeypatch):
    _all_backends_available(monkeypatch)
    panel = Workbench(model="distilbert-base-uncased", steps=12, warmup_steps=3, backends=("inductor", "xla"),
                      rounds=1, threads=2)
    spec = panel.controls.spec
    assert spec.model == "distilbert-base-uncased" and spec.steps == 12 and spec.threads == 2
    assert panel.controls.selected_backends() == ("inductor", "xla") and panel.controls.rounds.value == 1


def test_no_compiled_backend_is_refused():
    panel = _panel(backends=())
    assert panel.run_button.disabled and "at least one compiled backend" in panel.controls.errors["backends"].value


def test_threads_and_rounds_reach_the_engine(monkeypatch):
    calls: list = []
    monkeypatch.setattr(tc, "compare", _scripted_compare({"eager": 0.2, "inductor": 0.1}, calls=calls))
    panel = _panel(threads=2)
    _run(panel)   # the default: adaptive rounds
    assert calls[-1]["spec"].threads == 2 and calls[-1]["rounds"] is None
    assert (calls[-1]["resolve"], calls[-1]["budget_s"]) == (tc.DEFAULT_RESOLVE, tc.DEFAULT_BUDGET_S)
    assert "resolution reached" in panel.words.value and f"{PILOT_ROUNDS} rounds (until ±5% or 60 s)" in panel.words.value
    panel.controls.set(threads=1, rounds=1)   # a number of rounds asked for: fixed
    _run(panel)
    assert calls[-1]["spec"].threads == 1 and calls[-1]["rounds"] == 1 and calls[-1]["resolve"] is None
    panel.controls.set(resolve_pct=3.0, budget_s=120.0)
    _run(panel)
    assert (calls[-1]["rounds"], calls[-1]["resolve"], calls[-1]["budget_s"]) == (None, 0.03, 120.0)
    panel.controls.set(resolve_pct=-1.0)
    assert panel.run_button.disabled and "resolve_pct=-1.0" in panel.controls.errors["resolve_pct"].value
    panel.controls.resolve_pct.value = 5.0
    panel.controls.rounds.value = 2   # typed in the box: that many rounds, not the adaptive default's
    assert panel.controls.resolve_pct.value == 0 and panel.controls.rounds_text() == "2 rounds"
    _run(panel)
    assert (calls[-1]["rounds"], calls[-1]["resolve"]) == (2, None)


# -- the figure ------------------------------------------------------------------------------------------
def test_no_empty_charts_before_the_first_run(monkeypatch):
    monkeypatch.setattr(tc, "compare", _scripted_compare({"eager": 0.2, "inductor": 0.1}))
    monkeypatch.setattr(tc, "latest_noise_floor", lambda spec: None)
    monkeypatch.setattr(tc, "noise_floor", _scripted_noise_floor([]))
    panel = _panel(rounds=1)
    figs = panel.figures
    assert not figs.shown and figs.container.layout.display == "none" and figs.intro.layout.display != "none"
    intro = figs.intro.value
    for words in ("Step time", "Throughput", "Peak memory", "Training loss", "verdict", "95 % interval"):
        assert words in intro, words
    panel.measure_noise_floor()   # an A/A run draws no comparison: still no charts
    panel.wait(timeout=30)
    assert not figs.shown
    _run(panel)
    assert figs.shown and figs.container.layout.display == "flex" and figs.intro.layout.display == "none"
    loaded = Workbench()          # a comparison picked on the History tab shows the charts too
    loaded.show(panel.comparison)
    assert loaded.figures.shown and set(loaded.figures.traces()["loss"]) == {"eager", "inductor"}


def _budget_notes(figs: LiveFigures) -> list[str]:
    return [a.text for a in figs.figure.layout.annotations if "budget" in a.text]


def _budget_lines(figs: LiveFigures) -> list[float]:
    return [s.y0 for s in figs.figure.layout.shapes if s.type == "line" and s.yref == "y2"]


def test_memory_axis_stays_linear_and_a_far_budget_is_a_note(monkeypatch):
    monkeypatch.setattr(tc, "compare", _scripted_compare({"eager": 0.2, "inductor": 0.1}))
    panel = _panel(profile="ml.g5.2xlarge", rounds=1)
    axis_types = []
    real_flush = panel.figures.flush

    def flush(*a, **k):
        real_flush(*a, **k)
        axis_types.append(panel.figures.figure.layout.yaxis2.type)

    monkeypatch.setattr(panel.figures, "flush", flush)
    _run(panel)
    figs = panel.figures
    assert axis_types and set(axis_types) == {"linear"}     # linear throughout the run, budget or not
    assert figs.budget_mb == pytest.approx(24 * 1024)
    assert _budget_lines(figs) == []                        # 24 GiB above 40-50 MiB bars: no line squashing them
    assert _budget_notes(figs) == ["memory budget 24.0 GiB — off the chart (492× the tallest bar)"]
    assert [t.y[0] for t in figs.figure.data if t.meta == "memory" and t.visible] == [40.0, 50.0]


def test_a_budget_near_the_bars_is_a_line_on_the_linear_axis():
    figs = LiveFigures(["eager", "inductor"])
    figs.reset(["eager", "inductor"], budget_mb=100.0)
    assert figs.shown and _budget_notes(figs) == ["memory budget 0.1 GiB"] and _budget_lines(figs) == []
    for backend, mb in (("eager", 40), ("inductor", 50)):
        rec = StepRecord(step=0, step_s=0.1, samples_s=40, tokens_s=0, mem_bytes=mb * 2**20, loss=8.0, warmup=False,
                         seq_len=32)
        figs.add_step(backend, rec, 4)
    figs.flush(force=True)
    assert _budget_lines(figs) == [100.0] and _budget_notes(figs) == []   # within 4× the tallest bar: drawn
    assert figs.figure.layout.yaxis2.type == "linear"
    figs.set_budget(1000.0)                                               # 20× the tallest bar: a note
    assert _budget_lines(figs) == [] and _budget_notes(figs) == ["memory budget 1.0 GiB — off the chart "
                                                                  "(20× the tallest bar)"]
    figs.set_budget(None)
    assert _budget_lines(figs) == [] and _budget_notes(figs) == []


# -- a paired run ----------------------------------------------------------------------------------------
def test_run_paired_draws_live_figures_table_and_verdict(monkeypatch):
    monkeypatch.setattr(tc, "compare", _scripted_compare({"eager": 0.2, "inductor": 0.1}))
    panel = _panel(backends=("inductor",))
    main = threading.current_thread()
    threads, live_texts = [], set()
    real_observe = panel._observe

    def observe(event):
        threads.append(threading.current_thread())
        real_observe(event)
        live_texts.update(panel.figures.traces()["throughput_text"])

    monkeypatch.setattr(panel, "_observe", observe)
    cmp = _run(panel)
    assert cmp is not None and [r.status for r in cmp.results] == ["ok"] * 2 * PILOT_ROUNDS
    assert threads and all(t is not main for t in threads), "compare must run off the kernel's main thread"
    assert {"2.00× (round 1)", "2.00× (round 2)", "2.00× (round 3)"} <= live_texts   # adaptive: no "of N"
    drawn = panel.figures.traces()
    assert set(drawn["loss"]) == {"eager", "inductor"} and set(drawn["step_time"]) == {"eager", "inductor"}
    assert "baseline" in drawn["throughput_text"]
    assert any(re.fullmatch(r"2\.00× \([12]\.\d\d–2\.\d\d\)", t) for t in drawn["throughput_text"]), drawn
    assert "<table" in panel.summary.value and "speedup (95 % interval)" in panel.summary.value
    assert _badges(panel.words.value) == ["faster"]
    assert "95 % interval" in panel.words.value and "pays off after" in panel.words.value
    assert panel.failures.value == ""
    assert "Done" in panel.status.value and not panel.run_button.disabled and panel.stop_button.disabled
    assert len(panel.progress.box.children) == 2 * PILOT_ROUNDS
    assert panel.comparison.summary()["backend"].tolist() == ["eager", "inductor"]


def test_a_single_round_says_so_on_the_bars(monkeypatch):
    monkeypatch.setattr(tc, "compare", _scripted_compare({"eager": 0.2, "inductor": 0.1}))
    panel = _panel(rounds=1)
    _run(panel)
    texts = panel.figures.traces()["throughput_text"]
    assert any(t.startswith("2.00×") and "single round" in t for t in texts), texts


def test_a_live_update_that_began_before_the_finished_comparisons_never_lands_after_it(monkeypatch):
    """A job thread's live update took its snapshot (the bars still empty) and wrote the figure after the finished
    comparison's update had: "Done", and no bar (Voilà, beside other jobs). Updates now land in snapshot order."""
    import contextlib

    monkeypatch.setattr(tc, "compare", _scripted_compare({"eager": 0.2, "inductor": 0.1}))
    panel = _panel()
    cmp = _run(panel)
    figs = panel.figures
    figs.reset(list(cmp.backends))
    figs._dirty = True   # a live event arrived: the bars are still empty
    real, paused, go = type(figs.figure).batch_update, threading.Event(), threading.Event()

    @contextlib.contextmanager
    def slow_first(fig):   # the live update is slow to write (a busy machine)
        if not paused.is_set():
            paused.set()
            go.wait(10)
        with real(fig):
            yield

    monkeypatch.setattr(type(figs.figure), "batch_update", slow_first)
    live = threading.Thread(target=figs.flush, kwargs=dict(force=True))
    live.start()
    assert paused.wait(10)
    final = threading.Thread(target=figs.load, args=(cmp,))
    final.start()
    time.sleep(0.3)   # the final update, unless it waits for the live one, is written by now
    go.set()
    live.join(10)
    final.join(10)
    assert any("×" in t for t in figs.traces()["throughput_text"]), figs.traces()


def test_status_shows_the_phase_and_the_configured_compiler(monkeypatch):
    monkeypatch.setattr(tc, "compare", _scripted_compare({"eager": 0.2, "inductor": 0.1}))
    panel = _panel(rounds=1)
    seen = _watch(panel.status)
    _run(panel)
    assert any("<b>eager</b> · round 1 of 1" in s and "warming up…" in s for s in seen), seen
    assert any("<b>inductor</b>" in s and "compiling…" in s and "compiler inductor configured (mode default" in s
               for s in seen), seen
    assert any("measuring…" in s for s in seen)
    assert "Found configuration" not in panel.log.value   # the status came from the "compiler" event


@pytest.mark.parametrize("times, kind", [
    ({"eager": 0.1, "inductor": 0.2}, "slower"),
    ({"eager": 0.1, "inductor": 0.1}, "no measurable difference"),
])
def test_a_verdict_that_is_not_faster_never_claims_a_payoff(times, kind, monkeypatch):
    monkeypatch.setattr(tc, "compare", _scripted_compare(times))
    panel = _panel()
    _run(panel)
    words = panel.words.value
    assert _badges(words) == [kind.replace(" ", "-")]
    assert "95 % interval" in words and "pays off after" not in words
    if kind != "slower":
        assert "pays off" not in words


def test_slowdown_and_failure_are_told_in_words(monkeypatch):
    _all_backends_available(monkeypatch)
    monkeypatch.setattr(tc, "compare", _scripted_compare({"eager": 0.1, "inductor": 0.2, "xla": 0.1},
                                                         status={"xla": "oom"}))
    panel = _panel(backends=("inductor", "xla"))
    _run(panel)
    assert _badges(panel.words.value) == ["slower", "inconclusive"]
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


def test_memory_budget_comes_from_a_known_profile_only(monkeypatch):
    monkeypatch.setattr(tc, "compare", _scripted_compare({"eager": 0.2, "inductor": 0.1}))
    cmp = tc.compare(tc.JobSpec(**TINY, profile="ml.g5.2xlarge"), rounds=1)
    panel = Workbench()
    panel.show(cmp)
    assert panel.figures.budget_mb == pytest.approx(tc.profile("ml.g5.2xlarge").memory_budget_gb * 1024)
    panel.show(tc.compare(tc.JobSpec(**TINY), rounds=1))   # this machine: no budget, no line
    assert panel.figures.budget_mb is None and "<table" in panel.summary.value
    with pytest.raises(tc.SpecError, match="profile"):   # an unknown profile never reaches the panel
        tc.JobSpec(**TINY, profile="no-such-profile")


# -- the noise floor ---------------------------------------------------------------------------------------
def test_the_stored_noise_floor_is_shown_beside_the_verdict(monkeypatch):
    asked = []
    stored = tc.StoredNoiseFloor(resolvable=1.06, speedup_ci_low=0.95, speedup_ci_high=1.06,
                                 verdict_kind="no measurable difference", verdict="no measurable difference: …",
                                 created=time.time() - 12 * 60)
    monkeypatch.setattr(tc, "latest_noise_floor", lambda spec: asked.append(spec) or stored)
    monkeypatch.setattr(tc, "compare", _scripted_compare({"eager": 0.2, "inductor": 0.1}))
    panel = _panel(batch_size=6)
    _run(panel)
    assert asked[-1] == panel.comparison.spec and asked[-1].batch_size == 6
    assert panel.noise_text.value == "this machine resolves ≥ 1.06× now (A/A, measured 12 min ago)"


def test_measure_noise_floor_runs_in_the_background_like_run_paired(monkeypatch):
    calls: list = []
    monkeypatch.setattr(tc, "latest_noise_floor", lambda spec: None)
    monkeypatch.setattr(tc, "noise_floor", _scripted_noise_floor(calls, pause=0.01))
    panel = _panel(rounds=2)
    assert panel.noise_text.value == "noise floor not measured" and not panel.noise_button.disabled
    seen = _watch(panel.status)
    panel.noise_button.click()
    assert panel.run_button.disabled and panel.noise_button.disabled and not panel.stop_button.disabled
    panel.wait(timeout=30)
    assert calls == [dict(spec=panel.controls.spec, rounds=2)]
    assert len(panel.progress.box.children) == 4          # eager and eager (A/A), two rounds
    assert any("<b>eager (A/A)</b> · round 2 of 2" in s for s in seen), seen
    assert re.fullmatch(r"this machine resolves ≥ 1\.\d\d× now \(A/A, measured just now\)", panel.noise_text.value)
    assert panel.noise_floor.verdict_kind == "no measurable difference"
    assert panel.comparison is None and "Done" in panel.status.value and not panel.run_button.disabled


def test_a_stopped_noise_floor_is_not_claimed_as_kept(monkeypatch):
    monkeypatch.setattr(tc, "latest_noise_floor", lambda spec: None)
    monkeypatch.setattr(tc, "noise_floor", _scripted_noise_floor([], pause=0.05))
    panel = _panel(steps=200)
    panel.measure_noise_floor()
    time.sleep(0.3)
    panel.stop_button.click()
    panel.wait(timeout=10)
    assert "Stopped" in panel.status.value and "not kept" in panel.noise_text.value


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_real_paired_run_history_and_export(tmp_path):
    """Real tiny jobs through tc.compare (eager + inductor, one round), then History and Export. Batch 8 × seq 64,
    the default spec's: its Inductor graph is one the suite compiles anyway (notebooks 01 and 04)."""
    panel = _panel(backends=("inductor",), rounds=1, batch_size=8, seq_len=64)
    panel.run_button.click()
    cmp = panel.wait(timeout=580)
    assert cmp is not None, panel.status.value
    assert [r.status for r in cmp.results] == ["ok", "ok"], panel.failures.value
    drawn = panel.figures.traces()
    assert {"eager", "inductor"} <= set(drawn["loss"])
    assert any("×" in text and "single round" in text for text in drawn["throughput_text"]), drawn
    assert "<table" in panel.summary.value and len(_badges(panel.words.value)) == 1
    # History: the comparison is in the store and redraws without rerunning
    panel.tabs.selected_index = 1
    assert any(v == cmp.comparison_id for _, v in panel.history.picker.options)
    panel.summary.value = ""
    panel.history.picker.value = cmp.comparison_id
    assert panel.comparison.comparison_id == cmp.comparison_id and "<table" in panel.summary.value
    assert {"eager", "inductor"} <= set(panel.figures.traces()["loss"])
    # Export
    out = panel.export(tmp_path / "report.html")
    assert out is not None and out.read_text().lstrip().lower().startswith(("<!doctype", "<html"))


def test_stall_and_total_cap_are_set_from_the_panel():
    panel = _panel(stall_s=120.0, timeout_s=0.0)
    assert panel.controls.spec.stall_s == 120.0 and panel.controls.spec.timeout_s is None   # 0: no cap
    panel.controls.set(timeout_s=900.0)
    assert panel.controls.spec.timeout_s == 900.0
    panel.controls.set(stall_s=-1.0)
    assert panel.controls.spec is None and "stall_s=-1.0" in panel.controls.errors["stall_s"].value


def test_your_own_script_is_compared_from_the_panel(monkeypatch):
    """'Your script' under More settings: Run compares the script (its arguments split as a shell would);
    a missing file or an unclosed quote is refused beside its control before anything runs."""
    calls: list = []
    monkeypatch.setattr(tc, "compare", _scripted_compare({"eager": 0.2, "inductor": 0.1}, calls=calls))
    panel = _panel(script="examples/train_loop.py", script_args="--batch-size 4 --lr '3e-3'")
    spec = panel.controls.spec
    assert spec.script.endswith("examples/train_loop.py") and spec.script_args == ("--batch-size", "4", "--lr", "3e-3")
    assert spec.model == "train_loop.py" and "your script" in panel.controls.more_summary.value
    _run(panel)
    assert calls[-1]["spec"].script == spec.script and calls[-1]["spec"].script_args == spec.script_args
    panel.controls.set(script_args="--lr '3e-3")
    assert panel.controls.spec is None and "script_args" in panel.controls.errors["script_args"].value
    assert panel.controls.more_open and panel.run_button.disabled
    panel.controls.set(script_args="", script="no/such/train.py")
    assert panel.controls.spec is None and "no/such/train.py" in panel.controls.errors["script"].value
    panel.controls.set(script="")
    assert panel.controls.spec is not None and panel.controls.spec.script is None and not panel.run_button.disabled


def test_history_of_a_store_never_written_is_empty_and_makes_no_store(tmp_path):
    """The panel's History tab on a fresh machine: no comparisons yet, no error, and reading makes no file."""
    panel = Workbench()
    panel.history.refresh()
    assert "No comparisons in the store yet" in panel.history.table.value
    assert "Could not read" not in panel.history.message.value
    assert not (tmp_path / "panel.db").exists()
