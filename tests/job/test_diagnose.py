"""What the compiler did and where: graph breaks and recompiles (dynamo), compiles, host transfers and CPU fallbacks
(XLA), the advice tied to the README's checklist, and how the summary, CLI, report and panel show them."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap

import pytest

import tcbench as tc
from tcbench.job import diagnostics as _diagnose
from tcbench.job.backends import InductorBackend
from tcbench.comparison import Comparison
from tcbench.core.extras import JobExtras
from tcbench.core.results import JobResult

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPEC = tc.JobSpec(model="gpt2", size="tiny", batch_size=4, seq_len=16, steps=6, warmup_steps=2)


def _line(func, text: str) -> int:
    """The line number of ``text`` in ``func``'s source (so the test does not hard-code line numbers)."""
    import inspect

    lines, start = inspect.getsourcelines(func)
    return start + next(i for i, line in enumerate(lines) if text in line)


# -- dynamo, in this process (backend="eager": dynamo's tracing without Inductor's C++ compile) ------------------
def _model(kind: str):
    import torch

    class Breaks(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            y = self.lin(x)
            if kind == "graph_break":
                torch._dynamo.graph_break()
            elif kind == "print":
                print(y)
            elif kind == "item":
                y = y * y.sum().item()
            return (y * 2).sum()

    return Breaks()


def _run_compiled(kind: str, lengths=(3, 3)) -> dict:
    import torch

    torch.manual_seed(0)
    torch._dynamo.reset()   # the test models share one code object: no guards left from the previous case
    diag = InductorBackend.collector()
    model = torch.compile(_model(kind), backend="eager")
    for n in lengths:
        batch = {"x": torch.randn(n, 4)}
        with diag.step(batch):
            model(**batch)
    return diag.collect()


@pytest.mark.parametrize("kind, text, why", [
    ("graph_break", "torch._dynamo.graph_break()", "graph_break()"),
    ("print", "print(y)", "print"),
    ("item", "y.sum().item()", "item()"),
])
def test_a_graph_break_is_reported_with_its_file_line_and_reason(kind, text, why):
    data = _run_compiled(kind)
    breaks = [e for e in data["entries"] if e["kind"] == "graph break"]
    assert breaks, data
    e = breaks[0]
    assert (e["file"], e["line"], e["function"]) == (__file__, _line(_model, text), "forward")
    assert text in e["code"]
    assert why in e["why"] or why in e["detail"]
    assert e["count"] >= 1 and e["first_step"] == 0 and e["origin"] == ""
    assert data["graph_breaks"] == sum(b["count"] for b in breaks) >= 1
    assert f"test_diagnose.py:{e['line']} forward" in data["summary"]
    if kind in ("print", "item"):
        assert e["advice"].startswith(_diagnose.NO_SYNC)
    json.dumps(data)   # plain data: it crosses the job's pipe


def test_a_new_shape_is_a_recompile_with_the_guard_that_failed():
    data = _run_compiled("none", lengths=(3, 3, 5, 5))
    assert data["graph_breaks"] == 0 and data["recompiles"] == 1, data
    (e,) = [e for e in data["entries"] if e["kind"] == "recompile"]
    assert "size mismatch" in e["why"] and "expected 3, actual 5" in e["why"]
    assert (e["file"], e["line"], e["function"]) == (__file__, _line(_model, "def forward"), "forward")
    assert e["first_step"] == 2 and "padding='max_length'" in e["advice"]
    assert [s["shapes"] for s in data["shapes"]] == [{"x": [3, 4]}, {"x": [5, 4]}]
    assert "1 recompile (at test_diagnose.py:" in data["summary"] and "2 input shapes" in data["summary"]


def test_a_clean_model_says_so():
    data = _run_compiled("none")
    assert data["entries"] == [] and data["advice"] == []
    assert data["summary"] == "no graph breaks, recompiles, fallbacks or host transfers; 1 input shape"


def test_collect_without_steps_and_for_eager():
    import torch

    torch._dynamo.reset()
    diag = InductorBackend.collector()
    torch.compile(_model("graph_break"), backend="eager")(torch.randn(2, 4))
    data = diag.collect()   # a user's own loop may not wrap its steps: the places are still there
    assert data["steps"] == 0 and data["entries"][0]["first_step"] is None and data["entries"][0]["line"]
    assert _diagnose.Collector("eager").collect()["entries"] == []


# -- XLA, in a fresh interpreter (after a CPU backward, creating the XLA device crashes the autograd engine) ------
XLA_SCRIPT = textwrap.dedent("""
    import json, os
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    import torch, torch_xla
    from tcbench.job.backends import XlaBackend

    dev = torch_xla.device()
    out = {}
    for case in ("shapes", "item"):
        diag = XlaBackend.collector()
        lin = torch.nn.Linear(4, 4).to(dev)
        opt = torch.optim.SGD(lin.parameters(), lr=0.1)
        for n in ((3, 3, 3, 5, 5) if case == "shapes" else (3, 3, 3)):
            batch = {"x": torch.randn(n, 4, device=dev)}
            with diag.step(batch):
                y = lin(batch["x"])
                if case == "item":
                    y = y * y.sum().item()   # ITEM LINE
                y.pow(2).mean().backward()
                opt.step()
                opt.zero_grad()
                torch_xla.sync()
        out[case] = diag.collect()
    print("RESULT " + json.dumps(out))
""")


@pytest.fixture(scope="module")
def xla_cases(tmp_path_factory):
    pytest.importorskip("torch_xla")
    script = tmp_path_factory.mktemp("xla") / "xla_case.py"
    script.write_text(XLA_SCRIPT)
    env = dict(os.environ, PYTHONPATH=ROOT, PJRT_DEVICE="CPU")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line, proc.stderr[-3000:]
    return json.loads(line[len("RESULT "):]), str(script)


def test_xla_two_shapes_are_two_compiles_and_the_padding_advice(xla_cases):
    data = xla_cases[0]["shapes"]
    assert data["compiles"] == 2 and data["recompiles"] == 1 and len(data["shapes"]) == 2, data
    (e,) = data["entries"]
    assert e["kind"] == "recompile" and e["why"] == "new input shape x 5×4" and e["first_step"] == 3
    assert e["advice"].startswith("2 input shapes → 2 compiles: pad to a fixed length (padding='max_length')")
    assert data["host_transfers"] == 0 and data["executions_per_step"] == 1.0
    assert data["summary"] == "1 recompile (first at step 3); 2 input shapes"


def test_xla_an_item_is_a_host_transfer_found_at_its_line(xla_cases):
    data, script = xla_cases[0]["item"], xla_cases[1]
    assert data["host_transfers"] == 3 and data["compiles"] >= 2, data
    located = [e for e in data["entries"] if e["kind"] == "host transfer" and e["file"]]
    assert located and located[0]["file"] == script and "ITEM LINE" in located[0]["code"]
    assert located[0]["why"].startswith(".item() reads a device value")
    total = [e for e in data["entries"] if e["kind"] == "host transfer" and not e["file"]]
    assert total[0]["count"] == 3 and "1 per step" in total[0]["why"] and "_local_scalar_dense" in total[0]["why"]
    assert any(a.startswith(_diagnose.NO_SYNC) for a in data["advice"])
    assert data["summary"].startswith("3 host transfers (at xla_case.py:")


# -- shown to people: summary, table, CLI, report, panel -----------------------------------------------------
ENTRY = {"kind": "graph break", "file": "/src/model.py", "line": 12, "function": "forward", "origin": "",
         "code": "torch._dynamo.graph_break()", "why": "Call to `torch._dynamo.graph_break()`", "count": 2,
         "first_step": 0, "advice": "remove the torch._dynamo.graph_break() call", "detail": ""}
DIAG = {"backend": "inductor", "steps": 6, "compiles": 3, "graph_breaks": 2, "recompiles": 0, "entries": [ENTRY],
        "advice": [ENTRY["advice"]], "summary": "2 graph breaks (at model.py:12 forward)", "shapes": []}


def _cmp() -> Comparison:
    from tcbench.measure.metrics import job_figures
    from tcbench.core.results import StepRecord

    recs = [StepRecord(step=n, step_s=0.1, samples_s=40, tokens_s=640, mem_bytes=2**20, loss=1.0, warmup=n < 2,
                       seq_len=16) for n in range(6)]
    jobs = []
    for rnd in range(2):
        for b in ("eager", "inductor"):
            figs = dataclasses.replace(job_figures(recs, 4, 2), graph_breaks=2 if b == "inductor" else None)
            extra = JobExtras(diagnostics=DIAG) if b == "inductor" else JobExtras()
            jobs.append(JobResult(spec=SPEC.replace(backend=b), status="ok", run_id=10 * rnd + len(b), records=recs,
                                  figures=figs, round=rnd, extra=extra))
    return Comparison(spec=SPEC, backends=["eager", "inductor"], results=jobs, rounds=2, comparison_id=3)


def test_comparison_diagnostics_table_and_summary_columns():
    cmp = _cmp()
    df = cmp.diagnostics()
    assert list(df.columns) == _diagnose.TABLE_COLUMNS and len(df) == 2            # one row per job and finding
    row = df.iloc[0]
    assert (row.backend, row.kind, row["where"], row["count"]) == ("inductor", "graph break", "model.py:12 forward", 2)
    assert tc.diagnostics(cmp.results[1]).to_dict("records") == df.iloc[:1].to_dict("records")   # one job
    s = cmp.summary().set_index("backend")
    assert s.loc["inductor", "graph_breaks"] == 2 and s.loc["inductor", "diagnosis"] == DIAG["summary"]
    assert s.loc["eager", "diagnosis"] == ""
    assert len(_diagnose.top(df)) == 1                                               # the rounds agree: shown once


def test_cli_prints_the_places(capsys):
    from tcbench.cli.app import print_comparison

    print_comparison(_cmp())
    out = capsys.readouterr().out
    assert ("graph break ×2 at model.py:12 forward `torch._dynamo.graph_break()` — Call to `torch._dynamo.graph_break()`"
            " → remove the torch._dynamo.graph_break() call") in out


def test_report_and_panel_show_a_section_only_when_there_are_findings():
    from tcbench.widgets import _report as panel_report

    cmp = _cmp()
    html = cmp.to_html()
    assert "<h2>What the compiler did</h2>" in html and "<code>model.py:12 forward</code>" in html
    assert "what the compiler did</th>" in tc.report.summary_table_html(cmp.summary())
    assert "What the compiler did" in panel_report.diagnostics_html(cmp)
    for r in cmp.results:
        r.extra.diagnostics = {}
    assert "What the compiler did</h2>" not in cmp.to_html() and panel_report.diagnostics_html(cmp) == ""


# -- a real job: a factory model with a deliberate graph break --------------------------------------------------
MODEL_PY = textwrap.dedent("""
    import torch


    class Broken(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(64, 16)
            self.head = torch.nn.Linear(16, 64)

        def forward(self, input_ids, labels):
            h = self.emb(input_ids).mean(dim=1)
            torch._dynamo.graph_break()   # DELIBERATE
            return torch.nn.functional.cross_entropy(self.head(h), labels)


    def model(seed=0):
        torch.manual_seed(seed)
        return Broken()


    def batches(batch_size, seq_len, seed=0, split="train"):
        g = torch.Generator().manual_seed(seed)
        while True:
            ids = torch.randint(0, 64, (batch_size, seq_len), generator=g)
            yield {"input_ids": ids, "labels": ids[:, 0]}
""")


@pytest.mark.integration
def test_a_job_reports_its_graph_break_by_file_and_line(tmp_path, monkeypatch):
    pkg = tmp_path / "diagpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "broken.py").write_text(MODEL_PY)
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = tc.JobSpec(model="diagpkg.broken:model", dataset="diagpkg.broken:batches", batch_size=4, seq_len=8,
                      steps=4, warmup_steps=1, threads=1)
    cmp = tc.compare(spec, backends=["inductor"], rounds=1, store=tc.Store(str(tmp_path / "s.db")))
    assert [r.status for r in cmp.results] == ["ok", "ok"], [r.error for r in cmp.results]
    line = MODEL_PY.splitlines().index("        torch._dynamo.graph_break()   # DELIBERATE") + 1
    df = cmp.diagnostics()
    mine = df[(df.kind == "graph break") & (df.file == str(pkg / "broken.py"))]
    assert len(mine) == 1, df.to_dict("records")
    assert (mine.iloc[0]["line"], mine.iloc[0]["function"], mine.iloc[0]["backend"]) == (line, "forward", "inductor")
    assert mine.iloc[0]["where"] == f"broken.py:{line} forward"
    s = cmp.summary().set_index("backend")
    assert s.loc["inductor", "graph_breaks"] >= 1 and f"broken.py:{line} forward" in s.loc["inductor", "diagnosis"]
    stored = tc.load_comparison(cmp.comparison_id, store=tc.Store(str(tmp_path / "s.db"))).diagnostics()
    assert stored[["kind", "where", "count"]].equals(df[["kind", "where", "count"]])   # kept with the run
