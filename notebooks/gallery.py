"""The teachers' gallery: execute every notebook and write an HTML copy of each, with its tables and plots.

    python notebooks/gallery.py                 # every notebook, full length, into gallery/
    python notebooks/gallery.py --fast 03_*.ipynb --out /tmp/g

`make gallery` runs the first line. The HTML files open without a kernel or a server (plotly.js is embedded
in each; the panel of 00 is stored as widget state), so a teacher can hand them out. The test suite
executes the notebooks through ``execute`` too (with ``fast=True``), so what the gallery runs is what is tested.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent
# plotly's mimetype for JupyterLab plus its HTML form (with plotly.js inlined) for the static copy
RENDERER = "plotly_mimetype+notebook"


def execute(path: Path, cwd: Path, fast: bool, timeout: int = 3600) -> tuple[nbformat.NotebookNode, float]:
    """The notebook executed in a fresh kernel (``TCBENCH_NB_FAST=1`` when ``fast``) and its wall seconds."""
    nb = nbformat.read(path, as_version=4)
    saved = {k: os.environ.get(k) for k in ("TCBENCH_NB_FAST", "PLOTLY_RENDERER")}
    os.environ["PLOTLY_RENDERER"] = RENDERER
    if fast:
        os.environ["TCBENCH_NB_FAST"] = "1"
    else:
        os.environ.pop("TCBENCH_NB_FAST", None)
    try:
        t0 = time.monotonic()
        NotebookClient(nb, timeout=timeout, kernel_name="python3", store_widget_state=True,
                       resources={"metadata": {"path": str(cwd)}}).execute()
        return nb, time.monotonic() - t0
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def to_html(nb: nbformat.NotebookNode, out: Path, took_s: float | None = None) -> Path:
    """Write ``nb`` with its outputs as one self-contained HTML file."""
    from nbconvert import HTMLExporter

    if took_s is not None:   # the handout says how long the run took, measured, not promised
        nb.cells.insert(0, nbformat.v4.new_markdown_cell(
            f"*Executed {time.strftime('%Y-%m-%d %H:%M')} on {os.uname().nodename} in {took_s / 60:.1f} min "
            f"({os.cpu_count()} cores).*"))
    body, _ = HTMLExporter(template_name="lab").from_notebook_node(nb)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(body, encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="*", help="notebook files (default: every notebooks/0*.ipynb)")
    ap.add_argument("--out", default="gallery", help="folder for the HTML files (default: gallery/)")
    ap.add_argument("--fast", action="store_true", help="TCBENCH_NB_FAST=1: the short version the tests run")
    a = ap.parse_args(argv)
    paths = [Path(p) for p in a.notebooks] or sorted(HERE.glob("0*.ipynb"))
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)   # also the notebooks' working folder (files they write land here)
    failed = []
    for path in paths:
        print(f"executing {path.name} …", flush=True)
        try:
            nb, took = execute(path.resolve(), out, a.fast)
        except Exception as exc:  # noqa: BLE001 - one broken notebook must not hide the others
            failed.append(path.name)
            print(f"  {path.name} failed: {type(exc).__name__}: {str(exc).strip().splitlines()[-1][:300]}",
                  file=sys.stderr)
            continue
        html = to_html(nb, out / f"{path.stem}.html", took)
        print(f"  {html} ({took / 60:.1f} min)", flush=True)
    if failed:
        print(f"gallery: {len(failed)} notebook(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    print(f"gallery: {len(paths)} HTML file(s) in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
