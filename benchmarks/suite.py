"""Where the test suite's time goes (issue 47): a pytest JUnit XML report, grouped by folder and by kind.

    .venv/bin/python -m pytest -q -p no:cacheprovider --junitxml=build/suite.xml     # the whole suite, one process
    .venv/bin/python benchmarks/suite.py build/suite.xml [--label "before (728fd5c)"] [--out benchmarks/suite]

Each run's table is kept under its label in benchmarks/suite.json; benchmarks/suite.md shows every label side by
side: seconds per folder, the kinds (unit / integration / notebook / browser, from the markers pytest collects) and
the 25 slowest tests.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _marked(marker: str) -> set[str]:
    """The node ids pytest collects under ``-m marker`` (class and parameters stripped to the test's file::name)."""
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only",
                          "-m", marker], cwd=ROOT, capture_output=True, text=True)
    return {line.split("[")[0] for line in out.stdout.splitlines() if "::" in line}


def read(xml: Path) -> list[dict]:
    """Every test case of the report: its node id (file::name), folder and seconds."""
    cases = []
    for case in ET.parse(xml).iter("testcase"):
        path = case.get("classname", "").replace(".", "/")   # tests.job.test_x[.Class] -> tests/job/test_x
        parts = path.split("/")
        while parts and not (ROOT / ("/".join(parts) + ".py")).exists():
            parts.pop()
        file = "/".join(parts) + ".py" if parts else path
        cases.append(dict(id=f"{file}::{case.get('name', '').split('[')[0]}", name=f"{file}::{case.get('name')}",
                          folder=str(Path(file).parent), seconds=float(case.get("time") or 0.0)))
    return cases


def table(cases: list[dict]) -> dict:
    kinds = {k: _marked(k) for k in ("browser", "notebook", "integration")}

    def kind(case_id: str) -> str:
        return next((k for k, ids in kinds.items() if case_id in ids), "unit")

    folders: dict[str, float] = defaultdict(float)
    by_kind: dict[str, list] = defaultdict(lambda: [0, 0.0])
    for c in cases:
        folders[c["folder"]] += c["seconds"]
        k = by_kind[kind(c["id"])]
        k[0] += 1
        k[1] += c["seconds"]
    slow = sorted(cases, key=lambda c: -c["seconds"])[:25]
    return dict(date=time.strftime("%Y-%m-%d"), tests=len(cases), seconds=sum(c["seconds"] for c in cases),
                folders=dict(sorted(folders.items(), key=lambda kv: -kv[1])), kinds=dict(by_kind),
                slowest=[(c["name"], c["seconds"]) for c in slow])


def markdown(runs: dict) -> str:
    labels = list(runs)
    out = ["Where `make test`'s pytest time goes, per run (`benchmarks/suite.py`; seconds of each test's own time, as "
           "pytest's JUnit report gives it; the unit tests ran in one process for these tables).", "",
           "| | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels),
           "| tests | " + " | ".join(str(runs[x]["tests"]) for x in labels) + " |",
           "| total | " + " | ".join(f"{runs[x]['seconds'] / 60:.1f} min" for x in labels) + " |"]
    for k in ("unit", "integration", "notebook", "browser"):
        out.append(f"| {k} | " + " | ".join(
            f"{runs[x]['kinds'].get(k, [0, 0])[0]} tests, {runs[x]['kinds'].get(k, [0, 0.0])[1] / 60:.1f} min"
            for x in labels) + " |")
    folders = sorted({f for x in labels for f in runs[x]["folders"]},
                     key=lambda f: -max(runs[x]["folders"].get(f, 0) for x in labels))
    out += ["", "Per folder (minutes):", "", "| folder | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
    out += [f"| {f} | " + " | ".join(f"{runs[x]['folders'].get(f, 0) / 60:.1f}" for x in labels) + " |"
            for f in folders]
    for x in labels:
        out += ["", f"The 25 slowest tests, {x} ({runs[x]['date']}):", "", "| test | s |", "|---|---|"]
        out += [f"| `{name}` | {s:.0f} |" for name, s in runs[x]["slowest"]]
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("xml", help="pytest's --junitxml report")
    ap.add_argument("--label", default=time.strftime("%Y-%m-%d %H:%M"), help="this run's column")
    ap.add_argument("--out", default=str(HERE / "suite"), help="where the .json and .md go")
    args = ap.parse_args()
    store = Path(args.out + ".json")
    runs = json.loads(store.read_text()) if store.exists() else {}
    runs[args.label] = table(read(Path(args.xml)))
    store.write_text(json.dumps(runs, indent=1))
    Path(args.out + ".md").write_text(markdown(runs))
    print(markdown(runs))


if __name__ == "__main__":
    main()
