"""A team starting at once: N processes open the same new study on a fresh PostgreSQL database at the same moment.

For N = 2, 4, 8 (``--processes``), ``--times`` times each (a fresh database every time), N forked processes wait
at a barrier, then each opens the study's storage as ``retune_lr`` does (``tcbench.tuning.storage.open_storage``:
Optuna's tables created under an advisory lock, passing errors tried again), creates or loads the study
(``load_if_exists``), asks for its first trial and tells it. Reported per N: the processes that failed (goal 0) with
their first error, and the seconds from the barrier to each process's first trial (median, IQR, max).
``--no-lock`` measures the same without the lock and the retries (what tcbench did before: one try, no lock).

Starts its own server as tests/pgserver.py does (Debian's postgresql, as root or the postgres user). Writes
benchmarks/first_start.json and benchmarks/first_start.md.

    .venv/bin/python benchmarks/first_start.py [--times 20] [--processes 2,4,8] [--no-lock]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import statistics
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))

FORK = mp.get_context("fork")


def _first_trial(url: str, barrier, out) -> None:
    import optuna

    from tcbench.tuning.storage import open_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", message="Heartbeat of storage")   # ask/tell here, not optimize
    barrier.wait(timeout=60)
    t0 = time.monotonic()
    try:
        storage, _ = open_storage(url, "")
        study = optuna.create_study(storage=storage, study_name="shared", load_if_exists=True)
        trial = study.ask()
        study.tell(trial, trial.suggest_float("lr", 1e-4, 1e-1, log=True))
        out.put({"ok": True, "s": time.monotonic() - t0})
    except Exception as exc:  # noqa: BLE001 - counted and reported
        out.put({"ok": False, "s": time.monotonic() - t0, "error": f"{type(exc).__name__}: {exc}"[:300]})


def one(url: str, n: int) -> list[dict]:
    barrier, out = FORK.Barrier(n), FORK.Queue()
    procs = [FORK.Process(target=_first_trial, args=(url, barrier, out)) for _ in range(n)]
    for p in procs:
        p.start()
    got = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    return got


def measure(pg_url: str, processes: list[int], times: int) -> list[dict]:
    from pgserver import fresh_database

    rows = []
    for n in processes:
        results = []
        for _ in range(times):
            results += one(fresh_database(pg_url), n)
        ok = [r["s"] for r in results if r["ok"]]
        errors = [r["error"] for r in results if not r["ok"]]
        q = statistics.quantiles(ok, n=4) if len(ok) > 1 else [float("nan")] * 3
        rows.append({"processes": n, "times": times, "starts": len(results), "failed": len(errors),
                     "first_error": errors[0] if errors else "", "median_s": statistics.median(ok) if ok else None,
                     "q1_s": q[0], "q3_s": q[2], "max_s": max(ok) if ok else None})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def markdown(data: dict) -> str:
    lines = [f"Measured {data['when']} on {data['machine']}; PostgreSQL {data['server']} on 127.0.0.1; "
             f"{'without the lock and retries (one try, as before)' if data['no_lock'] else 'tcbench as shipped'}.",
             "", "| processes at once | starts | failed (goal 0) | seconds to the first trial: median (IQR), max | "
             "first error |", "|---|---|---|---|---|"]
    for r in data["rows"]:
        times = "–" if r["median_s"] is None else f"{r['median_s']:.2f} ({r['q1_s']:.2f}–{r['q3_s']:.2f}), {r['max_s']:.2f}"
        err = r["first_error"]
        err = err[err.find("("):] if "(" in err else err   # its cause, the URL left out
        lines.append(f"| {r['processes']} | {r['starts']} | **{r['failed']}** | {times} | {err[:160]} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--times", type=int, default=20)
    p.add_argument("--processes", default="2,4,8")
    p.add_argument("--no-lock", action="store_true")
    a = p.parse_args(argv)
    try:
        processes = [int(x) for x in a.processes.split(",") if x]
    except ValueError:
        processes = []
    if a.times < 1 or not processes or min(processes) < 2:
        p.error(f"--times must be >= 1 and --processes whole numbers >= 2 (got {a.times}, {a.processes!r})")
    from pgserver import missing, server

    why = missing()
    if why:
        p.error(f"no PostgreSQL here: {why}")
    import tcbench.tuning.storage as ts
    from tcbench.core.profiles import cpu_model

    if a.no_lock:   # tcbench before this change: Optuna's tables created by whoever comes, one try
        ts._schema_lock = lambda url, kwargs: contextlib.nullcontext()
        ts.TRIES = 1
    gen = server()
    pg_url = next(gen)
    try:
        import psycopg

        with psycopg.connect(pg_url) as con:
            version = con.info.server_version
        data = {"when": time.strftime("%Y-%m-%d"), "machine": f"{cpu_model()}, {mp.cpu_count()} cores",
                "server": f"{version // 10000}.{version % 10000}", "no_lock": a.no_lock,
                "rows": measure(pg_url, processes, a.times)}
    finally:
        gen.close()
    name = "first_start_no_lock" if a.no_lock else "first_start"
    (HERE / f"{name}.json").write_text(json.dumps(data, indent=1))
    (HERE / f"{name}.md").write_text(markdown(data))
    print(markdown(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
