"""Sphinx configuration of tcbench's documentation site (MyST Markdown, notebooks through myst-nb, never executed).

Build: ``make docs`` (offline, warnings are errors). The gallery takes the notebooks the tests executed
(``build/notebooks/<name>.ipynb``, written by tests/test_notebooks.py) and otherwise the committed, output-free
ones in ``notebooks/``; they are copied into ``docs/gallery/`` (not committed) before the build reads its sources.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import plotly

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
GENERATED_STATIC = DOCS / "_build" / "generated_static"   # plotly.min.js, copied from the installed plotly
PLOTLY = "application/vnd.plotly.v1+json"
WIDGET = "application/vnd.jupyter.widget-view+json"
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

project = "tcbench"
author = "the tcbench authors"
copyright = "the tcbench authors"   # noqa: A001 (Sphinx's name)

extensions = [
    "myst_nb",                 # MyST Markdown pages and .ipynb notebooks (includes myst_parser)
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinxarg.ext",           # sphinx-argparse: the CLI reference from tcbench.cli.app:build_parser()
]

source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "reference/_generated", "**.ipynb_checkpoints"]
root_doc = "index"

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
# links to files of the repository outside docs/ (examples, benchmarks' sources) are plain links, not cross-references
myst_url_schemes = {"http": None, "https": None, "mailto": None}

nb_execution_mode = "off"      # nothing executes notebooks here: the outputs come from the test run
nb_merge_streams = True
nb_output_stderr = "show"
# plotly's figures carry their own JSON mime type (what JupyterLab draws) and an HTML form (what a static page shows)
nb_mime_priority_overrides = [("html", "application/vnd.plotly.v1+json", None)]
suppress_warnings = ["mystnb.unknown_mime_type"]

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}
autodoc_mock_imports = ["torch", "torch_xla", "transformers"]

html_theme = "furo"
html_title = "tcbench"
html_static_path = ["_static", str(GENERATED_STATIC)]
html_js_files = ["plotly.min.js"]
templates_path: list[str] = []
html_show_sourcelink = False


def _gallery() -> None:
    """Copy the notebooks into docs/gallery/: the test run's executed copies where they exist, else the committed ones."""
    out = DOCS / "gallery"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    executed = ROOT / "build" / "notebooks"
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        src = executed / nb.name if (executed / nb.name).is_file() else nb
        data = json.loads(src.read_text(encoding="utf-8"))
        if not _has_title(data):   # a page needs a title: the notebook's name stands in for a missing one
            data["cells"].insert(0, {"cell_type": "markdown", "id": "tcbench-docs-title", "metadata": {},
                                     "source": [f"# {nb.stem.replace('_', ' ')}"]})
        _static_outputs(data)
        (out / nb.name).write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    plotly_js = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    GENERATED_STATIC.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(plotly_js, GENERATED_STATIC / "plotly.min.js")


def _static_outputs(data: dict) -> None:
    """Outputs a static page can show, small: each plotly figure drawn from its JSON by the one plotly.min.js the
    site loads (the executed notebook inlines plotly.js, ~4.7 MB, in every page), and the live panel (a widget
    that needs a kernel) shown as a screenshot of it."""
    data.get("metadata", {}).pop("widgets", None)
    for n, cell in enumerate(data.get("cells", [])):
        kept = []
        for k, output in enumerate(cell.get("outputs", [])):
            bundle = output.get("data", {})
            html = "".join(bundle.get("text/html", []))
            if "window.PlotlyConfig" in html and PLOTLY not in bundle:
                continue   # plotly.js itself, inlined once per notebook
            if PLOTLY in bundle:
                fig, div = bundle[PLOTLY], f"tcb-fig-{n}-{k}"
                height = fig.get("layout", {}).get("height") or 450
                bundle["text/html"] = (
                    f'<div id="{div}" style="width:100%;height:{height}px"></div><script>'
                    f'window.addEventListener("load",function(){{Plotly.newPlot("{div}",'
                    f'{json.dumps(fig.get("data", []))},{json.dumps(fig.get("layout", {}))},{{responsive:true}});}});'
                    "</script>")
            if WIDGET in bundle:
                bundle.pop(WIDGET)
                bundle["text/html"] = ('<p><em>The live panel needs a running kernel (<code>make lab</code>); '
                                       'a screenshot of it after a run:</em></p>'
                                       '<img src="../_static/panel.png" alt="the tcbench panel" style="width:100%">')
            kept.append(output)
        if "outputs" in cell:
            cell["outputs"] = kept


def _has_title(data: dict) -> bool:
    """Whether the notebook's first markdown cell starts with a level-1 heading."""
    for cell in data.get("cells", []):
        if cell.get("cell_type") == "markdown":
            source = "".join(cell.get("source", []))
            return source.lstrip().startswith("# ")
    return False


def _stored_data() -> None:
    """The stored tables' columns, written from the code that creates them (tcbench.store.api.TABLES)."""
    from tcbench.store.api import SCHEMA_VERSION, TABLES

    lines = [f"Schema version {SCHEMA_VERSION}.", ""]
    for table, cols in TABLES.items():
        lines += [f"### `{table}`", "", "| column | type |", "| --- | --- |"]
        lines += [f"| `{name}` | {typ} |" for name, typ in cols]
        lines.append("")
    gen = DOCS / "reference" / "_generated"
    gen.mkdir(exist_ok=True)
    (gen / "tables.md").write_text("\n".join(lines), encoding="utf-8")


def _escape_bars(app, what, name, obj, options, lines: list[str]) -> None:
    """Docstrings write norms as |G|²: plain text, where reStructuredText would read a substitution."""
    for i, line in enumerate(lines):
        if "|" in line and not line.lstrip().startswith(("|", "+")):
            lines[i] = line.replace("|", "\\|")


def setup(app) -> None:
    app.connect("autodoc-process-docstring", _escape_bars)


_gallery()
_stored_data()
