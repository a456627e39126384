"""The HTML report in Chromium (issue 26, item 5): a default report, written to a folder with ``plotly.min.js``
beside it, shows on its first screen (1280 × 800) when it ran, the bottom line and a chart plotly has drawn.

The comparison is built by hand from synthetic steps (no training job), as tests/view builds its own.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime

import numpy as np
import pytest

import tcbench as tc
from tcbench.comparison import Comparison
from tcbench.core.results import JobResult, StepRecord
from tcbench.measure.metrics import job_figures

pytestmark = pytest.mark.browser

SPEC = tc.JobSpec(model="bert-base-cased", size="tiny", backend="eager", batch_size=8, seq_len=16, steps=40,
                  warmup_steps=3)
ENV = {"tcbench": "0.1.0", "torch": "9.9.9", "python": "3.99", "cpu": "Stored CPU", "cores": 64, "threads": 2,
       "host": "stored-host"}
VIEWPORT = {"width": 1280, "height": 800}


def _job(backend: str, rnd: int, step_s: float, mem_mb: int) -> JobResult:
    """One finished job: warmup spikes for a compiled backend, a falling noisy loss."""
    rng = np.random.default_rng(10 * rnd + len(backend))
    recs = []
    for n in range(SPEC.steps):
        warm = n < SPEC.warmup_steps
        s = step_s * (20 if warm and backend != "eager" else 1) * (1 + 0.01 * rng.standard_normal())
        recs.append(StepRecord(step=n, step_s=s, samples_s=SPEC.batch_size / s, tokens_s=SPEC.tokens_per_step / s,
                               mem_bytes=mem_mb * 2**20, loss=2.0 - 0.02 * n + 0.05 * rng.standard_normal(),
                               warmup=warm, seq_len=SPEC.seq_len))
    run_id = 10 * rnd + len(backend)
    return JobResult(spec=dataclasses.replace(SPEC, backend=backend), status="ok", run_id=run_id, records=recs,
                     figures=job_figures(recs, SPEC.batch_size, SPEC.warmup_steps), round=rnd, env=dict(ENV))


def _comparison() -> Comparison:
    jobs = {"eager": (0.10, 50), "inductor": (0.05, 40), "xla": (0.20, 70)}
    results = [_job(b, rnd, *jobs[b]) for rnd in range(3) for b in jobs]
    return Comparison(spec=SPEC, backends=list(jobs), results=results, rounds=3, comparison_id=7,
                      created=datetime(2026, 11, 24, 21, 20).timestamp())


def _top(locator) -> float:
    box = locator.bounding_box()
    assert box is not None and box["height"] > 0, "not drawn"
    return box["y"]


def test_first_screen_shows_the_date_the_bottom_line_and_a_chart(browser, tmp_path, artifacts):
    path = tmp_path / "report.html"
    _comparison().to_html(str(path))
    assert (tmp_path / "plotly.min.js").exists() and path.stat().st_size < 200 * 1024
    context = browser.new_context(viewport=VIEWPORT)
    try:
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(path.as_uri())
        page.wait_for_selector(".js-plotly-plot .main-svg", timeout=30_000)
        page.screenshot(path=str(artifacts / "report-first-screen.png"))
        when = page.locator(".tcb-when")
        assert "Ran 2026-11-24 21:20" in when.inner_text() and "report written" in when.inner_text()
        line = page.locator(".tcb-bottom-line").first
        assert line.inner_text().startswith("compiling inductor: ") and " faster (" in line.inner_text()
        chart = page.locator(".js-plotly-plot").first
        assert chart.locator(".barlayer .trace").count() == 3        # plotly drew the throughput bars
        for top in (_top(when), _top(line), _top(chart)):
            assert 0 <= top < VIEWPORT["height"] - 100, f"below the first screen: {top:.0f} px"
        assert not errors, errors
    finally:
        context.close()
