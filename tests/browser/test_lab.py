"""The workbench in JupyterLab, driven through Debian's Chromium: run the notebook, choose a tiny
job with eager + inductor, click Run paired, and check what a person sees."""

from __future__ import annotations

import uuid

import pytest

pytestmark = pytest.mark.browser

RUN_TIMEOUT_S = 420  # a cold Inductor compile of the tiny model takes 20-80 s on 2 busy cores


def _open_notebook(page, lab_server, workspace: str, nb: str | None = None) -> str:
    nb = nb or lab_server.copy_notebook("00_workbench.ipynb")
    # Pitfall 1: create the kernel session first, so running cells never opens "Select Kernel".
    lab_server.api("POST", "/api/sessions", {"path": nb, "name": nb, "type": "notebook", "kernel": {"name": "python3"}})
    # Pitfall 2: a unique workspace, reset, so tabs of earlier tests do not come back.
    page.goto(f"{lab_server.url}/lab/workspaces/{workspace}/tree/{nb}?token={lab_server.token}&reset")
    page.locator(".jp-NotebookPanel .jp-Notebook-cell").first.wait_for(state="visible", timeout=60_000)
    kernel = page.locator("[title^='Change kernel for']").first
    page.wait_for_function("el => /Idle/.test(el.textContent)", arg=kernel.element_handle(), timeout=60_000)
    return nb


def _run_all(page) -> None:
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.commands.hasCommand('notebook:run-all-cells')",
                           timeout=30_000)
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")  # not awaited


def _shutdown(lab_server, nb: str) -> None:
    for s in lab_server.api("GET", "/api/sessions"):
        if s.get("path") == nb:
            lab_server.api("DELETE", f"/api/sessions/{s['id']}")


@pytest.fixture(scope="module")
def lab_ui(browser, browser_context_args, lab_server, panel_ui):
    """The workbench notebook run in one Lab page for the first and the last test of this file: the panel as it
    first shows and refuses bad input, then a run, which sets every field it uses. Opening the notebook starts a
    kernel that imports tcbench and draws the panel (about 20 s on 2 cores): once here, not once per test."""
    context = browser.new_context(**browser_context_args)
    nb = None
    try:
        page = context.new_page()
        nb = _open_notebook(page, lab_server, uuid.uuid4().hex[:10])
        _run_all(page)
        ui = panel_ui(page)
        ui.wait_shown()
        yield ui
    finally:
        if nb is not None:
            _shutdown(lab_server, nb)
        context.close()


@pytest.mark.timeout(120)
def test_panel_renders_in_lab_and_refuses_bad_input(lab_ui, artifacts):
    ui, page = lab_ui, lab_ui.page
    assert ui.visible_fields() == ["model", "profile", "batch-size"]   # the rest under "More settings"
    assert not ui.figure_shown() and ui.panel.locator(".tcb-intro").first.is_visible()   # no empty charts
    profiles = ui.option_labels("tcb-profile")
    assert profiles[0].startswith("this machine") and any("GiB" in p and "/h" in p for p in profiles[1:])
    assert any("bert" in m and "params" in m for m in ui.option_labels("tcb-model"))
    ui.type_number("tcb-batch-size", 0)
    error = ui.panel.locator(".tcb-error-batch-size").first
    page.wait_for_function("el => el.textContent.includes('batch_size=0')", arg=error.element_handle(),
                           timeout=10_000)
    assert ui.panel.locator("button.tcb-run").first.is_disabled()
    page.screenshot(path=str(artifacts / "lab-invalid-input.png"), full_page=True)
    ui.type_number("tcb-batch-size", 4)
    page.wait_for_function("el => el.textContent === ''", arg=error.element_handle(), timeout=10_000)
    assert ui.panel.locator("button.tcb-run").first.is_enabled()


@pytest.mark.timeout(120)
def test_an_error_on_a_folded_setting_opens_more_settings(page, lab_server, panel_ui, unique, artifacts):
    nb = lab_server.write_notebook("from tcbench.widgets import Workbench", "Workbench(warmup_steps=50)")
    nb = _open_notebook(page, lab_server, unique, nb)
    try:
        _run_all(page)
        ui = panel_ui(page)
        ui.wait_shown()
        error = ui.panel.locator(".tcb-error-warmup-steps").first
        error.wait_for(state="visible", timeout=20_000)   # "More settings" opened by the error
        assert "warmup_steps=50" in error.inner_text()
        assert ui.panel.locator(".tcb-more-settings-section").first.is_visible()
        assert "warmup_steps=50" in ui.panel.locator(".tcb-status").first.inner_text()   # beside Run as well
        assert ui.panel.locator("button.tcb-run").first.is_disabled()
        page.screenshot(path=str(artifacts / "lab-folded-error.png"), full_page=True)
        ui.type_number("tcb-warmup-steps", 5)
        page.wait_for_function("el => el.textContent === ''", arg=error.element_handle(), timeout=10_000)
        assert ui.panel.locator("button.tcb-run").first.is_enabled()
    finally:
        _shutdown(lab_server, nb)


@pytest.mark.integration
@pytest.mark.timeout(RUN_TIMEOUT_S + 120)
def test_run_paired_in_lab_draws_plots_and_summary(lab_ui, artifacts):
    ui, page = lab_ui, lab_ui.page
    ui.set_tiny_job(backends=("inductor",))
    status = ui.run_paired(RUN_TIMEOUT_S)
    ui.wait_drawn()   # the last figure update drawn in the browser
    page.screenshot(path=str(artifacts / "lab-run-paired.png"), full_page=True)
    assert "Done" in status, status
    legend = ui.loss_legend()
    assert "eager" in legend and "inductor" in legend, legend
    assert ui.loss_traces() >= 2
    assert any("×" in t for t in ui.throughput_texts()), ui.throughput_texts()
    jobs = ui.summary_jobs()
    assert jobs == ["eager", "inductor"], jobs
    assert ui.figure_shown() and not ui.panel.locator(".tcb-intro").first.is_visible()
    ui.assert_memory_axis_linear()
    panel_width = ui.panel.bounding_box()["width"]
    plot = ui.panel.locator(".tcb-figure .main-svg").first.bounding_box()
    assert plot["width"] >= 0.9 * panel_width, (plot, panel_width)
