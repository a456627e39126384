"""A team starting at once: several processes open the same new study, or the same new store, on a fresh PostgreSQL
database at the same moment (a barrier), again and again. All finish: no error, no trial lost or run twice.

The server is the session's own (``pg_url``, tests/pgserver.py); no real training job runs (the fake runner of
test_pg_studies.py, inherited by the forked processes).
"""

from __future__ import annotations

import multiprocessing as mp
import traceback

import pytest

from tcbench import JobSpec, Store
from tcbench.tuning.lr.retune import retune_lr

from pgserver import fresh_database
from test_pg_studies import KW, SPEC, _counted, _fake_run, _rules_once, _started

pytestmark = pytest.mark.postgres
FORK = mp.get_context("fork")   # the fake runner and the barrier reach the children as they are


def _together(n: int, target, *args) -> list[str]:
    """Run ``target(barrier, *args, i)`` in ``n`` forked processes that start it at the same moment; the errors."""
    barrier, errors = FORK.Barrier(n), FORK.Queue()

    def child(i: int) -> None:
        try:
            barrier.wait(timeout=60)
            target(*args, i)
        except BaseException:   # noqa: BLE001 - reported to the test, whatever it is
            errors.put(traceback.format_exc(limit=4))
            raise

    procs = [FORK.Process(target=child, args=(i,)) for i in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=180)
    found = []
    while not errors.empty():
        found.append(errors.get())
    found += [f"process {i} ended with {p.exitcode}" for i, p in enumerate(procs) if p.exitcode != 0]
    for p in procs:
        if p.is_alive():
            p.kill()
    return found


def _retune(url: str, folder, i: int) -> None:
    retune_lr(SPEC, 32, n_trials=6, storage=url, study_name="shared", store=Store(folder / f"store-{i}.db"), **KW)


def test_workers_starting_one_new_study_at_once_all_finish_and_share_it(pg_url, tmp_path, monkeypatch):
    import optuna

    import tcbench.runner.process as runner

    for attempt in range(4):
        url = fresh_database(pg_url)
        log = tmp_path / f"jobs-{attempt}.log"
        log.touch()
        monkeypatch.setattr(runner, "run", _fake_run(log))
        folder = tmp_path / f"a{attempt}"
        folder.mkdir()
        assert _together(3, _retune, url, folder) == [], attempt
        trials = optuna.load_study(study_name="shared", storage=url).get_trials()   # the plain URL, psycopg (3)
        assert len(_counted(trials)) == 6 and all(t.state.name == "COMPLETE" for t in trials), attempt
        assert sorted(label for _, label in _started(log)) == sorted(f"trial#{t.number}" for t in trials)
        _rules_once(trials)


def _open_store(url: str, i: int) -> None:
    store = Store(url)
    store.insert_run(JobSpec(), label=f"p{i}")


def test_processes_opening_one_new_store_at_once_all_create_or_find_its_tables(pg_url):
    for attempt in range(6):
        url = fresh_database(pg_url)
        assert _together(4, _open_store, url) == [], attempt
        assert sorted(Store(url).runs()["label"]) == ["p0", "p1", "p2", "p3"]


def test_a_url_naming_psycopg2_keeps_working(pg_url):
    pytest.importorskip("psycopg2")
    import optuna

    from tcbench.tuning.storage import open_storage

    url = fresh_database(pg_url).replace("postgresql://", "postgresql+psycopg2://")
    store = Store(url)
    rid = store.insert_run(JobSpec(), label="two")
    assert store.run_row(rid)["label"] == "two" and store.url().startswith("postgresql+psycopg2://")
    storage, shown = open_storage(url, "")
    optuna.create_study(storage=storage, study_name="named")
    assert shown.startswith("postgresql+psycopg2://") and storage.engine.dialect.driver == "psycopg2"
