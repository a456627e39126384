"""Install into your own environment: which backend can run with which packages, ``tcbench doctor``, and the
core without any Jupyter package."""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import tcbench as tc
from tcbench.host import doctor as _doctor
from tcbench.host import requirements as req
from tcbench.job.backends import REGISTRY
from tcbench.cli.app import main

ROOT = Path(__file__).resolve().parents[2]
# what `pip install tcbench-workbench` (no extra) must run without
JUPYTER = ("jupyterlab", "jupyter_server", "ipywidgets", "anywidget", "voila", "nbconvert", "notebook", "ipykernel")


# -- which backend can run: pure functions fed with fake versions ----------------------------------------------
def test_torch_xla_must_share_torch_major_minor():
    assert req.xla_mismatch("2.9.0+cu128", "2.9.0") is None          # a local build label does not matter
    assert req.xla_mismatch("2.9.1", "2.9.0") is None                # nor the patch release
    assert req.xla_mismatch("2.10.0.dev20251001", "2.10.0rc1") is None
    why = req.xla_mismatch("2.9.0", "2.8.0")
    assert "torch_xla 2.8.0" in why and "torch 2.9.0" in why and "pip install 'torch_xla==2.9.*'" in why
    assert req.xla_mismatch("3.0.0", "2.9.0") and req.xla_mismatch("2.10.0", "2.1.0")


def test_backend_status_from_fake_versions():
    cxx = ("g++", "/usr/bin/g++")
    both = {"torch": "2.9.0", "torch_xla": "2.9.0"}
    assert all(req.backend_status(b, both, cxx)[0] for b in ("eager", "inductor", "xla"))

    ok, why = req.backend_status("xla", {"torch": "2.9.0", "torch_xla": "2.8.1"}, cxx)
    assert not ok and "2.8.1" in why and "2.9.0" in why and "major.minor" in why

    ok, why = req.backend_status("xla", {"torch": "2.9.0", "torch_xla": None}, cxx)
    assert not ok and "torch_xla is not installed" in why
    assert "pip install 'torch_xla==2.9.*'" in why and "pip install 'tcbench-workbench[xla]'" in why

    ok, why = req.backend_status("inductor", both, ("g++", None))
    assert not ok and "C++ compiler" in why and "g++" in why
    assert req.backend_status("eager", both, ("g++", None))[0]   # eager needs no compiler

    for backend in ("eager", "inductor", "xla"):
        ok, why = req.backend_status(backend, {"torch": None, "torch_xla": "2.9.0"}, cxx)
        assert not ok and "torch is not installed" in why and "pip install tcbench-workbench" in why
    with pytest.raises(ValueError, match="allowed: eager, inductor, xla"):
        req.backend_status("tpu", both, cxx)


def test_the_tested_set_is_named_from_torch_torch_xla_and_transformers():
    """Which of the two tested sets (constraints.txt's pins; LATEST, CI's leg on the newest torch) is installed, local
    labels aside; anything else is an untested combination that names both sets."""
    pinned = {"torch": req.TESTED["torch"] + "+cu128", "torch_xla": req.TESTED["torch_xla"],
              "transformers": req.TESTED["transformers"]}
    assert req.tested_set(pinned) == (f"tested set: pinned (torch {req.TESTED['torch']}+cu128 + torch_xla "
                                      f"{req.TESTED['torch_xla']}, transformers {req.TESTED['transformers']})")
    assert req.tested_set({**pinned, "torch_xla": None}).startswith("tested set: pinned (")
    assert "no xla backend" in req.tested_set({**pinned, "torch_xla": None})
    latest = {"torch": req.LATEST["torch"] + "+cu130", "transformers": req.LATEST["transformers"], "torch_xla": None}
    assert req.tested_set(latest) == (f"tested set: latest (torch {req.LATEST['torch']}+cu130, transformers "
                                      f"{req.LATEST['transformers']}; no torch_xla)")
    for other in ({**latest, "torch_xla": "2.9.0"}, {**latest, "transformers": "5.17.0"},
                  {"torch": "2.11.0", "transformers": "5.17.0"}, {**pinned, "torch_xla": "2.8.0"}, {}):
        text = req.tested_set(other)
        assert text.startswith("untested combination: ") and req.LATEST["torch"] in text, (other, text)
        assert f"torch {req.TESTED['torch']} + torch_xla {req.TESTED['torch_xla']}" in text, text
    assert req.tested_set({}).startswith("untested combination: torch missing, transformers missing (")


def test_version_ranges():
    assert req.release("2.9.0+cu128") == (2, 9, 0) and req.release("0.23.3") == (0, 23, 3)
    assert req.release("5.0.0rc1") == (5, 0, 0) and req.release("2.10.0.dev20251001") == (2, 10, 0)
    assert req.in_range("2.9.0+cu128", ">=2.4,<3") and req.in_range("2.4", ">=2.4,<3")
    assert not req.in_range("2.3.1", ">=2.4,<3") and not req.in_range("3.0.0", ">=2.4,<3")
    assert req.in_range("0.5.13", ">=0.5,<0.6") and not req.in_range("0.6.0", ">=0.5,<0.6")


def test_a_missing_package_makes_its_backend_unavailable_with_the_reason(monkeypatch):
    """The backends' own ``available()`` (what a job and ``tc.backends()`` see) reads the same metadata."""
    real = req.installed_version
    monkeypatch.setattr(req, "installed_version", lambda name: None if name == "torch_xla" else real(name))
    ok, why = REGISTRY["xla"]().available()
    assert not ok and "torch_xla is not installed" in why
    row = tc.backends().set_index("backend").loc["xla"]
    assert not row["available"] and "'torch_xla==" in row["reason"]   # torch past 2.9: torch 2.9 with it
    assert REGISTRY["eager"]().available()[0]

    monkeypatch.setattr(req, "installed_version", lambda name: "2.8.0" if name == "torch_xla" else real(name))
    ok, why = REGISTRY["xla"]().available()
    assert not ok and "torch_xla 2.8.0 does not match torch" in why


# -- doctor -------------------------------------------------------------------------------------------------------
def test_doctor_table_says_what_is_missing_and_how_to_install_it(monkeypatch):
    real = req.installed_version
    monkeypatch.setattr(req, "installed_version", lambda name: None if name in ("voila", "torch_xla") else real(name))
    table = tc.doctor()
    assert list(table.columns) == _doctor.COLUMNS
    rows = table.set_index(["kind", "name"])
    voila = rows.loc[("package", "voila")]
    assert not voila["ok"] and voila["fix"] == "pip install 'tcbench-workbench[lab]'"
    assert rows.loc[("package", "torch"), "tested"] == req.TESTED["torch"]
    fix = rows.loc[("package", "torch_xla"), "fix"]
    assert fix.startswith("pip install '") and "'torch_xla==" in fix   # torch past 2.9: torch 2.9 with it
    assert not rows.loc[("backend", "xla"), "ok"] and rows.loc[("backend", "eager"), "ok"]
    assert _doctor.core_works(table)   # optional parts missing: the core still works

    text = _doctor.render(table, width=60)
    assert "voila         MISSING" in text and "pip install 'tcbench-workbench[lab]'" in text
    assert "result: the core works (optional parts are missing)" in text
    assert "\x1b" not in text and all(len(line) <= 60 for line in text.splitlines()), text


def test_doctor_exits_nonzero_when_the_core_cannot_run(monkeypatch, capsys):
    real = req.installed_version
    monkeypatch.setattr(req, "installed_version", lambda name: None if name == "torch" else real(name))
    assert _doctor.cli() == 1
    out = capsys.readouterr().out
    assert "torch         MISSING" in out and "result: the core cannot run" in out
    monkeypatch.setattr(req, "installed_version", lambda name: "1.13.1" if name == "torch" else real(name))
    assert not _doctor.core_works(tc.doctor())   # installed but outside the supported range


def test_tcbench_doctor_runs_and_names_each_backend(capsys):
    code = main(["doctor"])
    out = capsys.readouterr().out
    assert code == 0, out
    for backend in ("eager", "inductor", "xla"):
        assert re.search(rf"^  {backend}: (available|UNAVAILABLE) \(needs ", out, re.M), out
    for heading in ("python:", "cpu:", "gpu:", "c++ compiler:", "core packages", "lab extra", "xla extra", "result:"):
        assert heading in out


# -- the core without JupyterLab, ipywidgets or Voila --------------------------------------------------------------
def _core_distributions() -> set[str]:
    """The installed distributions `pip install tcbench-workbench` brings: pyproject's core dependencies and theirs."""
    from packaging.requirements import Requirement

    todo = list(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"])
    seen: dict[str, importlib.metadata.Distribution] = {}
    while todo:
        r = Requirement(todo.pop())
        if r.marker is not None and not r.marker.evaluate({"extra": ""}):
            continue
        try:
            dist = importlib.metadata.distribution(r.name)
        except importlib.metadata.PackageNotFoundError:
            continue   # an optional platform package this machine does not have
        key = re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower()
        if key not in seen:
            seen[key] = dist
            todo += dist.requires or []
    return seen


def _core_only_site(folder: Path) -> Path:
    """A site-packages holding only the core distributions (symlinks to their top-level files and metadata)."""
    folder.mkdir()
    for name, dist in _core_distributions().items():
        files = dist.files
        assert files is not None, f"{name} has no RECORD: cannot tell its files"
        for top in {f.parts[0] for f in files if f.parts and f.parts[0] not in ("..", "__pycache__")}:
            source = Path(dist.locate_file(top))
            if source.exists() and not (folder / top).exists() and not top.endswith(".pth"):
                (folder / top).symlink_to(source)
    return folder


def test_the_core_imports_and_its_cli_runs_without_any_jupyter_package(tmp_path):
    """A real core-only environment, not a mock: Python without its site-packages (-S), and on its path only the
    distributions `pip install tcbench-workbench` would install (pyproject's core dependencies, closed over theirs) plus
    the tcbench source. JupyterLab, ipywidgets, Voila ... are then neither importable nor in the metadata."""
    dists = _core_distributions()
    assert not {re.sub(r"[-_.]+", "-", j) for j in JUPYTER} & set(dists), "a core dependency pulls in Jupyter"
    site = _core_only_site(tmp_path / "site")
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{ROOT}", "TCBENCH_HOME": str(tmp_path / "home")}
    env.pop("PYTHONHOME", None)
    run = lambda *args: subprocess.run([sys.executable, "-S", *args], env=env, cwd=tmp_path, capture_output=True,
                                       text=True, timeout=300)

    probe = run("-c", f"""
import importlib.metadata, importlib.util, sys
for name in {JUPYTER!r}:
    assert importlib.util.find_spec(name) is None, name + ' is importable'
    try:
        importlib.metadata.version(name)
        raise AssertionError(name + ' has metadata')
    except importlib.metadata.PackageNotFoundError:
        pass
import tcbench as tc
assert tc.__file__.startswith({str(ROOT)!r}), tc.__file__
print(tc.backends().to_string())
tc.JobSpec()
tc.doctor()
loaded = sorted(m for m in sys.modules if m.split('.')[0] in {JUPYTER!r} + ('IPython', 'torch'))
assert not loaded, loaded
print('core ok')
""")
    assert probe.returncode == 0 and "core ok" in probe.stdout, probe.stdout + probe.stderr
    assert re.search(r"eager\s+True", probe.stdout), probe.stdout

    doctor = run("-m", "tcbench.cli", "doctor")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    for name in ("jupyterlab", "ipywidgets", "anywidget", "voila", "nbconvert"):
        assert re.search(rf"^  {name}\s+MISSING", doctor.stdout, re.M), doctor.stdout
    assert "pip install 'tcbench-workbench[lab]'" in doctor.stdout.split("missing (what")[1]
    assert "result: the core works (optional parts are missing)" in doctor.stdout
    for args in (("profiles",), ("compare", "--help"), ("backends",)):
        out = run("-m", "tcbench.cli", *args)
        assert out.returncode == 0 and out.stdout.strip(), (args, out.stdout + out.stderr)


def test_doctor_says_when_the_data_folder_is_missing(monkeypatch, tmp_path):
    monkeypatch.setenv("TCBENCH_DATA", str(tmp_path / "nowhere"))
    table = tc.doctor()
    row = table.set_index(["kind", "name"]).loc[("system", "data")]
    assert not row["ok"] and "profiles.json" in row["detail"] and "TCBENCH_DATA" in row["fix"]
    assert not _doctor.core_works(table)


@pytest.mark.parametrize("where", ["a file", "under a file", "fine", "to be made"])
def test_doctor_says_when_tcbench_home_cannot_hold_the_store(where, monkeypatch, tmp_path, capsys):
    (tmp_path / "file").write_text("a file, not a folder\n")
    folder = {"a file": tmp_path / "file", "under a file": tmp_path / "file" / "home", "fine": tmp_path,
              "to be made": tmp_path / "new" / "home"}[where]
    monkeypatch.setenv("TCBENCH_HOME", str(folder))
    table = tc.doctor()
    row = table.set_index(["kind", "name"]).loc[("system", "home")]
    usable = where in ("fine", "to be made")
    assert bool(row["ok"]) == usable and row["installed"] == str(folder), row["detail"]
    if not usable:
        assert not _doctor.core_works(table) and "TCBENCH_HOME" in row["detail"] and "TCBENCH_HOME" in row["fix"]
        text = _doctor.render(table, width=400)
        assert f"home: {folder} (UNUSABLE: TCBENCH_HOME " in text and "result: the core cannot run" in text
    assert not (tmp_path / "new").exists()   # doctor looks; it makes nothing


def test_doctor_checks_every_extra_the_docs_name_and_all_installs_them():
    """lab, xla, hf, postgres and dashboard each have their packages checked and their pip command shown; the
    `all` extra installs every one of them."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == req.DIST == "tcbench-workbench"
    table = tc.doctor()
    for extra in req.EXTRAS:
        names = {re.match(r"[A-Za-z0-9_.\-]+", r).group() for r in project["optional-dependencies"][extra]}
        assert names == set(table[(table.kind == "package") & (table.group == extra)].name), extra
        assert req.pip_install(extra) == f"pip install 'tcbench-workbench[{extra}]'"
        assert f"{_doctor.GROUP_TITLES[extra]}: {req.pip_install(extra)}" in _doctor.render(table, width=200)
    everything = re.search(r"\[(.*)\]", project["optional-dependencies"]["all"][0]).group(1).split(",")
    assert set(everything) == set(req.EXTRAS)
