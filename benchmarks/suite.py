"""Where the test suite's time goes (issue 47): a pytest JUnit XML report, grouped by folder and by kind.

    .venv/bin/python -m pytest -q -p no:cacheprovider --junitxml=build/suite.xml     # the whole suite, one process
    .venv/bin/python benchmarks/suite.py build/suite.xml [--label "before (728fd5c)"] [--out benchmarks/suite]

or `make test`'s legs as it runs them, ``make test JUNIT=build/suite`` (build/suite-unit.xml, -int.xml and
-browser.xml), every report given: ``suite.py build/suite-unit.xml build/suite-int.xml build/suite-browser.xml``.
Each report's wall time (its ``testsuite`` element) is kept beside the tests' own seconds: on two workers the tests'
seconds add up to more than the leg took.

Each run's table is kept under its label in benchmarks/suite.json; benchmarks/suite.md shows every label side by
side: seconds per folder, the kinds (unit / integration / notebook / browser, from the markers pytest collects) and
the 25 slowest tests. ``--coverage build/coverage.json`` (``make test COVERAGE=1`` writes it) adds the run's line
coverage of tcbench and widgets. What each test over 20 s alone guarantees: benchmarks/slow_tests.md.
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


def wall(xml: Path) -> float:
    """The report's wall time: its test suites' (pytest's own count, from its start to its end)."""
    return sum(float(s.get("time") or 0.0) for s in ET.parse(xml).iter("testsuite"))


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


def table(cases: list[dict], wall_s: float | None = None) -> dict:
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
    return dict(date=time.strftime("%Y-%m-%d"), tests=len(cases), seconds=sum(c["seconds"] for c in cases), wall=wall_s,
                folders=dict(sorted(folders.items(), key=lambda kv: -kv[1])), kinds=dict(by_kind),
                slowest=[(c["name"], c["seconds"]) for c in slow])


def coverage(path: Path) -> dict:
    """The totals of coverage.py's JSON report: statements, those covered, the percentage."""
    t = json.loads(path.read_text())["totals"]
    return dict(statements=t["num_statements"], covered=t["covered_lines"], percent=t["percent_covered"])


def coverage_text(c: dict | None) -> str:
    return "–" if not c else f"{c['percent']:.1f} % ({c['covered']:,} of {c['statements']:,} lines)"


def markdown(runs: dict) -> str:
    labels = list(runs)
    out = ["Where `make test`'s pytest time goes, per run (`benchmarks/suite.py`; seconds of each test's own time, as "
           "pytest's JUnit report gives it, and pytest's wall time, which on two workers is less than their sum).", "",
           "| | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels),
           "| tests | " + " | ".join(str(runs[x]["tests"]) for x in labels) + " |",
           "| pytest's wall time | " + " | ".join(f"{runs[x]['wall'] / 60:.1f} min" if runs[x].get("wall") else "–"
                                                 for x in labels) + " |",
           "| tests' own time | " + " | ".join(f"{runs[x]['seconds'] / 60:.1f} min" for x in labels) + " |",
           "| line coverage (tcbench, widgets) | " + " | ".join(coverage_text(runs[x].get("coverage")) for x in labels)
           + " |"]
    for k in ("unit", "integration", "notebook", "browser"):
        out.append(f"| {k} | " + " | ".join(
            f"{runs[x]['kinds'].get(k, [0, 0])[0]} tests, {runs[x]['kinds'].get(k, [0, 0.0])[1] / 60:.1f} min"
            for x in labels) + " |")
    folders = sorted({f for x in labels for f in runs[x]["folders"]},
                     key=lambda f: -max(runs[x]["folders"].get(f, 0) for x in labels))
    out += ["", "Per folder (minutes):", "", "| folder | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
    out += [f"| {f} | " + " | ".join(f"{runs[x]['folders'].get(f, 0) / 60:.1f}" for x in labels) + " |"
            for f in folders]
    out += ["", "What each test over 20 s alone guarantees, and what was made cheaper: "
            "[slow_tests.md](slow_tests.md)."]
    for x in labels:
        out += ["", f"The 25 slowest tests, {x} ({runs[x]['date']}):", "", "| test | s |", "|---|---|"]
        out += [f"| `{name}` | {s:.0f} |" for name, s in runs[x]["slowest"]]
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("xml", nargs="+", help="pytest's --junitxml reports (make test's two legs: both)")
    ap.add_argument("--label", default=time.strftime("%Y-%m-%d %H:%M"), help="this run's column")
    ap.add_argument("--out", default=str(HERE / "suite"), help="where the .json and .md go")
    ap.add_argument("--coverage", type=Path, help="coverage.py's JSON report of the same run (make test COVERAGE=1)")
    args = ap.parse_args()
    store = Path(args.out + ".json")
    runs = json.loads(store.read_text()) if store.exists() else {}
    xmls = [Path(x) for x in args.xml]
    runs[args.label] = table([c for x in xmls for c in read(x)], sum(wall(x) for x in xmls))
    if args.coverage:
        runs[args.label]["coverage"] = coverage(args.coverage)
    store.write_text(json.dumps(runs, indent=1))
    Path(args.out + ".md").write_text(markdown(runs))
    print(markdown(runs))


if __name__ == "__main__":
    main()
