"""The README stays a landing page, and the documentation site builds as `make docs` builds it (warnings are errors).

This file sorts after test_notebooks.py on purpose: pytest runs files in order, so the notebooks that file executes
(saved in build/notebooks/) are there when the site's gallery is built.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 160


def test_readme_is_a_landing_page_that_starts_with_the_two_commands():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < README_MAX_LINES, f"README.md has {len(lines)} lines: move details into docs/"
    head = "\n".join(lines[:15])
    assert "make demo" in head and "make test" in head, "the README's first 15 lines must give `make demo` and `make test`"


def test_readme_links_to_files_that_exist():
    import re

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = {t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", text) if "://" not in t}
    missing = sorted(t for t in targets if t and not (ROOT / t).exists())
    assert not missing, f"README.md links to missing files: {missing}"


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_docs_build_with_warnings_as_errors(tmp_path):
    # the docs extra (make setup installs it): a missing package fails the build below, never skips it
    out = tmp_path / "html"
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", "docs", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=540)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    def page(rel: str) -> str:
        path = out / rel
        assert path.is_file(), f"{rel} was not built"
        return path.read_text(encoding="utf-8")

    assert "tcbench" in page("index.html")
    verdict = page("concepts/reading-a-verdict.html")
    assert "95 % interval" in verdict and "inconclusive" in verdict
    cli = page("reference/cli.html")
    assert "compare" in cli and "--backends" in cli, "the CLI reference has no compare command"
    api = page("reference/api.html")
    assert 'id="tcbench.compare"' in api, "the API reference has no tcbench.compare"
    gallery = sorted((out / "gallery").glob("*.html"))
    assert gallery, "no gallery notebook was built"
    assert "Getting started" in page("getting-started.html")
