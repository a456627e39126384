import subprocess
import sys

import pytest

from tcbench.cli import main


def test_models_and_backends_tables(capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "bert-base-cased" in out and "t5-base" in out
    assert main(["backends"]) == 0
    assert "inductor" in capsys.readouterr().out


def test_bad_spec_value_is_a_clear_error(capsys):
    assert main(["run", "--batch-size", "0"]) == 2
    assert "batch_size=0" in capsys.readouterr().err


def test_unknown_backend_names_the_allowed_ones():
    with pytest.raises(SystemExit, match="allowed: eager, inductor, xla"):
        main(["compare", "--backends", "eager,tvm"])


def test_console_script_is_installed():
    out = subprocess.run([sys.executable, "-m", "tcbench.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "compare" in out.stdout


@pytest.mark.integration
def test_compare_prints_summary_and_writes_report(tmp_path, capsys):
    report = tmp_path / "out.html"
    code = main(["compare", "--model", "gpt2", "--size", "tiny", "--backends", "eager,xla",
                 "--batch-size", "8", "--seq-len", "32", "--steps", "6", "--warmup", "2", "--lr", "2e-3",
                 "--dropout", "0", "--threads", "2", "--report", str(report)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "Found configuration for compiler xla" in out
    assert "median_step_ms" in out and "speedup" in out
    html = report.read_text()
    assert "plotly" in html and "xla" in html
