"""A job imports what it uses: the launcher's imports (what every forked job starts with) and a whole job's run in
its own process leave pandas, plotly, SQLAlchemy, Optuna and SciPy unimported (SciPy is transformers' own), and
importing tcbench imports none of its layers (PEP 562: a name is imported on first use)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

HEAVY = ("pandas", "plotly", "sqlalchemy", "optuna")   # scipy is transformers' own (its loss functions import it)
CODE = """
import json, os, sys, tempfile
from tcbench.core.spec import JobSpec
from tcbench.job import zygote, worker
zygote.preload()                                  # what the warm launcher imports before it forks a job
after_preload = sorted(m for m in {heavy} if m in sys.modules)
spec = JobSpec(steps=3, warmup_steps=1, threads=1, loss_every=1)
r, w = os.pipe()
rc = worker.main([spec.to_json(), str(w), tempfile.mkdtemp()])   # the job itself, as a spawned job runs it
os.close(w)
with os.fdopen(r) as f:
    ended = [m for m in map(json.loads, f.read().splitlines()) if m["type"] == "end"]
print(json.dumps({{"rc": rc, "after_preload": after_preload, "after_job": sorted(m for m in {heavy} if m in sys.modules),
                  "ended": ended}}))
"""


@pytest.mark.integration
def test_a_job_and_its_launcher_import_no_table_plot_or_database_library(tmp_path):
    env = {**os.environ, "TCBENCH_HOME": str(tmp_path), "USE_TORCH_XLA": "0", "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", CODE.format(heavy=HEAVY)], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["rc"] == 0 and [m["status"] for m in seen["ended"]] == ["ok"], (seen, out.stderr[-2000:])
    assert seen["after_preload"] == [] and seen["after_job"] == [], seen


def test_importing_tcbench_imports_none_of_its_layers():
    code = ("import sys, tcbench\n"
            "print(sorted(m for m in sys.modules if m.startswith('tcbench.') or m.split('.')[0] in %r))" % (HEAVY + ("scipy",),))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]", out.stdout
    every = ("import tcbench\nfrom tcbench import plots, report, events, diagnostics, preflight\n"
             "missing = [n for n in tcbench.__all__ if getattr(tcbench, n, None) is None]\nprint(missing)")
    out = subprocess.run([sys.executable, "-c", every], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "[]", (out.stdout, out.stderr[-2000:])   # each, first use
    import tcbench as tc

    assert callable(tc.compare) and tc.JobSpec.__name__ == "JobSpec" and tc.plots.__name__ == "tcbench.view.plots"
    assert set(tc.__all__) <= set(dir(tc))
    with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
        tc.nonsense  # noqa: B018
