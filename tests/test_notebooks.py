"""Every notebook runs headless (nbclient, TCBENCH_NB_FAST=1) without error, and its key outputs are there."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import nbformat
import pytest

pytestmark = [pytest.mark.notebook, pytest.mark.integration]

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
EXECUTED = NOTEBOOKS.parent / "build" / "notebooks"   # each executed copy, for `make docs` (never committed)
PLOTLY = "application/vnd.plotly.v1+json"
WIDGET = "application/vnd.jupyter.widget-view+json"


def execute(name: str, tmp_path: Path, monkeypatch, timeout: int = 600) -> tuple[nbformat.NotebookNode, float]:
    """Run the notebook the way `make gallery` does (fast), and check its HTML copy is written with its outputs."""
    sys.path.insert(0, str(NOTEBOOKS))
    try:
        import gallery
    finally:
        sys.path.remove(str(NOTEBOOKS))
    committed = nbformat.read(NOTEBOOKS / name, as_version=4)
    assert all(not c.get("outputs") for c in committed.cells if c.cell_type == "code"), f"{name} has outputs"
    nb, took = gallery.execute(NOTEBOOKS / name, tmp_path, fast=True, timeout=timeout)
    EXECUTED.mkdir(parents=True, exist_ok=True)   # the docs' gallery shows these outputs (docs/conf.py)
    nbformat.write(nbformat.from_dict(json.loads(json.dumps(nb))), EXECUTED / name)
    html = gallery.to_html(nbformat.from_dict(json.loads(json.dumps(nb))), tmp_path / f"{Path(name).stem}.html", took)
    text = html.read_text()
    assert "Executed " in text and "jp-OutputArea" in text
    if outputs(nb, PLOTLY):   # plots are in the handout, drawn by the plotly.js it embeds
        assert "Plotly.newPlot" in text or "plotly" in text.lower()
    return nb, took


def outputs(nb, mime: str) -> list:
    return [o["data"][mime] for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
            if mime in o.get("data", {})]


def trace_names(fig: dict) -> set[str]:
    return {t.get("name") for t in fig.get("data", []) if t.get("x") is not None and len(t.get("x")) > 0}


def texts(nb) -> str:
    parts = []
    for c in nb.cells:
        for o in c.get("outputs", []) if c.cell_type == "code" else []:
            parts.append(o.get("text", ""))
            parts.append(str(o.get("data", {}).get("text/html", "")))
            parts.append(str(o.get("data", {}).get("text/plain", "")))
    return "\n".join(parts)


@pytest.mark.timeout(120)
def test_00_workbench_shows_the_panel(tmp_path, monkeypatch):
    nb, took = execute("00_workbench.ipynb", tmp_path, monkeypatch)
    assert len([c for c in nb.cells if c.cell_type == "code"]) == 2
    assert outputs(nb, WIDGET), "the panel was not displayed"


@pytest.mark.timeout(900)
def test_01_quickstart(tmp_path, monkeypatch):
    nb, took = execute("01_quickstart_api.ipynb", tmp_path, monkeypatch)
    figs = outputs(nb, PLOTLY)
    assert any(trace_names(f) >= {"eager", "inductor"} for f in figs), "no loss figure with a trace per backend"
    bars = [f for f in figs if any(t.get("type") == "bar" for t in f.get("data", []))]
    assert any("×" in json.dumps(t.get("text"), ensure_ascii=False) for f in bars for t in f["data"]), "no speedup label"
    out = texts(nb)
    assert "speedup" in out and "Found configuration for compiler inductor" in out
    assert "95 % interval" in out and "inductor: " in out, "the verdict sentence with its interval was not printed"
    assert "measuring" in out, "the job phases were not printed"


@pytest.mark.timeout(900)
def test_02_lazy_tensors(tmp_path, monkeypatch):
    nb, took = execute("02_lazy_tensors_and_mark_step.ipynb", tmp_path, monkeypatch)
    out = texts(nb)
    assert "IR {" in out, "the pending lazy graph was not printed"
    assert "2 graph executions per step with .item(), 1 without" in out and "Counter: MarkStep" in out
    assert "graphs compiled while measuring: 0 and 0" in out, "both loops must be warmed up the same way"


@pytest.mark.timeout(900)
def test_03_static_vs_dynamic_shapes(tmp_path, monkeypatch):
    nb, took = execute("03_static_vs_dynamic_shapes.ipynb", tmp_path, monkeypatch)
    figs = outputs(nb, PLOTLY)
    assert any(trace_names(f) == {"padding=max_length", "padding=longest", "padding=bucket"} for f in figs)
    out = texts(nb)
    assert "recompiles_after_warmup" in out and "automatic_dynamic_shapes = True" in out
    assert "graphs built after each new length [1, 2, 2, 2, 2] — it went dynamic and stopped." in out
    assert "graphs: 1, graph breaks: 0" in out


@pytest.mark.timeout(900)
def test_04_compile_overhead_breakeven(tmp_path, monkeypatch):
    nb, took = execute("04_compile_overhead_breakeven.ipynb", tmp_path, monkeypatch)
    out = texts(nb)
    assert "pays off after" in out or "never pays off" in out or "no break-even — the verdict is" in out
    assert "extra_warmup_s" in out and "(issue:" not in json.dumps(nb.cells)
    assert any({"eager", "inductor (warm)", "inductor (cold)"} <= trace_names(f) for f in outputs(nb, PLOTLY))


@pytest.mark.timeout(900)
def test_05_batch_size_and_learning_rate(tmp_path, monkeypatch):
    nb, took = execute("05_batch_size_and_learning_rate.ipynb", tmp_path, monkeypatch)
    assert len(outputs(nb, PLOTLY)) >= 4
    out = texts(nb)
    assert "linear rule" in out and "square-root rule" in out
    assert "gradient noise scale" in out and "With Adam(W)" in out and "With SGD" in out   # the prediction + advice
    assert "equal samples" in out and "noise-scale prediction" in out                     # the retune from it


@pytest.mark.timeout(900)
def test_06_data_parallel(tmp_path, monkeypatch):
    nb, took = execute("06_data_parallel_and_allreduce.ipynb", tmp_path, monkeypatch)
    out = texts(nb)
    assert "2 processes × batch 4 = global batch 8" in out
    assert "trainable parameters → True" in out, "bytes all-reduced per step ≠ 4 × trainable parameters"
    assert "world size 2 (gloo)" in out and "of the step" in out
    assert "2 processes (global batch 8): " in out and "95 % interval" in out   # the measured factor, with its interval
    assert "D = 680 MB (648 MiB)" in out                                       # the seeds' ≈ 650 MB for BERT-large
    assert "An estimate, not a measurement" in out and "fitted on this machine" in out
    assert "global batch 8 (2 × 4) → 16 (4 × 4)" in out and "Adam(W)" in out   # the lr for the global batch
    figs = outputs(nb, PLOTLY)
    assert any(trace_names(f) >= {"measured", "ideal"} for f in figs), "no measured scaling plot"
    assert len(figs) >= 2, "no projection plot"


def test_make_gallery_writes_one_html_per_notebook():
    """`make gallery` executes every notebook through notebooks/gallery.py (each test above runs one the same way)."""
    import subprocess

    out = subprocess.run(["make", "-n", "gallery"], cwd=NOTEBOOKS.parent, capture_output=True, text=True)
    assert out.returncode == 0 and "notebooks/gallery.py" in out.stdout, out.stdout + out.stderr
    sys.path.insert(0, str(NOTEBOOKS))
    try:
        import gallery
    finally:
        sys.path.remove(str(NOTEBOOKS))
    names = sorted(p.name for p in NOTEBOOKS.glob("0*.ipynb"))
    tested = {n for n in names if f"test_{n[:2]}_" in Path(__file__).read_text()}
    assert len(names) >= 6 and tested == set(names), set(names) - tested
    assert gallery.HERE == NOTEBOOKS


def test_the_gallery_script_writes_into_a_folder_it_creates(tmp_path):
    """What `make gallery` runs, end to end, on one short notebook: the output folder need not exist."""
    sys.path.insert(0, str(NOTEBOOKS))
    try:
        import gallery
    finally:
        sys.path.remove(str(NOTEBOOKS))
    out = tmp_path / "new" / "gallery"
    assert gallery.main(["--fast", "--out", str(out), str(NOTEBOOKS / "02_lazy_tensors_and_mark_step.ipynb")]) == 0
    assert [p.name for p in out.glob("*.html")] == ["02_lazy_tensors_and_mark_step.html"]


@pytest.mark.timeout(900)
def test_07_compile_time(tmp_path, monkeypatch):
    nb, took = execute("07_compile_time.ipynb", tmp_path, monkeypatch)
    out = texts(nb)
    assert "compile_dynamo_s" in out and "from artifacts" in out and "hit /" in out   # the phases and the caches
    assert "artifact key:" in out and "artifacts: loaded" in out
    assert "compiled regions: transformer.h: 2 × GPT2Block" in out
    assert out.count("inductor · default:") == 1 and out.count("inductor · blocks:") == 1   # a line per scope
    # the short version searches the two scopes compiled above (warm): both tried, the blocks as the second
    assert "inductor · default" in out and "inductor · blocks" in out
    assert "search ended: every configuration of the space (2) was tried" in out
    figs = outputs(nb, PLOTLY)
    assert sum({"Dynamo", "AOTAutograd", "Inductor"} <= trace_names(f) for f in figs) == 2


@pytest.mark.timeout(900)
def test_08_time_to_quality(tmp_path, monkeypatch):
    nb, took = execute("08_time_to_quality.ipynb", tmp_path, monkeypatch)
    figs = outputs(nb, PLOTLY)
    curves = [f for f in figs if any((t.get("meta") or {}).get("median") for t in f.get("data", []))]
    assert curves and trace_names(curves[0]) >= {"native (median)", "eager@8 (median)", "eager@8, lr×2 (median)"}
    assert any(t.get("opacity") == 0.3 for t in curves[0]["data"]), "no faint line per seed"
    assert "target" in json.dumps(curves[0]["layout"]), "the target line is not drawn"
    assert any(any(t.get("type") == "bar" for t in f.get("data", [])) for f in figs), "no bars of time to target"
    out = texts(nb)
    assert "target held-out loss" in out and "the reference's median held-out loss at its" in out
    assert "time_to_target_s" in out and "samples_ratio" in out and "speedup" in out   # the table
    assert "samples per second" in out and "expected ≈" in out                       # samples against steps
    assert "olympic mean" in out and ("inconclusive" in out or "sooner" in out or "later" in out)
    assert "No compiled candidate in the short version" in out
