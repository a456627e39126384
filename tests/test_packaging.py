"""The project's own promises about setup: pins agree, README opens with the two commands, CI calls them."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _pins_from_pyproject() -> dict[str, str]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    reqs = data["project"]["dependencies"] + data["project"]["optional-dependencies"]["test"]
    return {re.split("[=<>]", r)[0].lower().replace("_", "-"): r for r in reqs}


def _pins_from_environment() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "environment.yml").read_text().splitlines():
        m = re.match(r"\s*-\s+([A-Za-z0-9_.\-]+==[^\s#]+)", line)
        if m:
            pins[m.group(1).split("==")[0].lower().replace("_", "-")] = m.group(1)
    return pins


def test_environment_yml_agrees_with_pyproject():
    py, env = _pins_from_pyproject(), _pins_from_environment()
    assert set(py) == set(env), set(py) ^ set(env)
    for name, req in py.items():
        assert req.replace("_", "-").lower() == env[name].replace("_", "-").lower(), (req, env[name])


def test_torch_and_torch_xla_pinned_to_the_same_release():
    py = _pins_from_pyproject()
    assert py["torch"].split("==")[1] == py["torch-xla"].split("==")[1]


def test_readme_opens_with_the_two_commands():
    head = (ROOT / "README.md").read_text().splitlines()[:6]
    assert any(l.startswith("make demo") for l in head) and any(l.startswith("make test") for l in head)


def test_ci_runs_the_readme_test_command():
    assert "make test" in (ROOT / ".ci" / "run").read_text()


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
