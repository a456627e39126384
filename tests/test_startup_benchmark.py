"""benchmarks/startup.py's table and arguments (its measurements are the README's "Job start-up" figures)."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def startup():
    spec = importlib.util.spec_from_file_location("startup", ROOT / "benchmarks" / "startup.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _job(startup, backend: str, launcher: str, first_step: float) -> dict:
    phases = dict.fromkeys(startup.PHASES, 0.5) | {"to first step": first_step}
    return {"backend": backend, "launcher": launcher, "median_step_ms": 30.0, "peak_mem_mib": 80.0, "phases": phases}


def test_the_table_has_a_row_per_backend_and_launcher_and_the_ratio_on_the_fork_row(startup):
    jobs = [_job(startup, "eager", launcher, s) for launcher, s in
            [("spawn", 8.0), ("fork", 2.0), ("spawn", 9.0), ("fork", 4.0), ("spawn", 7.0), ("fork", 3.0)]]
    rows = startup.summary(jobs)
    assert [(r["backend"], r["launcher"]) for r in rows] == [("eager", "spawn"), ("eager", "fork")]
    assert rows[0]["to first step"] == 8.0 and rows[1]["to first step"] == 3.0 and rows[1]["ratio"] == 8.0 / 3.0
    md = startup.markdown({"when": "today", "machine": "here", "spec": "tiny", "rounds": 3, "summary": rows,
                           "first_fork": jobs[1]})
    fork = next(line for line in md.splitlines() if line.startswith("| eager | fork |"))
    assert "| 3.00 (2.00–4.00) |" in fork and fork.endswith("| 30.0 | 80 | **2.7×** |")


@pytest.mark.parametrize("argv", [["--rounds", "0"], ["--backends", "xla"], ["--backends", ""]])
def test_bad_arguments_are_refused(startup, argv, capsys):
    with pytest.raises(SystemExit) as e:
        startup.main(argv)
    assert e.value.code == 2 and "--rounds must be >= 1" in capsys.readouterr().err
