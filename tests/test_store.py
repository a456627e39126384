import multiprocessing as mp
import sqlite3

import pytest

from tcbench import JobFigures, JobResult, JobSpec, Store, StepRecord
from tcbench._history import get_run, runs, steps
from tcbench._store import SCHEMA_VERSION, StoreError


def _rec(i: int, loss=None) -> StepRecord:
    return StepRecord(step=i, step_s=0.1 + i / 1000, samples_s=80.0, tokens_s=10240.0, mem_bytes=1000 * i,
                      loss=loss, warmup=i < 2, seq_len=128, cpu_s=0.09)


def test_run_lifecycle_and_readers(store):
    spec = JobSpec(model="gpt2", backend="inductor")
    rid = store.insert_run(spec, label="", pid=123, host="h")
    store.add_steps(rid, [_rec(i, loss=1.0 / (i + 1)) for i in range(5)])
    df = store.steps(rid)
    assert list(df["step"]) == [0, 1, 2, 3, 4] and df["warmup"].tolist() == [True, True, False, False, False]
    env = {"host": "stored-host", "torch": "9.9.9", "threads": 1, "load_start": {"loadavg": [0.5, 0, 0], "runnable": 1}}
    res = JobResult(spec=spec, status="ok", run_id=rid, env=env, extra={"counters": {"compiles": 2}},
                    figures=JobFigures(median_step_s=0.103, peak_mem_bytes=4000, noisy=True, noise_reason="busy",
                                       steady_steps=3, recompiles_after_warmup=0))
    store.finish_run(res)
    r = get_run(rid, store)
    assert r.status == "ok" and r.spec == spec and len(r.records) == 5 and r.peak_mem_bytes == 4000
    assert r.figures == res.figures and r.records[0].cpu_s == 0.09
    assert r.extra["counters"]["compiles"] == 2 and r.env == env
    row = runs(store).iloc[-1]
    assert row["backend"] == "inductor" and row["host"] == "stored-host" and row["torch"] == "9.9.9"
    assert bool(row["noisy"]) and row["noise_reason"] == "busy" and row["load_start"].startswith("0.50")
    assert len(steps(rid, store)) == 5


def test_steps_are_committed_as_they_are_added(store):
    """A reader on another connection sees each batch as soon as it is added (a killed job loses nothing)."""
    spec = JobSpec()
    rid = store.insert_run(spec)
    store.add_steps(rid, [_rec(0)])
    con = sqlite3.connect(store.path)
    assert con.execute("SELECT COUNT(*) FROM steps WHERE run_id=?", (rid,)).fetchone()[0] == 1
    con.close()


def test_an_older_store_is_upgraded_and_keeps_its_rows(tmp_path):
    """A store written before the figures grew (no cpu_s, no noise columns, no schema version) still opens."""
    path = tmp_path / "old.db"
    con = sqlite3.connect(path)
    con.executescript("""
        CREATE TABLE runs (run_id INTEGER PRIMARY KEY AUTOINCREMENT, comparison_id INTEGER, round INTEGER DEFAULT 0,
            created REAL, ended REAL, status TEXT, error TEXT DEFAULT '', model TEXT, size TEXT, backend TEXT,
            batch_size INTEGER, seq_len INTEGER, precision TEXT, median_step_s REAL, spec_json TEXT, extra_json TEXT);
        CREATE TABLE steps (run_id INTEGER, step INTEGER, step_s REAL, samples_s REAL, tokens_s REAL, mem_bytes INTEGER,
            loss REAL, warmup INTEGER, seq_len INTEGER, PRIMARY KEY (run_id, step));""")
    spec = JobSpec()
    con.execute("INSERT INTO runs (created, status, model, size, backend, batch_size, seq_len, precision, median_step_s,"
                " spec_json) VALUES (1, 'ok', 'bert-base-cased', 'tiny', 'eager', 8, 128, 'fp32', 0.2, ?)",
                (spec.to_json(),))
    con.execute("INSERT INTO steps VALUES (1, 0, 0.2, 40, 5120, 1000, 0.7, 0, 128)")
    con.commit()
    con.close()
    st = Store(path)
    old = get_run(1, st)
    assert old.median_step_s == 0.2 and old.records[0].cpu_s is None and old.env == {} and old.noisy is False
    rid = st.insert_run(spec)
    st.add_steps(rid, [_rec(0)])   # the new columns exist now
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_a_newer_store_is_refused_naming_both_versions(tmp_path):
    path = tmp_path / "new.db"
    Store(path)
    con = sqlite3.connect(path)
    con.execute(f"PRAGMA user_version={SCHEMA_VERSION + 5}")
    con.close()
    with pytest.raises(StoreError, match=f"version {SCHEMA_VERSION + 5}.*{SCHEMA_VERSION}"):
        Store(path)


def test_no_pickle_or_eval_on_load(store):
    import inspect

    import tcbench._history as h
    import tcbench._store as s

    for mod in (s, h):
        src = inspect.getsource(mod)
        assert "import pickle" not in src and "eval(" not in src and "loads(" not in src.replace("json.loads(", "")


def _writer(path: str, n: int, tag: int) -> None:
    st = Store(path)
    spec = JobSpec(seed=tag)
    rid = st.insert_run(spec)
    for i in range(n):
        st.add_steps(rid, [_rec(i)])


def test_two_processes_writing_at_once_lose_no_rows(tmp_path):
    path = str(tmp_path / "c.db")
    Store(path)
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, 150, t)) for t in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    st = Store(path)
    assert len(st.runs()) == 2
    assert st.query("SELECT COUNT(*) AS n FROM steps").iloc[0]["n"] == 300


def test_unknown_run_id_is_a_clear_error(store):
    with pytest.raises(KeyError, match="run_id=999"):
        get_run(999, store)


def test_probes_are_cached_per_host_threads_dtype_and_torch(store):
    store.add_probe("matmul_peak", "h", 1e11, {"spread": 0.01}, threads=1, dtype="fp32", torch="2.9.0")
    store.add_probe("matmul_peak", "h", 5e10, {"spread": 0.5}, threads=2, dtype="fp32", torch="2.9.0",
                    disturbed="its repetitions spread 50%")
    assert store.latest_probe("matmul_peak", "h", 1, "fp32", "2.9.0", 3600)["flops"] == 1e11
    assert store.latest_probe("matmul_peak", "h", 2, "fp32", "2.9.0", 3600) is None   # disturbed: never reused
    assert store.latest_probe("matmul_peak", "h", 1, "bf16", "2.9.0", 3600) is None
    assert store.latest_probe("matmul_peak", "h", 1, "fp32", "2.10.0", 3600) is None


@pytest.mark.parametrize("make, needle", [
    (lambda d: (d / "afile").write_text("x") and d / "afile" / "tcbench.db", "afile is a file, not a folder"),
    (lambda d: d, "is a folder; TCBENCH_DB must name a file"),
    (lambda d: (d / "n.db").write_text("garbage " * 100) and d / "n.db", "file is not a database"),
])
def test_unusable_store_paths_are_named_errors_in_the_api_and_the_cli(tmp_path, make, needle):
    import os
    import subprocess
    import sys

    path = make(tmp_path)
    with pytest.raises(StoreError, match=needle):
        Store(path)
    out = subprocess.run([sys.executable, "-m", "tcbench.cli", "runs"], capture_output=True, text=True,
                         env={**os.environ, "TCBENCH_DB": str(path)})
    assert out.returncode == 2 and needle in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_a_store_of_the_previous_schema_is_upgraded_and_its_ghost_runs_reconciled(tmp_path):
    """Schema 2 had no heartbeat: its rows left `running` by a dead process become `interrupted` on open."""
    path = tmp_path / "v2.db"
    st = Store(path)
    rid = st.insert_run(JobSpec(), pid=2**22 + 12345)   # a pid no process has
    st.add_steps(rid, [_rec(0), _rec(1)])
    con = sqlite3.connect(path)
    con.execute("ALTER TABLE runs DROP COLUMN heartbeat")
    con.execute("ALTER TABLE runs DROP COLUMN worker_pid")
    con.execute("PRAGMA user_version=2")
    con.commit()
    con.close()
    row = Store(path).run_row(rid)
    assert row["status"] == "interrupted" and "ended without reporting" in row["error"]
    assert len(Store(path).steps(rid)) == 2
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
