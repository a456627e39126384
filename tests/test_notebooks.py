"""Every notebook runs headless (nbclient, TCBENCH_NB_FAST=1) without error, and its key outputs are there."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = [pytest.mark.notebook, pytest.mark.integration]

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
PLOTLY = "application/vnd.plotly.v1+json"
WIDGET = "application/vnd.jupyter.widget-view+json"


def execute(name: str, tmp_path: Path, monkeypatch, timeout: int = 600) -> tuple[nbformat.NotebookNode, float]:
    monkeypatch.setenv("TCBENCH_NB_FAST", "1")
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), f"{name} is committed with outputs"
    t0 = time.monotonic()
    NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    return nb, time.monotonic() - t0


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
    assert any(trace_names(f) == {"padding=max_length", "padding=longest"} for f in figs)
    assert "recompiles_after_warmup" in texts(nb)


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
