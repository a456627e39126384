"""The project's own promises about setup: pyproject.toml holds ranges, constraints.txt the exact tested
versions (and environment.yml and the package's own copy agree with it), README opens with the two commands,
CI calls them."""

import os
import re
import sys
import tomllib

import pytest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# what only the Jupyter side needs: never a core dependency (`pip install tcbench-workbench` stays small)
LAB_ONLY = {"jupyterlab", "jupyter-server", "notebook", "ipykernel", "ipython", "ipywidgets", "anywidget", "voila",
            "nbconvert", "nbclient", "nbformat", "playwright", "pytest-playwright"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _name(req: str) -> str:
    return _norm(re.split(r"[=<>!~;\[ ]", req, maxsplit=1)[0])


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _pins_from_constraints() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            assert re.fullmatch(r"[A-Za-z0-9_.\-]+==[0-9][^\s]*", line), f"constraints.txt: {line!r}, want name==ver"
            name, version = line.split("==")
            assert _norm(name) not in pins, f"constraints.txt pins {name} twice"
            pins[_norm(name)] = version
    return pins


def _pins_from_environment() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "environment.yml").read_text().splitlines():
        m = re.match(r"\s*-\s+([A-Za-z0-9_.\-]+)==([^\s#]+)", line)
        if m:
            pins[_norm(m.group(1))] = m.group(2)
    return pins


def test_environment_yml_pins_what_constraints_txt_pins():
    env, constraints = _pins_from_environment(), _pins_from_constraints()
    assert env == constraints, {k: (env.get(k), constraints.get(k)) for k in env.keys() | constraints.keys()
                                if env.get(k) != constraints.get(k)}
    assert re.search(r"^\s*- -e \.\[lab,xla,test,docs\]\s*$", (ROOT / "environment.yml").read_text(), re.M)


def test_pyproject_has_ranges_and_constraints_pins_every_direct_dependency_inside_them():
    """Every requirement of the core and of each extra is a range (no exact pin), and constraints.txt pins
    each of them, nothing else, to a version inside its range."""
    from tcbench.host.requirements import in_range

    project, pins = _pyproject(), _pins_from_constraints()
    reqs = list(project["dependencies"]) + [r for extra in project["optional-dependencies"].values() for r in extra
                                            if not _name(r).startswith("tcbench")]
    for req in reqs:
        assert "==" not in req and re.search(r">=[0-9.]+,<[0-9.]+$", req), f"{req}: want a range >=low,<high"
        assert _name(req) in pins, f"constraints.txt does not pin {_name(req)}"
        spec = re.sub(r"^\[[^\]]*\]", "", req[len(re.match(r"[A-Za-z0-9_.\-]+", req).group()):])   # less [extras]
        assert in_range(pins[_name(req)], spec), f"constraints.txt pins {_name(req)}=={pins[_name(req)]}, outside {req}"
    assert set(pins) == {_name(r) for r in reqs}, set(pins) ^ {_name(r) for r in reqs}


def test_package_carries_the_pyproject_ranges_and_the_tested_versions():
    """A pip-installed tcbench has no constraints.txt: its own copies (``tcbench.host.requirements``) must agree."""
    from tcbench.host.requirements import EXTRAS, REQUIREMENTS, TESTED

    project = _pyproject()
    want = {"core": project["dependencies"], **{g: project["optional-dependencies"][g] for g in EXTRAS}}
    for group, reqs in want.items():
        assert sorted(r.line for r in REQUIREMENTS if r.group == group) == sorted(reqs), group
    tested = {_norm(k): v for k, v in TESTED.items()}
    assert tested == _pins_from_constraints(), "copy constraints.txt into TESTED in tcbench/host/requirements.py:\n" + \
        repr({k: v for k, v in _pins_from_constraints().items()})


def test_core_dependencies_hold_no_jupyter_package():
    project = _pyproject()
    core = {_name(r) for r in project["dependencies"]}
    assert not core & LAB_ONLY, core & LAB_ONLY
    lab = {_name(r) for r in project["optional-dependencies"]["lab"]}
    assert {"jupyterlab", "ipywidgets", "anywidget", "voila", "nbconvert"} <= lab
    assert {_name(r) for r in project["optional-dependencies"]["xla"]} == {"torch-xla"}


def test_torch_and_torch_xla_pinned_to_the_same_release():
    pins = _pins_from_constraints()
    assert pins["torch"] == pins["torch-xla"]


def test_make_installs_every_extra_with_the_constraints_and_the_demo_its_own_set():
    """`make setup` installs every extra the suite and the docs need; `make demo` the demo's set alone (xla), both
    with the constraints, both again when pyproject.toml or constraints.txt change; the whole set's install also
    counts as the demo's."""
    make = (ROOT / "Makefile").read_text()
    for stamp, extras in (("STAMP", "ALL_EXTRAS"), ("DEMO_STAMP", "DEMO_EXTRAS")):
        rule = re.search(rf"^\$\({stamp}\):(.*)\n\t\$\(call INSTALL,\$\({extras}\)\)$", make, re.M)
        assert rule and "constraints.txt" in rule.group(1) and "pyproject.toml" in rule.group(1), stamp
    assert re.search(r"^ALL_EXTRAS\s*:= lab,xla,test,docs$", make, re.M)
    assert re.search(r"^DEMO_EXTRAS\s*:= xla$", make, re.M)
    assert make.count('-e ".[$(1)]" -c constraints.txt') == 2   # uv's install, and pip's where uv fails
    assert re.search(r"^\ttouch \$\(STAMP\) \$\(DEMO_STAMP\)$", make, re.M)
    assert re.search(r"^demo: \$\(DEMO_STAMP\)$", make, re.M) and re.search(r"^setup: \$\(STAMP\)$", make, re.M)


def test_the_latest_set_is_what_the_newest_torch_leg_takes_from_the_index():
    """LATEST (the second tested set, tcbench/host/requirements.py) names the packages the Makefile's leg on the newest
    torch takes from the index (and torch_xla, which it leaves out), each inside pyproject's range, torch past the
    pinned one; CI runs that leg after the main suite."""
    from tcbench.host.requirements import LATEST, TESTED, in_range, release

    make = (ROOT / "Makefile").read_text()
    floated = re.search(r"^LATEST_FLOAT\s*:=\s*(\S+)\s*$", make, re.M)
    assert floated and set(floated.group(1).split("|")) == {*LATEST, "torch_xla"}, floated
    ranges = {_name(r): r for r in _pyproject()["dependencies"]}
    for name, version in LATEST.items():
        req = ranges[_norm(name)]
        assert in_range(version, req[len(name):]), f"LATEST has {name} {version}, outside {req}"
    assert release(LATEST["torch"]) > release(TESTED["torch"])
    assert re.search(r"^test-latest: setup-latest$", make, re.M) and "TCBENCH_LATEST_LEG=1" in make
    run = (ROOT / ".ci" / "run").read_text().splitlines()
    assert run.index("make test") < run.index("make test-latest")


def test_the_leg_on_the_newest_torch_ran_the_recorded_set():
    """In that leg (`make test-latest` sets TCBENCH_LATEST_LEG=1): pip resolved exactly LATEST, without torch_xla, so
    `tcbench doctor`'s "tested set: latest" is what CI ran. A newer release is skipped here, saying so, until recorded."""
    if not os.environ.get("TCBENCH_LATEST_LEG"):
        pytest.skip("only in `make test-latest`, the leg on the newest torch")
    from tcbench.host.requirements import LATEST, installed_version, release, tested_set

    got = {name: installed_version(name) for name in LATEST}
    assert installed_version("torch_xla") is None
    if {n: release(v or "0") for n, v in got.items()} != {n: release(v) for n, v in LATEST.items()}:
        # an upstream release must not turn CI red: the leg tests it, and doctor calls it untested until recorded
        pytest.skip(f"the leg ran with {got}, newer than LATEST {LATEST}: record it in tcbench/host/requirements.py "
                    "once this leg passes")
    assert tested_set().startswith("tested set: latest (")


def test_the_readme_names_both_tested_sets():
    from tcbench.host.requirements import LATEST, TESTED

    readme = (ROOT / "README.md").read_text()
    assert f"torch {TESTED['torch']} + torch_xla {TESTED['torch_xla']}" in readme, "the pinned set"
    assert f"torch {LATEST['torch']}" in readme and f"transformers {LATEST['transformers']}" in readme, "the latest set"


def test_readme_opens_with_the_two_commands():
    head = (ROOT / "README.md").read_text().splitlines()[:6]
    assert any(l.startswith("make demo") for l in head) and any(l.startswith("make test") for l in head)


def test_ci_runs_the_readme_test_command():
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_every_package_folder_is_listed_for_the_wheel():
    """setuptools builds the wheel from pyproject's explicit package list: a new folder left out of it would be
    missing from an installed tcbench (an editable install finds it anyway, so only this test would notice)."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "tcbench").rglob("__init__.py")}
    assert folders - listed == set(), f"add to pyproject's [tool.setuptools] packages: {sorted(folders - listed)}"


def test_console_script_declared():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert data["project"]["scripts"]["tcbench"] == "tcbench.cli:main"


def test_make_app_serves_on_localhost_behind_a_printed_token(tmp_path):
    """`make app`: Voilà on 127.0.0.1 refuses a request without the token and serves the panel with it."""
    import os
    import signal
    import socket
    import subprocess
    import time
    import urllib.error
    import urllib.request

    import pytest

    if not (ROOT / ".venv" / "bin" / "voila").exists():
        pytest.skip("make setup has not been run (no .venv/bin/voila)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / "app.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(["make", "-s", "app", f"APP_PORT={port}"], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, env={**os.environ, "TCBENCH_HOME": str(tmp_path / "home")})
    try:
        deadline = time.monotonic() + 120
        url = None
        while time.monotonic() < deadline and url is None:
            m = re.search(r"http://127\.0\.0\.1:(\d+)/\?token=([0-9a-f]{48})", log.read_text())
            url = m.group(0) if m else None
            time.sleep(0.2)
        assert url and f":{port}/" in url, log.read_text()

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args, **kwargs):
                return None

        opener = urllib.request.build_opener(NoRedirect)
        while True:   # the server may need a moment after printing the URL
            try:
                opener.open(f"http://127.0.0.1:{port}/", timeout=30)
                raise AssertionError("the panel was served without the token")
            except urllib.error.HTTPError as exc:
                assert exc.code in (302, 403) and "login" in (exc.headers.get("Location") or "login"), exc.code
                break
            except urllib.error.URLError:
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.5)
        with urllib.request.urlopen(url, timeout=120) as page:
            assert page.status == 200
        outside = socket.gethostbyname(socket.gethostname())
        if not outside.startswith("127."):   # bound to 127.0.0.1 only: the host's own address is refused
            with pytest.raises(OSError):
                socket.create_connection((outside, port), timeout=2).close()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)


@pytest.mark.integration
def test_the_wheel_installs_into_an_empty_venv_and_runs_from_outside_the_checkout(tmp_path):
    """`make dist`'s wheel, installed (--no-deps) into a new venv that sees the built torch & co. through a .pth file
    (their folder only: the checkout's editable install is not processed), runs `import tcbench` and `tcbench doctor`
    from a folder outside the checkout, with the shipped data read from inside the wheel (no TCBENCH_DATA); its
    metadata carries our distribution name and a README that renders."""
    import email
    import os
    import subprocess
    import sysconfig
    import zipfile

    import readme_renderer.markdown

    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--disable-pip-version-check", "--no-deps", "-q", "-w",
                    str(dist), str(ROOT)], check=True, capture_output=True, timeout=600)
    wheel, = dist.glob("tcbench_workbench-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = email.message_from_bytes(z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))))
    assert {"tcbench/data/profiles.json", "tcbench/data/task/train.jsonl", "tcbench/data/task/tokenizer.json",
            "tcbench/widgets/__init__.py"} <= names
    assert meta["Name"] == "tcbench-workbench" and meta["Description-Content-Type"] == "text/markdown"
    assert readme_renderer.markdown.render(meta.get_payload()) and "make demo" in meta.get_payload()

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "built-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--disable-pip-version-check",
                    "--no-deps", "-q", str(wheel)], check=True, capture_output=True, timeout=600)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("TCBENCH_DATA", "PYTHONPATH")}
    env["TCBENCH_HOME"] = str(tmp_path / "home")
    probe = subprocess.run([str(py), "-c", "import tcbench, tcbench.widgets; from tcbench.core.profiles import "
                            "data_dir; t = tcbench.doctor().set_index('name'); print(tcbench.__file__); "
                            "print(data_dir()); print(t.installed['data'], t.ok['data'])"], cwd=outside, env=env,
                           capture_output=True, text=True, timeout=300)
    assert probe.returncode == 0, probe.stderr
    where, data, doctor_data, found = probe.stdout.split()
    assert where.startswith(str(site)) and data == doctor_data == str(site / "tcbench" / "data"), probe.stdout
    assert found == "True", probe.stdout
    doctor = subprocess.run([str(venv / "bin" / "tcbench"), "doctor"], cwd=outside, env=env, capture_output=True,
                            text=True, timeout=300)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert doctor.stdout.startswith("tcbench 0.1.0 doctor") and "NOT FOUND" not in doctor.stdout
    assert "result: the core works" in doctor.stdout
