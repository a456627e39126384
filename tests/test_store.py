import multiprocessing as mp
import sqlite3

import pytest

from tcbench import JobSpec, Store, StepRecord
from tcbench._history import get_run, runs, steps


def _rec(i: int, loss=None) -> StepRecord:
    return StepRecord(step=i, step_s=0.1 + i / 1000, samples_s=80.0, tokens_s=10240.0, mem_bytes=1000 * i,
                      loss=loss, warmup=i < 2, seq_len=128)


def test_run_lifecycle_and_readers(store):
    spec = JobSpec(model="gpt2", backend="inductor")
    rid = store.insert_run(spec.to_json(), spec)
    for i in range(5):
        store.add_step(rid, _rec(i, loss=1.0 / (i + 1)))
    df = store.steps(rid)
    assert list(df["step"]) == [0, 1, 2, 3, 4] and df["warmup"].tolist() == [True, True, False, False, False]
    store.finish_run(rid, {"status": "ok", "median_step_s": 0.103, "peak_mem_bytes": 4000}, {"counters": {"compiles": 2}})
    r = get_run(rid, store)
    assert r.status == "ok" and r.spec == spec and len(r.records) == 5 and r.peak_mem_bytes == 4000
    assert r.extra["counters"]["compiles"] == 2
    assert runs(store).iloc[-1]["backend"] == "inductor"
    assert len(steps(rid, store)) == 5


def test_steps_are_committed_one_by_one(store):
    """A reader on another connection sees each step as soon as it is added (a killed job loses nothing)."""
    spec = JobSpec()
    rid = store.insert_run(spec.to_json(), spec)
    store.add_step(rid, _rec(0))
    con = sqlite3.connect(store.path)
    assert con.execute("SELECT COUNT(*) FROM steps WHERE run_id=?", (rid,)).fetchone()[0] == 1
    con.close()


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
    rid = st.insert_run(spec.to_json(), spec)
    for i in range(n):
        st.add_step(rid, _rec(i))


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
