"""``tcbench doctor``: what is installed, what each backend needs, and what is missing — with the pip command.

One table of rows (``doctor()``, a DataFrame) and its plain-text view (``tcbench doctor``); the text has no
colour and wraps to the terminal, so it reads the same in a narrow terminal, a log or an issue. Exit code 0
when the core works (an optional part may be missing), 1 when it cannot run (a core package is missing or
outside its supported range, the data folder is not found, or the eager backend is unavailable).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import textwrap
from typing import Any

import pandas as pd

from tcbench.host.paths import home
from tcbench.host.requirements import (BACKEND_NEEDS, CORE, DASHBOARD, DIST, EXTRAS, HF, INSTALL, LAB, POSTGRES,
                                        REQUIREMENTS, TESTED, XLA, Requirement, backend_check, cpp_compiler, fix_for,
                                        installed_version, installed_versions, package_problem, tested_set)
from tcbench.core.profiles import cpu_model, data_dir, gpu_datasheet, nvidia_driver, nvidia_gpus

COLUMNS = ["kind", "name", "group", "installed", "tested", "supported", "ok", "detail", "fix"]
DATA_FILES = ("profiles.json", "task/train.jsonl", "task/eval.jsonl", "task/tokenizer.json")
GROUP_TITLES = {CORE: "core packages", LAB: "lab extra: JupyterLab panel, Voila app, gallery",
                XLA: "xla extra: the xla backend", HF: "hf extra: a Hugging Face Trainer script",
                POSTGRES: "postgres extra: the store and studies on PostgreSQL",
                DASHBOARD: "dashboard extra: optuna-dashboard on a study"}


def _system_rows() -> list[dict[str, Any]]:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    gpus = nvidia_gpus()
    cxx, path = cpp_compiler()
    fix = None if path else "apt-get install g++ (or conda install gxx), or set CXX"

    def row(name: str, installed: Any, detail: str, ok: bool = True, fix: str | None = None) -> dict:
        return {"kind": "system", "name": name, "installed": installed, "ok": ok, "detail": detail, "fix": fix}

    return [
        row("tcbench", installed_version(DIST) or "not installed", f"the {DIST} distribution"),
        row("python", platform.python_version(),
            f"{platform.python_implementation()}, {platform.platform(terse=True)}"),
        row("cpu", f"{cores} cores", cpu_model()),
        row("gpu", str(len(gpus)), _gpu_detail(gpus)),
        row("c++ compiler", path, f"{cxx}, called by Inductor on CPU; CXX chooses another", path is not None, fix),
        _data_row(),
        _home_row(),
    ]


def _home_row() -> dict[str, Any]:
    """``TCBENCH_HOME``, where the store, the compile caches and every run's folder live: a folder, or one that can
    be made (its nearest existing parent a writable folder)."""
    folder = home()
    existing = next((p for p in (folder, *folder.parents) if p.exists()), None)
    problem = ("is a file, not a folder" if folder.is_file() else
               "" if folder.is_dir() and os.access(folder, os.W_OK | os.X_OK) else
               "is not writable" if folder.is_dir() else
               f"cannot be made: {existing} is a file" if existing is not None and not existing.is_dir() else
               f"cannot be made: {existing} is not writable" if existing is not None
               and not os.access(existing, os.W_OK | os.X_OK) else "")
    return {"kind": "system", "name": "home", "installed": str(folder), "ok": not problem,
            "detail": (f"TCBENCH_HOME {problem}" if problem else "the store, compile caches and run folders"
                       + ("" if folder.is_dir() else " (made on first use)")),
            "fix": "point TCBENCH_HOME at a folder this user can write (or unset it: ~/.cache/tcbench)"}


def _gpu_detail(gpus: list[tuple[str, float]]) -> str:
    """The GPUs, the driver and the datasheet peak MFU is measured against (or why there is none)."""

    if not gpus:
        return "none (no NVIDIA GPU answered nvidia-smi)"
    sheet = gpu_datasheet(gpus[0][0])
    peak = (f"datasheet peak {sheet[1].get('bf16', sheet[1].get('fp16'))} TFLOP/s bf16/fp16, "
            f"{sheet[1].get('fp32')} fp32 ({sheet[2]})" if sheet else
            f"no datasheet peak for {gpus[0][0]!r} in the catalog (its MFU says so)")
    return (", ".join(f"{name} ({gib:g} GiB)" for name, gib in gpus) +
            f"; driver {nvidia_driver() or 'unknown'}; {peak}")


def _data_row() -> dict[str, Any]:
    """The data folder (built-in task, tokenizer, instance profiles): beside the package in a checkout."""

    folder = data_dir()
    lost = [f for f in DATA_FILES if not (folder / f).is_file()]
    return {"kind": "system", "name": "data", "installed": str(folder), "ok": not lost,
            "detail": f"missing {', '.join(lost)}" if lost else "built-in task, tokenizer, instance profiles",
            "fix": (f"reinstall {DIST} (its wheel carries the data), or set TCBENCH_DATA to a tcbench checkout's "
                    "data/ folder") if lost else None}


def _package_fix(req: Requirement, version: str | None, versions: dict[str, str | None]) -> str:
    """Missing: install its extra (torch_xla: the release matching torch); out of range: that package in range."""
    if version is not None:
        return fix_for(req)
    if req.group == XLA and versions.get("torch"):
        reason, fix = backend_check("xla", versions)[1:]
        return fix or f"none here: {reason}"
    return INSTALL[req.group]


def _package_rows(versions: dict[str, str | None]) -> list[dict[str, Any]]:
    rows = []
    for req in REQUIREMENTS:
        version = versions.get(req.name)
        problem = package_problem(req, version)
        rows.append({"kind": "package", "name": req.name, "group": req.group, "installed": version,
                     "tested": TESTED.get(req.name), "supported": req.spec, "ok": problem is None,
                     "detail": problem or req.why, "fix": _package_fix(req, version, versions) if problem else None})
    return rows


def _backend_rows(versions: dict[str, str | None]) -> list[dict[str, Any]]:
    rows = []
    for name, needs in BACKEND_NEEDS.items():
        ok, reason, fix = backend_check(name, versions)
        rows.append({"kind": "backend", "name": name, "supported": needs, "ok": ok, "detail": reason, "fix": fix})
    return rows


def doctor() -> pd.DataFrame:
    """What tcbench finds here, one row per item: the system (tcbench, Python, CPU, GPU, C++ compiler, data), each
    core and optional package (installed vs tested version, supported range) and each backend (available or
    why not, and what it needs). ``ok`` is False for what is missing or unusable; ``fix`` is the command."""
    versions = installed_versions()
    rows = _system_rows() + _package_rows(versions) + _backend_rows(versions)
    return pd.DataFrame([{c: row.get(c) for c in COLUMNS} for row in rows], columns=COLUMNS)


def core_works(table: pd.DataFrame) -> bool:
    """Every core package installed in its range, the data folder found, TCBENCH_HOME usable (a folder, or one that
    can be made) and the eager backend available."""
    ok = {(kind, name): ok for kind, name, ok in zip(table.kind, table.name, table.ok)}
    core = table[(table.kind == "package") & (table.group == CORE)]
    return bool(core.ok.all() and ok[("backend", "eager")] and ok[("system", "data")] and ok[("system", "home")])


def _wrap(text: str, width: int, indent: str) -> list[str]:
    return textwrap.wrap(text, width=width, initial_indent=indent, subsequent_indent=indent + "  ",
                         break_on_hyphens=False, break_long_words=False) or [indent]


def render(table: pd.DataFrame, width: int = 80) -> str:
    """The plain-text report of a ``doctor()`` table, wrapped to ``width`` (at least 40) columns."""
    width = max(width, 40)
    rows = [{k: (None if v is None or (isinstance(v, float) and v != v) else v) for k, v in r.items()}
            for r in table.to_dict("records")]
    system = {r["name"]: r for r in rows if r["kind"] == "system"}
    cxx = system["c++ compiler"]
    out = [f"tcbench {system['tcbench']['installed']} doctor"]
    out += _wrap(f"python: {system['python']['installed']} ({system['python']['detail']})", width, "")
    out += _wrap(f"cpu: {system['cpu']['detail']}, {system['cpu']['installed']}", width, "")
    out += _wrap(f"gpu: {system['gpu']['detail']}", width, "")
    out += _wrap(f"c++ compiler: {cxx['installed'] or 'NOT FOUND'} ({cxx['detail']})", width, "")
    data = system["data"]
    out += _wrap(f"data: {data['installed']} ({data['detail'] if data['ok'] else 'NOT FOUND: ' + data['detail']})",
                 width, "")
    where = system["home"]
    out += _wrap(f"home: {where['installed']} ({where['detail'] if where['ok'] else 'UNUSABLE: ' + where['detail']})",
                 width, "")
    out += _wrap(tested_set({r["name"]: r["installed"] for r in rows if r["kind"] == "package"}), width, "")
    for group in (CORE, *EXTRAS):
        out += ["", *_wrap(f"{GROUP_TITLES[group]}: {INSTALL[group]}", width, "")]
        out.append(f"  {'package':<13} {'installed':<12} {'tested':<8} supported")
        for r in (r for r in rows if r["kind"] == "package" and r["group"] == group):
            out.append(f"  {r['name']:<13} {r['installed'] or 'MISSING':<12} {r['tested'] or '-':<8} {r['supported']}")
            if not r["ok"] and r["installed"]:
                out += _wrap(f"^ {r['detail']}", width, "    ")
    out += ["", "backends"]
    for r in (r for r in rows if r["kind"] == "backend"):
        out += _wrap(f"{r['name']}: {'available' if r['ok'] else 'UNAVAILABLE'} (needs {r['supported']})", width, "  ")
        out += _wrap(r["detail"], width, "    ")
    fixes: dict[str, list[str]] = {}
    for r in rows:
        if not r["ok"]:
            fixes.setdefault(r["fix"] or "see above", []).append(r["name"])
    out += ["", "missing: nothing" if not fixes else "missing (what, then how to fix it)"]
    for fix, names in fixes.items():
        out += _wrap(", ".join(names), width, "  ") + _wrap(fix, width, "    ")
    if core_works(table):
        out.append("result: the core works" + (" (optional parts are missing)" if fixes else ""))
    else:
        out.append("result: the core cannot run; fix what is missing above, the core first")
    return "\n".join(out)


def cli(a: argparse.Namespace | None = None) -> int:
    """``tcbench doctor``: print the report; 0 when the core works, 1 when it cannot run."""
    table = doctor()
    print(render(table, width=min(shutil.get_terminal_size((80, 24)).columns, 100)))
    return 0 if core_works(table) else 1
