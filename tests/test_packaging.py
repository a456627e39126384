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
