import math

from tcbench import StepRecord
from tcbench._metrics import break_even_steps, job_figures, loss_parity, warnings_for


def recs(times, losses=None, warmup=2, seq=128):
    losses = losses or [None] * len(times)
    return [StepRecord(step=i, step_s=t, samples_s=8 / t, tokens_s=8 * seq / t, mem_bytes=100 * i, loss=l,
                       warmup=i < warmup, seq_len=seq) for i, (t, l) in enumerate(zip(times, losses))]


def test_warmup_apart_and_median():
    r = recs([5.0, 1.0, 0.2, 0.3, 0.1, 0.2, 0.25])
    f = job_figures(r, batch_size=8, warmup_steps=2, flops_per_step=1e9, peak_flops=1e11)
    assert f["median_step_s"] == 0.2
    assert f["samples_s"] == 8 / 0.2 and f["tokens_s"] == 8 * 128 / 0.2
    assert f["warmup_s"] == 6.0
    assert math.isclose(f["compile_latency_s"], 6.0 - 2 * 0.2)
    assert math.isclose(f["mfu"], 1e9 / 0.2 / 1e11)
    assert f["peak_mem_bytes"] == 600


def test_no_steady_steps_gives_no_throughput():
    f = job_figures(recs([3.0, 2.0]), 8, 2, None, None)
    assert f["median_step_s"] is None and f["warmup_s"] == 5.0


def test_break_even():
    assert break_even_steps(10.0, 0.2, 0.1) == 100.0
    assert break_even_steps(10.0, 0.1, 0.2) == float("inf")
    assert break_even_steps(None, 0.1, 0.2) is None


def test_loss_parity_tolerance():
    a = recs([0.1] * 10, [1.0] * 10)
    b = recs([0.1] * 10, [1.04] * 10)
    c = recs([0.1] * 10, [1.5] * 10)
    assert loss_parity(a, b)[0] is True
    ok, diff = loss_parity(a, c)
    assert ok is False and math.isclose(diff, 0.5)
    assert loss_parity(recs([0.1]), a) == (None, None)


def test_warnings_in_plain_words():
    w = warnings_for(speedup=0.5, compile_latency_s=200, memory_ratio=0.5, recompiles=3)
    assert len(w) == 4 and "slower" in w[0] and "2.00×" in w[0]
    assert warnings_for(1.2, 10, 1.1, 0) == []
