"""A real Inductor job reports where its compile latency went (Dynamo, AOTAutograd, Inductor) and what each phase
found in its cache; an eager job reports none. Behaviour, not timings: the phases happen inside the warmup steps,
so they cannot add up to more than those steps took, and they are most of the compile latency."""

from __future__ import annotations

import pytest

import tcbench as tc
from tcbench.core.results import COMPILE_PHASE_NAMES

pytestmark = pytest.mark.integration

SPEC = tc.JobSpec(backend="inductor", steps=6, warmup_steps=2, threads=1)   # tiny GPT-2, the shared compile cache


def test_an_inductor_job_reports_its_compile_phases_and_the_second_finds_them_cached(store):
    first, second = tc.run(SPEC, store=store), tc.run(SPEC, store=store)
    for r in (first, second):
        assert r.status == "ok", r.error
        phases = [r.compile_dynamo_s, r.compile_aot_s, r.compile_backend_s]
        assert all(p is not None and p >= 0 for p in phases) and r.compile_dynamo_s > 0, phases
        assert sum(phases) <= r.figures.warmup_s, (phases, r.figures.warmup_s)       # inside the warmup steps
        assert sum(phases) >= 0.5 * r.compile_latency_s, (phases, r.compile_latency_s)   # most of the latency
        assert r.aot_cache_hits + r.aot_cache_misses >= 1 and r.fx_cache_hits + r.fx_cache_misses >= 1
    assert second.aot_cache_hits >= 1 and second.aot_cache_misses == 0   # the first job filled the caches


def test_an_eager_job_compiles_nothing(store):
    r = tc.run(tc.JobSpec(steps=4, warmup_steps=1), store=store)
    assert r.status == "ok" and all(getattr(r, n) is None for n in COMPILE_PHASE_NAMES)
