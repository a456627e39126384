"""The store contract, run over both databases: an SQLite file and PostgreSQL (a fresh database per test on the
session's own server, ``pg_url``). SQLite-only behaviour (paths, files, read-only folders) is in test_store.py."""

import dataclasses
import multiprocessing as mp
import os
import sqlite3
import subprocess
import sys
import uuid

import pytest

from tcbench import JobFigures, JobResult, JobSpec, Store, StepRecord
from tcbench.core.extras import JobExtras
from tcbench.store.history import get_run, runs, steps
from tcbench.store.api import SCHEMA_VERSION, database
from tcbench.store.base import StoreError, StoreUnreachable, transient

PASSWORD = "s3cr3t-Pa55"   # the test server trusts 127.0.0.1: any password is accepted, none is needed


def _rec(i: int, loss=None) -> StepRecord:
    return StepRecord(step=i, step_s=0.1 + i / 1000, samples_s=80.0, tokens_s=10240.0, mem_bytes=1000 * i,
                      loss=loss, warmup=i < 2, seq_len=128, cpu_s=0.09)


def _fresh_db(pg_url: str, password: str = "") -> str:
    from pgserver import fresh_database

    return fresh_database(pg_url, password=password)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def location(request, tmp_path) -> str:
    """A store location of the test's own: an SQLite file, or a new database on the test server."""
    if request.param == "sqlite":
        return str(tmp_path / "t.db")
    return _fresh_db(request.getfixturevalue("pg_url"))


def _raw(location: str, *sqls: str) -> None:
    """Run SQL on the store behind tcbench's back (an older or newer tcbench's doing)."""
    if "://" in location:
        import psycopg

        with psycopg.connect(location, autocommit=True) as con:
            for sql in sqls:
                con.execute(sql)
    else:
        con = sqlite3.connect(location)
        for sql in sqls:
            con.execute(sql)
        con.commit()
    con.close()


def _set_version(location: str, version: int) -> str:
    if "://" in location:
        return f"UPDATE tcbench_meta SET value='{version}' WHERE key='schema_version'"
    return f"PRAGMA user_version={version}"


def test_run_lifecycle_and_readers(location):
    store = Store(location)
    spec = JobSpec(model="gpt2", backend="inductor")
    rid = store.insert_run(spec, label="", pid=123, host="h")
    store.add_steps(rid, [_rec(i, loss=1.0 / (i + 1)) for i in range(5)])
    store.add_steps(rid, [_rec(4, loss=0.5)])   # a step written again replaces its row
    df = store.steps(rid)
    assert list(df["step"]) == [0, 1, 2, 3, 4] and df["warmup"].tolist() == [True, True, False, False, False]
    assert df["loss"].tolist()[-1] == 0.5
    store.beat(rid, worker_pid=4242, artifacts="/tmp/run-x")
    env = {"host": "stored-host", "torch": "9.9.9", "threads": 1, "load_start": {"loadavg": [0.5, 0, 0], "runnable": 1}}
    res = JobResult(spec=spec, status="ok", run_id=rid, env=env, extra=JobExtras(counters={"compiles": 2}),
                    figures=JobFigures(median_step_s=0.103, peak_mem_bytes=2**40, noisy=True, noise_reason="busy",
                                       steady_steps=3, recompiles_after_warmup=0))
    store.finish_run(res)
    r = get_run(rid, store)
    assert r.status == "ok" and r.spec == spec and len(r.records) == 5 and r.peak_mem_bytes == 2**40
    assert r.figures == res.figures and r.records[0].cpu_s == 0.09
    assert r.extra.counters["compiles"] == 2 and r.env == env
    row = runs(store).iloc[-1]
    assert row["backend"] == "inductor" and row["host"] == "stored-host" and row["torch"] == "9.9.9"
    assert bool(row["noisy"]) and row["noise_reason"] == "busy" and row["load_start"].startswith("0.50")
    assert len(steps(rid, store)) == 5 and store.run_row(rid)["worker_pid"] == 4242
    assert store.run_row(rid)["created"] > 1.7e9 and isinstance(store.run_row(rid)["created"], float)


def test_comparisons_and_their_runs(location):
    store = Store(location)
    spec = JobSpec()
    cid = store.insert_comparison("compare", spec, ["eager", "inductor"], 2, {"note": "x"})
    rids = [store.insert_run(spec.replace(backend=b), comparison_id=cid, round=1) for b in ("eager", "inductor")]
    store.finish_comparison(cid, "done", {"verdict": "pays"})
    assert store.comparison_row(cid)["status"] == "done" and '"pays"' in store.comparison_row(cid)["info_json"]
    assert store.comparison_runs(cid)["run_id"].tolist() == rids and len(store.comparisons()) == 1
    with pytest.raises(KeyError, match="comparison_id=999"):
        store.comparison_row(999)


def test_query_takes_named_parameters_whatever_the_database(location):
    """``:name`` parameters and a dict: SQLite takes them as they are, SQLAlchemy binds them on PostgreSQL (no SQL
    is rewritten, so a ``?`` or ``%`` in quoted text stays text)."""
    store = Store(location)
    for label in ("a-1", "b-2", "what?"):
        store.insert_run(JobSpec(), label=label)
    df = store.query("SELECT label FROM runs WHERE label LIKE :pat AND label <> 'what?' AND round = :r ORDER BY run_id",
                     {"pat": "%-%", "r": 0})
    assert df["label"].tolist() == ["a-1", "b-2"]
    assert store.query("SELECT COUNT(*) AS n FROM runs WHERE label = :l", {"l": "what?"}).iloc[0]["n"] == 1
    assert store.query("SELECT SUM(round) AS s FROM runs").iloc[0]["s"] == 0
    assert store.query("SELECT COUNT(*) AS n FROM runs WHERE label LIKE '%-%'").iloc[0]["n"] == 2   # no parameters


def test_steps_are_committed_as_they_are_added(location):
    """A reader on another connection sees each batch as soon as it is added (a killed job loses nothing)."""
    store = Store(location)
    rid = store.insert_run(JobSpec())
    store.add_steps(rid, [_rec(0)])
    assert len(Store(location, readonly=True).steps(rid)) == 1


def test_probes_are_cached_per_host_threads_dtype_and_torch(location):
    store = Store(location)
    store.add_probe("matmul_peak", "h", 1e11, {"spread": 0.01}, threads=1, dtype="fp32", torch="2.9.0")
    store.add_probe("matmul_peak", "h", 5e10, {"spread": 0.5}, threads=2, dtype="fp32", torch="2.9.0",
                    disturbed="its repetitions spread 50%")
    assert store.latest_probe("matmul_peak", "h", 1, "fp32", "2.9.0", 3600)["flops"] == 1e11
    assert store.latest_probe("matmul_peak", "h", 2, "fp32", "2.9.0", 3600) is None   # disturbed: never reused
    assert store.latest_probe("matmul_peak", "h", 1, "bf16", "2.9.0", 3600) is None
    assert store.latest_probe("matmul_peak", "h", 1, "fp32", "2.10.0", 3600) is None


def test_unknown_run_id_is_a_clear_error(location):
    with pytest.raises(KeyError, match="run_id=999"):
        get_run(999, Store(location))


def test_read_only_store_reads_and_refuses_writes(location):
    rid = Store(location).insert_run(JobSpec())
    ro = Store(location, readonly=True)
    assert ro.readonly and ro.runs()["run_id"].tolist() == [rid]
    with pytest.raises(StoreError, match="read-only"):
        ro.insert_run(JobSpec())
    ro.add_probe("p", "h", 1.0, {})   # a probe is a cache: silently not kept
    assert Store(location).query("SELECT COUNT(*) AS n FROM probes").iloc[0]["n"] == 0


def test_a_store_of_the_previous_schema_is_upgraded_and_its_ghost_runs_reconciled(location):
    """Schema 2 had no heartbeat: its rows left `running` by a dead process become `interrupted` on open."""
    st = Store(location)
    rid = st.insert_run(JobSpec(), pid=2**22 + 12345)   # a pid no process has
    st.add_steps(rid, [_rec(0), _rec(1)])
    _raw(location, "ALTER TABLE runs DROP COLUMN heartbeat", "ALTER TABLE runs DROP COLUMN worker_pid",
         "ALTER TABLE steps DROP COLUMN cpu_s", _set_version(location, 2))
    assert database(location).version(False) == 2
    row = Store(location).run_row(rid)
    assert row["status"] == "interrupted" and "ended without reporting" in row["error"]
    assert len(Store(location).steps(rid)) == 2 and Store(location).steps(rid)["cpu_s"].isna().all()
    assert database(location).version(False) == SCHEMA_VERSION
    Store(location).add_steps(rid, [_rec(2)])   # the new columns exist again
    assert Store(location).steps(rid)["cpu_s"].tolist()[-1] == 0.09


def test_a_newer_store_is_refused_naming_both_versions(location):
    Store(location)
    _raw(location, _set_version(location, SCHEMA_VERSION + 5))
    with pytest.raises(StoreError, match=f"version {SCHEMA_VERSION + 5}.*{SCHEMA_VERSION}"):
        Store(location)
    with pytest.raises(StoreError, match=f"version {SCHEMA_VERSION + 5}"):
        Store(location, readonly=True)


def _writer(location: str, n: int, tag: int) -> None:
    st = Store(location)
    rid = st.insert_run(JobSpec(seed=tag))
    for i in range(n):
        st.add_steps(rid, [_rec(i)])


def test_two_processes_writing_at_once_lose_no_rows(location):
    Store(location)
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(location, 200, t)) for t in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(180)
        assert p.exitcode == 0
    st = Store(location)
    assert len(st.runs()) == 2
    assert st.query("SELECT COUNT(*) AS n FROM steps").iloc[0]["n"] == 400


def test_spooled_steps_are_merged_when_the_store_is_next_opened(location, tmp_path, monkeypatch):
    monkeypatch.setenv("TCBENCH_HOME", str(tmp_path / "home"))
    store = Store(location)
    spec = JobSpec()
    rid = store.insert_run(spec)
    path = store.spool(rid, [_rec(0), _rec(1)], JobResult(spec=spec, status="ok", run_id=rid))
    assert path.is_file() and (("://" not in location) or str(tmp_path / "home") in str(path))
    reopened = Store(location)
    assert len(reopened.steps(rid)) == 2 and reopened.run_row(rid)["status"] == "ok" and not path.exists()


# -- PostgreSQL only: credentials, an unreachable server, the environment variable ---------------------------------
def _closed_port() -> int:
    import socket

    with socket.socket() as s:   # bound, then closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_server_is_one_masked_line_naming_host_and_port():
    pytest.importorskip("psycopg")
    port = _closed_port()
    url = f"postgresql://alice:{PASSWORD}@127.0.0.1:{port}/tcb"
    with pytest.raises(StoreError) as err:
        Store(url)
    msg = str(err.value)
    assert f"127.0.0.1:{port}" in msg and "refused" in msg.lower() and PASSWORD not in msg and "***" in msg
    assert len(msg.splitlines()) == 1 and transient(err.value) and isinstance(err.value, StoreUnreachable)
    out = subprocess.run([sys.executable, "-m", "tcbench.cli", "runs"], capture_output=True, text=True,
                         env={**os.environ, "TCBENCH_DB": url}, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr and PASSWORD not in out.stderr + out.stdout
    assert len(out.stderr.strip().splitlines()) == 1 and f"127.0.0.1:{port}" in out.stderr


def test_an_unknown_database_url_is_refused_masked():
    with pytest.raises(StoreError, match=r"allowed: a file path, sqlite:///path or postgresql://") as err:
        Store(f"mysql://bob:{PASSWORD}@db/x")
    assert PASSWORD not in str(err.value)


@pytest.mark.postgres
def test_a_password_in_tcbench_db_is_never_stored_nor_shown(pg_url, tmp_path, monkeypatch):
    url = _fresh_db(pg_url, PASSWORD)
    monkeypatch.setenv("TCBENCH_DB", url)
    monkeypatch.setenv("TCBENCH_HOME", str(tmp_path / "home"))
    store = Store()
    assert PASSWORD not in str(store.path) and "***" in str(store.path)
    spec = JobSpec()
    rid = store.insert_run(spec)
    store.add_steps(rid, [_rec(0)])
    store.finish_run(JobResult(spec=spec, status="ok", run_id=rid, env={"host": "h"}))
    store.insert_comparison("compare", spec, ["eager"], 1, {})
    spooled = store.spool(rid, [_rec(1)]).read_text()
    with pytest.raises(KeyError) as err:
        store.run_row(999)
    dumped = "".join(store.query(f"SELECT * FROM {t}").to_csv() for t in ("runs", "steps", "comparisons", "probes"))
    assert PASSWORD not in dumped + spooled + str(err.value)
    out = subprocess.run([sys.executable, "-m", "tcbench.cli", "runs"], capture_output=True, text=True,
                         env={**os.environ, "TCBENCH_DB": url}, timeout=120)
    assert out.returncode == 0 and PASSWORD not in out.stdout + out.stderr


@pytest.mark.postgres
def test_a_user_without_write_privileges_opens_the_store_read_only(pg_url):
    import psycopg

    url = _fresh_db(pg_url)
    rid = Store(url).insert_run(JobSpec())
    role = f"reader_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as con:
        con.execute(f"CREATE ROLE {role} LOGIN")
        con.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
    ro = Store(url.replace("postgres@", f"{role}@"))
    assert ro.readonly and ro.runs()["run_id"].tolist() == [rid]
    with pytest.raises(StoreError, match="read-only"):
        ro.insert_run(JobSpec())


@pytest.mark.postgres
def test_a_lost_server_is_transient_so_a_job_spools_its_steps(pg_url):
    url = _fresh_db(pg_url)
    Store(url)
    down = database(url.rsplit(":", 1)[0] + f":{_closed_port()}/x")
    with pytest.raises(StoreUnreachable) as err:
        with down.transaction(1.0):
            pass
    assert transient(err.value)   # the error classes by SQLSTATE: tests/store/test_transient.py


def test_a_study_kept_in_the_store_sits_beside_its_tables(location):
    """``retune_lr(storage="store")``: Optuna's tables in the store's own database, tcbench's untouched."""
    import optuna

    from tcbench.tuning.storage import open_storage

    store = Store(location)
    rid = store.insert_run(JobSpec())
    backend, shown = open_storage("store", store.url())
    optuna.create_study(study_name="s", storage=backend).optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    assert shown.endswith(str(store.path).split("@")[-1])
    assert Store(location).runs()["run_id"].tolist() == [rid]
    assert len(optuna.load_study(study_name="s", storage=backend).trials) == 2


def test_compile_artifacts_are_kept_once_per_key_and_found_by_their_fields(location):
    """A team's compile artifacts: bytes and header in the store (BLOB / BYTEA), the first kept for a key stays, and a
    job's own fields find them whatever the machine's fields say (the key decides later, in the job)."""
    import hashlib

    store = Store(location)
    data = bytes(range(256)) * 40
    head = {"key": "k1", "fields": {"torch": "2.9.0+cpu", "target": ["avx512"], "model": "gpt2", "batch_size": 8},
            "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert store.put_artifact(head, data) is True
    assert store.put_artifact({**head, "sha256": "other"}, b"other") is False        # the first one stays
    store.put_artifact({**head, "key": "k2", "fields": {**head["fields"], "batch_size": 16}}, data)
    found = store.artifacts_for({"model": "gpt2", "batch_size": 8})
    assert [(h["key"], h["sha256"], h["fields"]["target"], d) for h, d in found] == [("k1", head["sha256"], ["avx512"], data)]
    assert store.artifacts_for({"model": "bert-base-cased"}) == []
    assert Store(location, readonly=True).put_artifact({**head, "key": "k3"}, data) is False   # read-only keeps nothing


def test_only_a_postgresql_store_is_shared(location):
    assert Store(location).shared == ("://" in location)


def test_a_comparisons_labels_are_rows_in_order_and_may_contain_commas(location):
    store = Store(location)
    labels = ["eager", "inductor: max-autotune, bf16", "eager (A/A)"]
    cid = store.insert_comparison("compare", JobSpec(), labels, 2, {})
    other = store.insert_comparison("compare", JobSpec(), ["eager", "inductor"], 2, {})
    assert store.comparison_labels(cid) == labels and store.comparison_labels(other) == ["eager", "inductor"]
    rows = store.query("SELECT position, label FROM comparison_labels WHERE comparison_id = :cid ORDER BY position",
                       {"cid": cid})
    assert rows["label"].tolist() == labels and rows["position"].tolist() == [0, 1, 2]
    assert Store(location, readonly=True).comparison_labels(cid) == labels


def test_a_store_of_schema_5_with_comma_joined_labels_loads_and_is_migrated_to_rows(location):
    """Schema 5 kept a comparison's labels only comma-joined in ``comparisons.backends``: read as they are when the
    store is opened read-only, rewritten as rows (once) when it is opened for writing."""
    st = Store(location)
    first = st.insert_comparison("compare", JobSpec(), ["eager", "inductor", "eager (A/A)"], 2, {})
    second = st.insert_comparison("scaling", JobSpec(), ["nproc=1", "nproc=2"], 1, {})
    _raw(location, "DROP TABLE comparison_labels", _set_version(location, 5))
    assert database(location).version(False) == 5
    old = Store(location, readonly=True)
    assert old.comparison_labels(first) == ["eager", "inductor", "eager (A/A)"]
    assert old.comparison_labels(second) == ["nproc=1", "nproc=2"]
    migrated = Store(location)
    assert database(location).version(False) == SCHEMA_VERSION
    assert migrated.comparison_labels(first) == ["eager", "inductor", "eager (A/A)"]
    assert migrated.comparison_labels(second) == ["nproc=1", "nproc=2"]
    Store(location)   # opened again: nothing is added twice
    assert Store(location).query("SELECT COUNT(*) AS n FROM comparison_labels").iloc[0]["n"] == 5


def test_the_latest_noise_floor_is_a_dataclass_of_the_same_jobs_newest_first(location):
    import tcbench as tc

    store = Store(location)
    spec = JobSpec(threads=2)
    summary = dict(comparison_id=0, backend="eager", rounds=3, speedup=1.01, speedup_ci_low=0.97,
                   speedup_ci_high=1.05, resolvable=1.05, verdict_kind="no measurable difference", verdict="…")
    for resolvable in (1.08, 1.05):
        cid = store.insert_comparison("noise-floor", spec, ["eager", "eager (A/A)"], 3, {})
        store.finish_comparison(cid, "done", {"noise_floor": {**summary, "comparison_id": cid,
                                                              "resolvable": resolvable}})
    found = tc.latest_noise_floor(spec, store)
    assert isinstance(found, tc.StoredNoiseFloor) and found.comparison_id == cid and found.resolvable == 1.05
    assert found.created == store.comparison_row(cid)["created"] and found.verdict == "…"
    with pytest.raises(dataclasses.FrozenInstanceError):
        found.resolvable = 1.0
    assert tc.latest_noise_floor(spec.replace(threads=1), store) is None
    assert tc.latest_noise_floor(spec.replace(batch_size=4), store) is None
