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


def test_debug_writes_the_compile_trace_and_its_tlparse_report(store):
    """debug=True: torch's structured trace (TORCH_TRACE) in the run's folder, even in a job forked from a launcher
    that imported torch before, and tlparse's HTML report of it (tlparse is in the test extra)."""
    import dataclasses
    from pathlib import Path

    from tcbench.core.results import TRACE_DIR, TRACE_REPORT_DIR

    r = tc.run(dataclasses.replace(SPEC, steps=3, warmup_steps=1, debug=True), store=store)
    assert r.status == "ok", r.error
    logs = list((Path(r.artifacts) / TRACE_DIR).glob("*.log"))
    assert logs and any('"dynamo_start"' in p.read_text() for p in logs), logs
    page = Path(r.artifacts) / TRACE_REPORT_DIR / "index.html"
    assert page.is_file() and "compile" in page.read_text().lower()
    cmp = tc.Comparison(spec=SPEC, backends=["inductor"], results=[r], rounds=1)
    assert page.as_uri() in cmp.to_html(plotlyjs="cdn")   # the report links it
