"""The same panel served by Voilà as a stand-alone page (the `make app` teaching demo).

What a student sees in the first minute, checked on screen: a short form (model, profile, batch size,
backends, Run) with the rest under "More settings"; no empty charts before a run but a "what you will
see" text; each backend's box with its own name beside it; after a run, charts across the page's full
width and a linear memory axis with the profile's budget as a note.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.browser

RUN_TIMEOUT_S = 420
FOLD_PX = 600   # the results area starts this high on the page (the old 16-row form pushed it to ~700 px)


@pytest.fixture(scope="module")
def voila_ui(browser, browser_context_args, voila_server, panel_ui):
    """One Voilà page for this file's tests, read in their order as a student meets it: the page before a run (the
    first test reads it as it loads, the second ticks a box and opens the folded settings), then a run, which sets
    every field it uses. Each page load starts a kernel that runs the whole notebook (about 20 s on 2 cores): once
    here, not once per test."""
    context = browser.new_context(**browser_context_args)
    try:
        page = context.new_page()
        page.goto(f"{voila_server.url}/?token={voila_server.token}")
        ui = panel_ui(page)
        ui.wait_shown(timeout_s=90)
        yield ui
    finally:
        context.close()


@pytest.mark.timeout(120)
def test_voila_shows_the_panel_without_code_and_no_empty_charts(voila_ui, artifacts):
    ui, page = voila_ui, voila_ui.page
    page.screenshot(path=str(artifacts / "voila-panel.png"), full_page=True)
    assert page.locator(".jp-InputArea, .jp-CodeMirrorEditor").count() == 0  # no code cells shown
    assert ui.throughput_bars() == 2  # eager + inductor bars: the figure held its traces before display
    # before a run: no chart on screen, the "what you will see" text in its place
    assert not ui.figure_shown()
    assert page.locator(".js-plotly-plot:visible").count() == 0
    intro = ui.panel.locator(".tcb-intro").first
    assert intro.is_visible()
    text = intro.inner_text()
    for words in ("Step time", "Throughput", "Peak memory", "Training loss", "verdict", "95 % interval"):
        assert words in text, (words, text)
    # the short form leaves the Run button and the results area near the top of the page
    run = ui.panel.locator("button.tcb-run").first.bounding_box()
    top = intro.bounding_box()["y"]
    assert run["y"] + run["height"] <= top < FOLD_PX, (run, top)


@pytest.mark.timeout(120)
def test_voila_form_is_short_and_each_backend_box_is_labelled(voila_ui, artifacts):
    ui, page = voila_ui, voila_ui.page
    assert ui.visible_fields() == ["model", "profile", "batch-size"]
    more = ui.panel.locator("button.tcb-more-settings").first
    assert more.is_visible() and "More settings" in more.inner_text()
    assert "40 steps" in ui.panel.locator(".tcb-more-summary").first.inner_text()   # the folded values at a glance

    rows = ui.backend_rows()
    assert rows["eager"]["box"] is None and "always runs" in rows["eager"]["text"]
    for name in ("inductor", "xla"):
        box, text = rows[name]["box"], rows[name]["text_box"]
        assert rows[name]["text"].startswith(name), rows[name]
        gap = text["x"] - (box["x"] + box["width"])
        assert 0 <= gap <= 12, f"{name}: its text is {gap:.0f} px from its box"
        assert abs((box["y"] + box["height"] / 2) - (text["y"] + text["height"] / 2)) <= 4, (box, text)
        for other in rows:   # no other backend's name on this box's line
            if other != name:
                o = rows[other]["text_box"]
                assert o["y"] >= box["y"] + box["height"] or o["y"] + o["height"] <= box["y"], (name, other)
    assert rows["inductor"]["checked"] and not rows["xla"]["checked"]
    # the text is the box's own label: clicking "xla — …" ticks the xla box, and nothing else
    ui.panel.locator(".tcb-backend-xla span").first.click()
    page.wait_for_function("el => el.checked", arg=ui.panel.locator(".tcb-backend-xla input").first.element_handle(),
                           timeout=10_000)
    assert ui.backend_rows()["inductor"]["checked"]
    page.screenshot(path=str(artifacts / "voila-form.png"), full_page=True)

    ui.open_more_settings()
    assert ui.visible_fields() == list(ui.FIELDS)
    page.screenshot(path=str(artifacts / "voila-more-settings.png"), full_page=True)


@pytest.mark.integration
@pytest.mark.timeout(RUN_TIMEOUT_S + 120)
def test_run_paired_in_voila(voila_ui, artifacts):
    ui, page = voila_ui, voila_ui.page
    ui.choose("tcb-profile", "ml.g5.2xlarge")   # a 24 GiB budget, far above a tiny job's few MiB
    ui.set_tiny_job(backends=("inductor",))
    status = ui.run_paired(RUN_TIMEOUT_S)
    ui.wait_drawn()   # the last figure update drawn in the browser
    page.screenshot(path=str(artifacts / "voila-run-paired.png"), full_page=True)
    ui.panel.locator(".tcb-figure").first.screenshot(path=str(artifacts / "voila-run-paired-figure.png"))
    assert "Done" in status, status
    assert ui.figure_shown() and not ui.panel.locator(".tcb-intro").first.is_visible()
    legend = ui.loss_legend()
    assert "eager" in legend and "inductor" in legend, legend
    assert any("×" in t for t in ui.throughput_texts()), ui.throughput_texts()
    assert ui.summary_jobs() == ["eager", "inductor"]
    # full width: the drawn plot spans the page, not a fixed 940 px
    page_width = page.evaluate("() => document.documentElement.clientWidth")
    plot = ui.panel.locator(".tcb-figure .main-svg").first.bounding_box()
    assert plot["width"] >= 0.9 * page_width, (plot, page_width)
    # a linear memory axis; the 24 GiB budget is a note, not a line that squashes the bars
    axis = ui.assert_memory_axis_linear()
    assert len(axis["heights"]) == 2 and max(axis["ticks"]) < 24 * 1024, axis
    notes = [a for a in ui.annotations() if "budget" in a]
    assert len(notes) == 1 and notes[0].startswith("memory budget 24.0 GiB — off the chart"), ui.annotations()
