"""Layering: widgets/ is a view (no torch, torch_xla, transformers); tcbench/ never imports ipywidgets."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "torch_xla", "transformers")


def _imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
            roots.add(str(node.args[0].value).split(".")[0])
    return roots


def _py_files(folder: str) -> list[Path]:
    files = sorted((ROOT / folder).rglob("*.py"))
    assert files, f"no Python files under {folder}/"
    return files


def test_widgets_source_never_imports_the_ml_stack():
    bad = {str(p.relative_to(ROOT)): sorted(_imported_roots(p) & set(HEAVY)) for p in _py_files("widgets")}
    assert not {k: v for k, v in bad.items() if v}, f"widgets/ imports the ML stack: {bad}"


def test_tcbench_source_never_imports_ipywidgets():
    bad = {str(p.relative_to(ROOT)): sorted(_imported_roots(p) & {"ipywidgets", "anywidget"})
           for p in _py_files("tcbench")}
    assert not {k: v for k, v in bad.items() if v}, f"tcbench/ imports widget libraries: {bad}"


def test_importing_the_panel_loads_no_ml_stack():
    code = ("import sys, tcbench.widgets\n"
            "from tcbench.widgets import Workbench\n"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    env = {**os.environ, "PYTHONPATH": ""}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env,
                         cwd=str(ROOT / "tests"))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]", f"tcbench.widgets pulled in: {out.stdout}"
