"""Time to quality's scoring on synthetic runs: MLPerf's olympic mean, a run that did not converge, paired ratios."""

from __future__ import annotations

import math
import random

import pytest

from tcbench.core.extras import EvalPoint
from tcbench.tuning.quality.scoring import first_at, olympic, paired_ratio


def test_the_olympic_mean_drops_the_fastest_and_the_slowest():
    s = olympic([50.0, 10.0, 30.0, 40.0, 20.0])
    assert s.valid and s.value == pytest.approx(30.0) and (s.used, s.not_converged) == (3, 0)


def test_one_run_that_did_not_converge_counts_as_the_slowest():
    s = olympic([10.0, None, 30.0, 20.0, 40.0])
    assert s.value == pytest.approx(30.0)   # 10 (fastest) and the missing run (slowest) dropped: mean(20, 30, 40)
    assert (s.used, s.not_converged) == (3, 1)


def test_two_runs_that_did_not_converge_invalidate_the_candidate():
    s = olympic([10.0, None, 30.0, None, 40.0])
    assert not s.valid and s.not_converged == 2 and "2 of 5 runs did not reach the target" in s.reason


def test_fewer_than_three_runs_cannot_be_scored():
    assert not olympic([10.0, 20.0]).valid and "at least 3" in olympic([10.0, 20.0]).reason


def test_the_paired_ratio_over_seeds_recovers_a_known_ratio():
    rng = random.Random(0)
    candidate = {seed: 100.0 * math.exp(rng.gauss(0, 0.2)) for seed in range(8)}   # seeds differ a lot ...
    reference = {seed: t * 1.5 * math.exp(rng.gauss(0, 0.03)) for seed, t in candidate.items()}   # ... pairs little
    r = paired_ratio(reference, candidate)
    assert r.seeds == 8 and r.low < 1.5 < r.high and r.low > 1.3 and r.high < 1.7


def test_the_paired_ratio_uses_only_the_seeds_both_runs_reached():
    r = paired_ratio({0: 20.0, 1: 22.0, 2: None, 3: 18.0}, {0: 10.0, 1: 11.0, 2: 9.0, 3: None})
    assert r.seeds == 2 and r.point == pytest.approx(2.0)
    one = paired_ratio({0: 20.0}, {0: 10.0})
    assert (one.point, one.low, one.high, one.seeds) == (2.0, None, None, 1)   # no interval from one seed


def test_time_to_target_is_the_first_evaluation_at_or_below_it():
    points = [EvalPoint(steps=10 * i, samples=80 * i, wall_s=5.0 * i, loss=loss)
              for i, loss in enumerate([5.0, 4.0, float("nan"), 3.0, 3.2, 2.9])]
    assert first_at(points, 3.0) == points[3] and first_at(points, 2.95) == points[5]
    assert first_at(points, 1.0) is None
