"""The SQLite store's own behaviour (files, paths, an old file's upgrade); the contract every store keeps, on SQLite
and PostgreSQL, is in test_pg_store.py."""

import sqlite3

import pytest

from tcbench import JobSpec, Store, StepRecord
from tcbench.store.history import get_run
from tcbench.store.api import SCHEMA_VERSION, StoreError, StoreMissing


def _rec(i: int, loss=None) -> StepRecord:
    return StepRecord(step=i, step_s=0.1 + i / 1000, samples_s=80.0, tokens_s=10240.0, mem_bytes=1000 * i,
                      loss=loss, warmup=i < 2, seq_len=128, cpu_s=0.09)


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


def test_no_pickle_or_eval_on_load():
    import inspect

    import tcbench.store.history as h
    import tcbench.store.api as s
    import tcbench.store.postgres as pg

    for mod in (s, h, pg):
        src = inspect.getsource(mod)
        assert "import pickle" not in src and "eval(" not in src and "loads(" not in src.replace("json.loads(", "")


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


@pytest.mark.parametrize("how", ["create=False", "readonly=True", "sqlite-url"])
def test_a_store_opened_for_reading_must_exist_and_nothing_is_created(tmp_path, how):
    """Only writing creates a store: opening a missing one for reading names it and makes no file or folder."""
    path = tmp_path / "nonexistent" / "x.db"
    open_it = {"create=False": lambda: Store(path, create=False), "readonly=True": lambda: Store(path, readonly=True),
               "sqlite-url": lambda: Store(f"sqlite:///{path}", create=False)}[how]
    with pytest.raises(StoreMissing, match=f"the store {path} does not exist") as err:
        open_it()
    assert "tcbench run" in str(err.value) and "\n" not in str(err.value)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(StoreError, match="its folder .*nonexistent does not exist"):   # a typo never splits history
        Store(path)
    assert list(tmp_path.iterdir()) == []
    path.parent.mkdir()
    Store(path).insert_run(JobSpec())   # writing creates it in an existing folder ...
    assert len(open_it().runs()) == 1   # ... and then it opens for reading
