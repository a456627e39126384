"""ruff over the package and the panel (its rules: [tool.ruff] in pyproject.toml): no finding is allowed."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(importlib.util.find_spec("ruff") is None,
                    reason="ruff is not installed (the test extra has it: pip install -e '.[test]' -c constraints.txt)")
def test_ruff_finds_nothing_in_tcbench_and_widgets():
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "tcbench", "widgets"],
                         capture_output=True, text=True, timeout=300, cwd=str(ROOT))
    assert out.returncode == 0, f"ruff check tcbench widgets:\n{out.stdout[-6000:]}{out.stderr[-2000:]}"
