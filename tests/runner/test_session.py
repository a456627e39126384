"""comparison_session: every measurement's comparison row is finished however it ends (no row left ``running``).

The context manager against a store of the test's own, then each measurement that keeps a row (compare,
noise_floor, scaling, retune_lr, find_max_batch) with its job runner faked: the second job raises
KeyboardInterrupt, and the row must end ``interrupted``. No training runs.
"""

from __future__ import annotations

import dataclasses
import threading

import pytest

from tcbench import JobSpec
from tcbench.core.results import JobFigures, JobResult
from tcbench.runner.session import comparison_session

SPEC = JobSpec(model="bert-base-cased", size="tiny", batch_size=8, seq_len=32, steps=6, warmup_steps=1, lr=1e-3,
               dropout=0.0, threads=1)
SPREAD = (-0.01, 0.0, 0.01, 0.005)


def _row(store, kind: str) -> dict:
    rows = store.comparisons()
    rows = rows[rows.kind == kind]
    assert len(rows) == 1, rows
    return rows.iloc[0].to_dict()


def _info(row: dict) -> dict:
    import json

    return json.loads(row["info_json"])


# -- the context manager itself ---------------------------------------------------------------------------
def test_a_block_that_ends_normally_is_done_with_its_info(store):
    with comparison_session(store, "compare", SPEC, ["eager"], 1, {"at": "start"}) as session:
        assert store.comparison_row(session.comparison_id)["status"] == "running"
        assert _info(store.comparison_row(session.comparison_id)) == {"at": "start"}
        session.info_at_finish = lambda: {"summary": [1], "n": 1}
        session.finish_info["n"] = 2   # finish_info wins over info_at_finish
    row = store.comparison_row(session.comparison_id)
    assert row["status"] == "done" and _info(row) == {"summary": [1], "n": 2}


def test_a_set_stop_event_ends_it_interrupted_unless_the_caller_set_a_status(store):
    stop = threading.Event()
    with comparison_session(store, "compare", SPEC, ["eager"], 1, {}, stop) as first:
        stop.set()
    with comparison_session(store, "compare", SPEC, ["eager"], 1, {}, stop) as second:
        second.status = "done"
    assert store.comparison_row(first.comparison_id)["status"] == "interrupted"
    assert store.comparison_row(second.comparison_id)["status"] == "done"


def test_a_keyboard_interrupt_ends_it_interrupted_and_is_raised_again(store):
    with pytest.raises(KeyboardInterrupt):
        with comparison_session(store, "compare", SPEC, ["eager"], 1, {}) as session:
            session.info_at_finish = lambda: {"summary": "so far"}
            raise KeyboardInterrupt
    row = store.comparison_row(session.comparison_id)
    assert row["status"] == "interrupted" and _info(row) == {"summary": "so far"}


def test_an_error_ends_it_failed_or_with_the_callers_error_status_and_is_raised_again(store):
    with pytest.raises(ValueError, match="boom"):
        with comparison_session(store, "compare", SPEC, ["eager"], 1, {}) as failed:
            raise ValueError("boom")
    with pytest.raises(RuntimeError):
        with comparison_session(store, "compare", SPEC, ["eager"], 1, {}, error_status="interrupted") as other:
            raise RuntimeError
    assert store.comparison_row(failed.comparison_id)["status"] == "failed"
    assert store.comparison_row(other.comparison_id)["status"] == "interrupted"
    assert _info(store.comparison_row(failed.comparison_id)) == {"error": "ValueError: boom"}   # why, kept


def test_info_that_cannot_be_computed_still_finishes_the_row(store):
    def broken() -> dict:
        raise ZeroDivisionError("no figures")

    with pytest.raises(ZeroDivisionError):
        with comparison_session(store, "compare", SPEC, ["eager"], 1, {}) as session:
            session.info_at_finish = broken
            session.finish_info["kept"] = True
    row = store.comparison_row(session.comparison_id)
    assert row["status"] == "done" and _info(row)["kept"] is True and "no figures" in _info(row)["info_error"]


# -- each measurement, its job runner interrupted ---------------------------------------------------------
def _fake_run(interrupt_at: int = 2, when=None):
    """A stand-in for the job runner: an ``ok`` job that learned (held-out loss lower after than before), until
    its ``interrupt_at``-th call (counted where ``when(store, comparison_id)`` holds), which raises
    KeyboardInterrupt as Ctrl-C would."""
    calls: list = []

    def run(spec, observer=None, stop=None, store=None, comparison_id=None, round=0, job=None, label="", draw=None,
            turns=None):
        if when is None or when(store, comparison_id):
            calls.append(spec)
            if len(calls) == interrupt_at:
                raise KeyboardInterrupt
        res = JobResult(spec=spec, status="ok", run_id=len(calls), wall_s=1.0,
                        figures=JobFigures(samples_s=100.0, peak_mem_bytes=spec.batch_size * 2**19))
        loss = 0.3 + abs(spec.lr - 2e-3) * 10
        res.extra = dataclasses.replace(res.extra, eval_loss=loss, eval_losses=[loss + d for d in SPREAD],
                                        eval_losses_initial=[0.72 + d for d in SPREAD], eval_loss_se=0.004)
        return res
    return run, calls


def test_compare_interrupted_mid_way_leaves_no_running_row(store, monkeypatch):
    import tcbench.comparison as cmp_mod

    run, calls = _fake_run()
    monkeypatch.setattr(cmp_mod.running, "run", run)
    with pytest.raises(KeyboardInterrupt):
        cmp_mod.compare(SPEC, backends=["eager"], rounds=2, store=store, pairing="sequential")   # run in this thread
    row = _row(store, "compare")
    assert len(calls) == 2 and row["status"] == "interrupted"
    assert [r["backend"] for r in _info(row)["summary"]] == ["eager", "eager (A/A)"]   # what ran until then


def test_noise_floor_interrupted_mid_way_leaves_no_running_row(store, monkeypatch):
    import tcbench.comparison as cmp_mod

    run, calls = _fake_run()
    monkeypatch.setattr(cmp_mod.running, "run", run)
    with pytest.raises(KeyboardInterrupt):
        cmp_mod.noise_floor(SPEC, rounds=2, store=store, pairing="sequential")
    row = _row(store, "noise-floor")
    assert len(calls) == 2 and row["status"] == "interrupted" and "summary" in _info(row)


def test_scaling_interrupted_mid_way_leaves_no_running_row(store, monkeypatch):
    import tcbench.runner.process as runner
    from tcbench.parallel.scaling import scaling

    run, calls = _fake_run()
    monkeypatch.setattr(runner, "run", run)
    with pytest.raises(KeyboardInterrupt):
        scaling(SPEC, nprocs=(1, 2), rounds=1, store=store)
    row = _row(store, "scaling")
    assert len(calls) == 2 and row["status"] == "interrupted" and "summary" in _info(row)


def test_retune_lr_interrupted_mid_way_leaves_no_running_row(store, monkeypatch):
    import tcbench.runner.process as runner
    from tcbench.tuning.lr.retune import retune_lr

    run, calls = _fake_run()
    monkeypatch.setattr(runner, "run", run)
    with pytest.raises(KeyboardInterrupt):
        retune_lr(SPEC, 32, n_trials=4, noise=False, store=store)
    row = _row(store, "retune")
    assert len(calls) == 2 and row["status"] == "interrupted"
    assert {"best_lr", "linear_lr", "total_steps"} <= set(_info(row))   # the study as it stood


def test_find_max_batch_interrupted_mid_way_leaves_no_running_row(store, monkeypatch):
    import tcbench.runner.process as runner
    from tcbench.tuning.batch.search import find_max_batch

    run, calls = _fake_run()
    monkeypatch.setattr(runner, "run", run)
    with pytest.raises(KeyboardInterrupt):
        find_max_batch(SPEC, backends=["eager"], max_batch=64, store=store, memory_budget_gb=1.0)
    row = _row(store, "max_batch")
    assert len(calls) == 2 and row["status"] == "interrupted"
    assert _info(row)["table"][0]["backend"] == "eager" and _info(row)["profile"]
