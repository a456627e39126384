"""The panel's Batch & LR tab, driven without a browser against real (tiny, eager) jobs."""

import pytest

from tcbench.widgets import Workbench

pytestmark = pytest.mark.integration


def test_find_max_batch_then_retune_then_use_lr():
    panel = Workbench(model="bert-base-cased", size="tiny", batch_size=4, seq_len=32, steps=8, warmup_steps=1,
                      lr=1e-3, backends=("inductor",))
    tab = panel.tuning
    tab.include_compiled.value = False   # eager probes only: each new batch would be a cold compile
    tab.budget.value = 0.05          # GiB: a budget the tiny model outgrows at a batch of about a hundred
    tab.find().join(600)
    mb = tab.max_batch
    assert mb is not None and mb.max_batch["eager"] and mb.max_batch["eager"] >= 4
    assert "max_batch" in tab.table.value and tab.new_batch.value == mb.max_batch["eager"]
    tab.new_batch.value = 8
    tab.trials.value = 3
    tab.run_retune().join(900)
    r = tab.retune
    assert r is not None and len(r.trials) >= 3, tab.message.value
    xs = [x for t in tab.fig.data[:3] for x in t.x]
    assert len(xs) >= 3                                   # every finished trial drawn
    assert list(tab.fig.data[3].x) == [pytest.approx(2e-3)] * 2          # linear rule: 1e-3 × 8/4
    assert r.budget == "equal_samples" and r.steps == 4 and r.prediction is not None   # 8 steps at 4 = 4 at 8
    retuned = tab.message.value
    assert "Predicted from the gradient noise scale" in retuned
    assert list(tab.fig.data[5].x) == [pytest.approx(r.prediction.lr)] * 2   # the prediction's line
    assert list(tab.fig.data[6].x) == [pytest.approx(1e-3)] * 2              # the original lr's
    assert "Which rule?" in tab.advice.value and "square-root rule" in tab.advice.value
    tab.optimizer.value = "sgd"                  # the same noise scale (stored with the run), McCandlish's form
    tab.run_predict().join(600)
    p = tab.prediction
    assert p is not None and p.optimizer == "sgd" and p.noise.run_id == r.prediction.noise.run_id, tab.message.value
    assert "linear rule" in tab.advice.value and "SGD" in tab.advice.value
    assert "noise scale (McCandlish)" in tab.table.value
    if r.nothing_learned:   # tiny BERT near ln 2 after 4 steps: the panel says so and offers no lr
        assert "Nothing learned" in retuned and tab.use_button.disabled
        return
    assert not tab.use_button.disabled
    tab.use_lr()
    assert panel.controls.spec.lr == pytest.approx(r.best_lr) and panel.controls.spec.batch_size == 8


def test_bad_run_tab_input_is_reported_not_raised():
    panel = Workbench(model="bert-base-cased", size="tiny")
    panel.controls.set(batch_size=0)
    assert panel.tuning.find() is None
    assert "batch_size" in panel.tuning.message.value
