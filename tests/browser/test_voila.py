"""The same panel served by Voilà as a stand-alone page (the `make app` teaching demo)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.browser

RUN_TIMEOUT_S = 420


def _open(page, voila_server, panel_ui):
    page.goto(f"{voila_server.url}/?token={voila_server.token}")
    ui = panel_ui(page)
    ui.wait_shown(timeout_s=90)
    return ui


@pytest.mark.timeout(120)
def test_voila_shows_the_panel_without_code(page, voila_server, panel_ui, artifacts):
    ui = _open(page, voila_server, panel_ui)
    assert page.locator(".jp-InputArea, .jp-CodeMirrorEditor").count() == 0  # no code cells shown
    assert ui.throughput_bars() == 2  # eager + inductor bars: the figures held their traces before display
    page.screenshot(path=str(artifacts / "voila-panel.png"), full_page=True)


@pytest.mark.integration
@pytest.mark.timeout(RUN_TIMEOUT_S + 120)
def test_run_paired_in_voila(page, voila_server, panel_ui, artifacts):
    ui = _open(page, voila_server, panel_ui)
    ui.set_tiny_job(backends=("inductor",))
    status = ui.run_paired(RUN_TIMEOUT_S)
    page.wait_for_timeout(1500)
    page.screenshot(path=str(artifacts / "voila-run-paired.png"), full_page=True)
    assert "Done" in status, status
    legend = ui.loss_legend()
    assert "eager" in legend and "inductor" in legend, legend
    assert any("×" in t for t in ui.throughput_texts()), ui.throughput_texts()
    assert ui.summary_jobs() == ["eager", "inductor"]
