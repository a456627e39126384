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


def _code_blocks(lang: str) -> list[tuple[str, str]]:
    """(file, code) of every ```lang block in the README and the docs' own pages."""
    import re

    pages = [ROOT / "README.md", *(p for p in (ROOT / "docs").rglob("*.md")
                                   if not {"_build", "gallery"} & set(p.relative_to(ROOT / "docs").parts))]
    return [(str(p.relative_to(ROOT)), m.group(1)) for p in pages
            for m in re.finditer(rf"```{lang}\n(.*?)```", p.read_text(encoding="utf-8"), re.S)]


def test_the_python_examples_in_the_docs_name_what_the_api_has():
    """Every ```python block parses; each ``tc.NAME`` is in the API, and the keywords it is called with are its
    parameters (the examples are not run: they train; this catches a renamed function or argument)."""
    import ast
    import inspect

    import tcbench as tc

    blocks = _code_blocks("python")
    assert len(blocks) >= 10
    for page, code in blocks:
        tree = ast.parse(code, filename=page)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "tc":
                assert hasattr(tc, node.attr), f"{page}: tc.{node.attr} is not in tcbench's API"
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "tc" \
                    and callable(getattr(tc, node.func.attr, None)):
                params = inspect.signature(getattr(tc, node.func.attr)).parameters
                if any(p.kind is p.VAR_KEYWORD for p in params.values()):
                    continue
                for kw in node.keywords:
                    assert kw.arg is None or kw.arg in params, f"{page}: tc.{node.func.attr}() has no {kw.arg}="


def test_the_cli_examples_in_the_docs_parse():
    """Every `tcbench ...` line of a ```bash block is accepted by the CLI's parser (not run); an upper-case
    placeholder such as ID is read as 1."""
    import shlex

    from tcbench.cli.app import build_parser

    lines = [cmd.strip() for page, code in _code_blocks("bash")
             for line in code.replace("\\\n", " ").splitlines()
             for cmd in line.split("#")[0].split(";") if cmd.strip().startswith("tcbench ")]
    assert len(lines) >= 10
    for line in lines:
        argv = ["1" if a.isupper() else a for a in shlex.split(line)[1:]]   # a placeholder (ID) stands for a number
        if "--" in argv:   # compare-script's own arguments follow --
            argv = argv[:argv.index("--")]
        if "--help" in argv or "-h" in argv:
            continue
        try:
            build_parser().parse_args(argv)
        except SystemExit:
            raise AssertionError(f"the docs show `{line}`, which the CLI refuses") from None
