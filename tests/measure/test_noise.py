"""The gradient noise scale and the learning rate it predicts (issue 10, parts 1 and 2).

The estimator is checked on a problem whose noise scale is known exactly: per-sample gradients G + ε with
ε ~ N(0, σ² I), so B_simple = d σ² / |G|². One integration test runs a real noise-scale job.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import tcbench as tc
from tcbench.measure.noise_scale import NoiseScale, estimate
from tcbench.tuning.lr.prediction import lr_ratio, predict, ratio_range


def _samples(d: int, g_norm: float, sigma: float, batch: int, k: int, steps: int, seed: int) -> tuple[list, float]:
    """Per-step |G_b|², |G_B|² of k micro-batches, simulated from per-sample gradients; and the true B_simple."""
    rng = np.random.default_rng(seed)
    g = rng.normal(size=d)
    g *= g_norm / np.linalg.norm(g)
    out = []
    for _ in range(steps):
        per_sample = g + sigma * rng.normal(size=(batch, d))
        micro = per_sample.reshape(k, batch // k, d).mean(axis=1)
        out.append({"small_sq": float((micro ** 2).sum(axis=1).mean()), "big_sq": float((micro.mean(axis=0) ** 2).sum())})
    return out, d * sigma ** 2 / g_norm ** 2


@pytest.mark.parametrize("true_scale, batch, k", [(8.0, 32, 4), (40.0, 32, 2), (200.0, 64, 4)])
def test_the_estimator_recovers_a_known_noise_scale(true_scale, batch, k):
    d, g_norm = 40, 1.0
    sigma = math.sqrt(true_scale * g_norm ** 2 / d)
    covered, errors = 0, []
    for seed in range(10):
        samples, truth = _samples(d, g_norm, sigma, batch, k, 300, seed)
        est = estimate(samples, batch, batch // k, seed=seed)
        errors.append(abs(math.log(est.b_simple / truth)))
        covered += est.low <= truth <= (est.high if est.high is not None else math.inf)
    assert np.median(errors) < 0.15, errors            # within ~15 % of the truth, typically
    assert covered >= 7, covered                         # the 95 % interval covers it in most of 10 seeds


def test_a_noise_dominated_gradient_is_bounded_below_only():
    samples, _ = _samples(40, 1e-4, 1.0, 16, 2, 30, 0)   # |G|² invisible under the noise: B_simple ≫ the batch
    est = estimate(samples, 16, 8)
    assert est.high is None and not est.bounded and (est.low is None or est.low > 16)
    assert "noise-dominated" in est.describe() or "∞" in est.describe()
    p = predict(est, 1e-3, 16, 64, "adam")   # the square-root limit
    assert p.lr == pytest.approx(2e-3, rel=0.05) if est.b_simple is None else p.low <= p.lr <= p.high


def test_the_estimate_needs_two_steps_and_a_valid_split():
    with pytest.raises(ValueError, match="at least 2"):
        estimate([{"small_sq": 1.0, "big_sq": 0.5}], 8, 4)
    with pytest.raises(ValueError, match="micro-batch"):
        estimate([{"small_sq": 1.0, "big_sq": 0.5}] * 3, 8, 8)


def test_far_below_the_noise_scale_adam_follows_the_square_root_rule_and_sgd_the_linear_rule():
    assert lr_ratio(1e7, 8, 32, "adam") == pytest.approx(2.0, rel=1e-3)
    assert lr_ratio(1e7, 8, 32, "sgd") == pytest.approx(4.0, rel=1e-3)
    assert lr_ratio(None, 8, 32, "adam") == 2.0 and lr_ratio(None, 8, 32, "sgd") == 4.0


def test_adam_surges_at_the_noise_scale_and_falls_beyond_it():
    ratios = [lr_ratio(64.0, 8, b, "adam") for b in (16, 32, 64, 128, 256, 1024)]
    assert ratios.index(max(ratios)) == 2                  # the optimum is at B = B_noise
    assert ratios[3] < ratios[2] and ratios[5] < ratios[4]  # falling beyond it
    sgd = [lr_ratio(64.0, 8, b, "sgd") for b in (16, 64, 1024, 10**6)]
    assert sgd == sorted(sgd) and sgd[-1] == pytest.approx(1 + 64 / 8, rel=1e-3)   # SGD saturates at ε_max


def test_predict_lr_carries_the_interval_and_both_rules():
    noise = NoiseScale(b_simple=1e6, low=5e5, high=2e6, tr_sigma=1.0, g2=1e-6, batch_size=8, micro_batch=4, steps=20)
    p = predict(noise, 1e-3, 8, 32, "adam")
    assert p.lr == pytest.approx(p.sqrt_lr, rel=1e-2) and p.low <= p.lr <= p.high
    assert p.linear_lr == pytest.approx(4e-3) and p.sqrt_lr == pytest.approx(2e-3)
    t = p.table()
    assert list(t["rule"].str.split(" ").str[0]) == ["noise", "linear", "square-root"]
    lo, hi = ratio_range(NoiseScale(**{**noise.to_dict(), "high": None}), 8, 32, "adam")
    assert lo < 2.0 <= hi + 1e-9   # unbounded above: the range reaches the square-root limit


@pytest.mark.parametrize("b_noise, new_batch, optimizer, regime, words", [
    (1e4, 32, "adam", "below", "the square-root rule applies"),
    (1e4, 32, "sgd", "below", "the linear rule applies"),
    (40.0, 32, "adam", "near", "the largest useful rate"),
    (4.0, 64, "adam", "beyond", "should not grow"),
    (4.0, 64, "sgd", "beyond", "stays flat"),
    (None, 32, "adam", "unknown", "not resolved"),
])
def test_the_advice_names_the_rule_for_the_optimiser_and_where_the_new_batch_sits(b_noise, new_batch, optimizer,
                                                                                    regime, words):
    noise = NoiseScale(b_simple=b_noise, low=None if b_noise is None else b_noise / 2,
                       high=None if b_noise is None else b_noise * 2, tr_sigma=1.0, g2=0.1, batch_size=8,
                       micro_batch=4, steps=20)
    p = predict(noise, 1e-3, 8, new_batch, optimizer)
    assert p.regime == regime
    text = p.advice()
    assert words in text and ("Adam(W)" in text) == (optimizer == "adam") and ("SGD" in text) == (optimizer == "sgd")


def test_noise_scale_spec_is_refused_where_it_cannot_be_measured():
    with pytest.raises(tc.SpecError) as e:
        tc.JobSpec(batch_size=8, noise_micro_batches=3)
    assert e.value.field == "noise_micro_batches" and "2, 4, 8" in str(e.value)
    for field, value in (("backend", "inductor"), ("script", "train.py")):
        with pytest.raises(tc.SpecError) as e:
            tc.JobSpec(batch_size=8, noise_micro_batches=2, **{field: value})
        assert e.value.field == field
    for precision in ("bf16", "fp16"):   # measured under autocast, on the fp32 parameters' gradients
        assert tc.JobSpec(batch_size=8, noise_micro_batches=2, precision=precision).precision == precision
    with pytest.raises(tc.SpecError, match="new_batch_size"):
        tc.predict_lr(tc.JobSpec(), 0, noise=NoiseScale(1.0, 0.5, 2.0, 1.0, 1.0, 8, 4, 10))


def _noise_samples(precision: str, steps: int = 24) -> list[dict]:
    """The eager backend's micro-batched steps on tiny GPT-2 in this process (1 thread), from the same weights and
    batches whatever the precision."""
    import torch

    from tcbench.job.backends import get_backend
    from tcbench.job.worker import Workload

    torch.manual_seed(0)
    torch.set_num_threads(1)
    spec = tc.JobSpec(model="gpt2", size="tiny", batch_size=8, seq_len=32, steps=steps, warmup_steps=0, lr=2e-3,
                      dropout=0.0, threads=1, precision=precision, noise_micro_batches=2)
    work = Workload(spec)
    backend = get_backend("eager")
    backend.setup(spec, "")
    backend.prepare(work.model(), spec)
    it = iter(work.batches("train"))
    losses = [float(backend.step(next(it))) for _ in range(steps)]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]   # it trains as the fp32 job does
    return backend.noise_samples()


def test_a_bf16_jobs_noise_scale_agrees_with_the_fp32_one_within_its_interval():
    fp32, bf16 = (estimate(_noise_samples(p)[8:], 8, 4, precision=p) for p in ("fp32", "bf16"))
    assert bf16.precision == "bf16" and "under bf16 autocast, fp32 gradients" in bf16.describe()
    assert fp32.b_simple is not None and bf16.b_simple is not None
    assert fp32.low <= bf16.b_simple <= (fp32.high or np.inf) and bf16.low <= fp32.b_simple <= (bf16.high or np.inf)
    assert bf16.b_simple != fp32.b_simple   # the forward really ran in bf16 (the same figure would mean it did not)


@pytest.mark.integration
def test_a_noise_scale_job_trains_the_same_and_stores_its_estimate():
    spec = tc.JobSpec(model="gpt2", size="tiny", batch_size=8, seq_len=32, steps=16, warmup_steps=2, lr=2e-3,
                      dropout=0.0, threads=1)
    before = len(tc.runs())
    plain = tc.run(spec)
    noise = tc.noise_scale(spec, micro_batches=2)
    assert noise.batch_size == 8 and noise.micro_batch == 4 and noise.steps == 7 and noise.run_id is not None
    assert noise.low is not None and (noise.b_simple is None or noise.b_simple > 0)
    stored = tc.get_run(noise.run_id)
    assert stored.extra.noise_scale == noise and len(stored.extra.noise_samples) == 16
    # the micro-batched step is the same update: the losses follow the plain job's (float summation order aside)
    a, b = tc.steps(plain.run_id)["loss"], tc.steps(noise.run_id)["loss"]
    assert np.allclose(a.to_numpy(), b.to_numpy(), rtol=2e-3), (a.tolist(), b.tolist())
    p = tc.predict_lr(spec, 32)   # the stored estimate is found: no second job
    assert p.noise == noise and len(tc.runs()) == before + 2


def test_predict_lr_for_more_processes_is_the_prediction_for_the_global_batch(tmp_path):
    noise = NoiseScale(b_simple=64.0, low=32.0, high=128.0, tr_sigma=1.0, g2=1.0 / 64, batch_size=16, micro_batch=8,
                       steps=20)
    spec = tc.JobSpec(batch_size=8, nproc=2, lr=1e-3)   # global batch 16
    p = tc.predict_lr(spec, nproc=4, noise=noise)        # → 4 × 8 = 32
    same = tc.predict_lr(spec, 32, noise=noise)
    assert (p.old_batch, p.new_batch, p.processes) == (16, 32, (2, 4))
    assert p.lr == pytest.approx(same.lr) and p.linear_lr == pytest.approx(2e-3)
    assert p.describe().startswith("global batch 16 (2 × 8) → 32 (4 × 8)")
    for kw in ({}, {"new_batch_size": 32, "nproc": 4}):   # neither, or both: refused before any job
        with pytest.raises(tc.SpecError, match="exactly one"):
            tc.predict_lr(spec, noise=noise, **kw)
    with pytest.raises(tc.SpecError) as e:
        tc.predict_lr(spec, nproc=0, noise=noise)
    assert e.value.field == "nproc"


def test_the_noise_scale_of_a_data_parallel_job_is_looked_up_as_one_process_at_its_global_batch(tmp_path):
    from tcbench.tuning.lr.noise import one_process, stored_noise_scale

    spec = tc.JobSpec(batch_size=8, nproc=2, lr=1e-3)
    one = one_process(spec)
    assert (one.nproc, one.batch_size, one.global_batch) == (1, 16, spec.global_batch)
    assert one_process(one) is one
    store = tc.Store(str(tmp_path / "s.db"))
    assert stored_noise_scale(spec, store) is None   # a data-parallel spec is looked up without error
