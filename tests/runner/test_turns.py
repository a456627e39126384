"""Lock-step rounds (tcbench.runner.turns): who gets the next turn, and why pairing blocks in time cancels a drift
that both sides share — the statistics on a simulated machine, no job."""

from __future__ import annotations

import math
import os
import random

import pytest

from tcbench.measure.interval import ratio_interval
from tcbench.runner.turns import Turns


def _taken(fds: dict[str, int]) -> list[str]:
    """Which jobs were given a turn since the last look (one byte each on their FIFO)."""
    got = []
    for job, fd in fds.items():
        try:
            got += [job] * len(os.read(fd, 64))
        except BlockingIOError:
            pass
    return got


@pytest.fixture
def round_of_two(tmp_path):
    turns = Turns(["eager#0", "inductor#0"], block=3)
    fds = {}
    for job in turns.order:
        folder = tmp_path / job
        folder.mkdir()
        env = turns.attach(job, folder)
        path, _, block = next(iter(env.values())).rpartition(":")
        assert block == "3" and path == str(folder / "turns.fifo")
        fds[job] = os.open(path, os.O_RDONLY | os.O_NONBLOCK)   # the job's end
    yield turns, fds, tmp_path
    for fd in fds.values():
        os.close(fd)


def test_no_turn_until_every_job_has_compiled_then_they_alternate_in_order(round_of_two):
    turns, fds, _ = round_of_two
    turns.arrived("eager#0", waits=True)            # eager is at its first turn; inductor still compiles
    assert _taken(fds) == [] and turns.waiting("eager#0") and not turns.started
    turns.arrived("inductor#0", waits=True)
    assert _taken(fds) == ["eager#0"] and not turns.waiting("eager#0") and turns.waiting("inductor#0")
    assert turns.started
    turns.arrived("eager#0", waits=True)            # its block done: inductor's turn
    assert _taken(fds) == ["inductor#0"]
    turns.arrived("inductor#0", waits=True)
    assert _taken(fds) == ["eager#0"]
    turns.arrived("eager#0", waits=False)           # eager's last block: inductor runs on alone
    assert _taken(fds) == ["inductor#0"]
    turns.arrived("inductor#0", waits=True)
    assert _taken(fds) == ["inductor#0"] and turns.turns == 5


def test_a_job_that_ends_before_its_first_turn_frees_the_others(round_of_two):
    turns, fds, tmp = round_of_two
    turns.arrived("inductor#0", waits=True)
    turns.ended("eager#0", tmp / "eager#0")         # failed while loading: it never reached a turn
    assert _taken(fds) == ["inductor#0"]
    assert not (tmp / "eager#0" / "turns.fifo").exists()
    turns.ended("inductor#0", tmp / "inductor#0")
    turns.ended("inductor#0", tmp / "inductor#0")   # twice (the runner's finally): harmless
    assert not (tmp / "inductor#0" / "turns.fifo").exists()


@pytest.mark.parametrize("lockstep", [True, False])
def test_the_next_rounds_launchers_start_once_the_rounds_jobs_have_compiled(lockstep, round_of_two, monkeypatch):
    """The runner's side of ``zygote_client.start_spares``: a lock-step round's first turn (every job compiled), or
    in sequential rounds a job's measured steps; never while a job of the round still compiles."""
    import queue
    import time

    from tcbench import JobSpec
    from tcbench.core.results import JobResult
    from tcbench.job.protocol import Phase, Turn
    from tcbench.runner import process

    turns, _, _ = round_of_two
    calls: list[int] = []
    monkeypatch.setattr(process, "start_spares", lambda: calls.append(1))

    class Exited:
        returncode = 0

        def poll(self):
            return 0

    class Writer:
        pending: list = []

        def flush(self, idle):
            pass

    def wait(job: str, *messages) -> None:
        q: queue.Queue = queue.Queue()
        for m in (*messages, None):
            q.put(m)
        result = JobResult(spec=JobSpec(), status="running")
        process._wait(Exited(), q, JobSpec(), result, Writer(), lambda e: None, None, job, time.monotonic(),
                      turns if lockstep else None)

    wait("eager#0", Phase("warmup"), Phase("measuring"), *([Turn(step=2, waits=True)] if lockstep else []))
    assert calls == ([] if lockstep else [1])   # lock-step: inductor still compiles
    if lockstep:
        wait("inductor#0", Phase("measuring"), Turn(step=2, waits=True))
        assert calls == [1] and turns.started


def test_a_bad_block_is_refused_by_name():
    with pytest.raises(ValueError, match="block=0 is not allowed"):
        Turns(["a#0"], block=0)


def _machine(t: float, phase: float) -> float:
    """A shared VM's speed factor at time t (seconds): slow swings of ±30 % over tens of seconds."""
    return 1.0 + 0.3 * math.sin(t / 7.0 + phase) + 0.1 * math.sin(t / 1.7 + 2 * phase)


def _steps(start: float, n: int, step: float, phase: float, rng: random.Random, gap: float = 0.0,
           block: int = 0) -> list[float]:
    """n steps of a job whose own step is ``step`` s, from time ``start``; with ``block``, it runs ``block`` steps
    then waits ``gap`` s (the other job's turn)."""
    out, t = [], start
    for i in range(n):
        s = step * _machine(t, phase) * rng.lognormvariate(0, 0.02)
        out.append(s)
        t += s + (gap if block and (i + 1) % block == 0 else 0.0)
    return out


def test_blocks_paired_in_time_give_a_narrow_covering_interval_and_the_same_jobs_run_apart_a_wide_one():
    """Two jobs whose true ratio is 1.10 on a machine whose speed drifts slowly: run minutes apart in rounds (each
    round: A, then B 10 s later), the per-round ratios carry the drift and the interval is wide; run in lock-step
    (A's block of 5 steps, then B's, ...), both see the same machine and the interval is narrow and covers 1.10."""
    rng = random.Random(7)
    a_step, b_step, n, rounds = 0.033, 0.030, 35, 6
    apart, lockstep = [], []
    for r in range(rounds):
        phase, start = rng.uniform(0, 6.3), 30.0 * r
        a = _steps(start, n, a_step, phase, rng)
        b = _steps(start + 10.0, n, b_step, phase, rng)
        apart.append((a, b))
        a = _steps(start, n, a_step, phase, rng, gap=5 * b_step, block=5)          # A's turn, then B's ...
        b = _steps(start + 5 * a_step, n, b_step, phase, rng, gap=5 * a_step, block=5)
        lockstep.append((a, b))
    (_, wide_low, wide_high), (_, low, high) = ratio_interval(apart), ratio_interval(lockstep)
    assert low <= 1.10 <= high, (low, high)
    # in log units the paired interval is over ten times narrower (here: 0.018 against 0.68)
    assert high / low < 1.05 and math.log(wide_high / wide_low) > 10 * math.log(high / low), (wide_low, wide_high,
                                                                                              low, high)


@pytest.mark.integration
def test_a_lockstep_round_takes_turns_of_measured_steps_and_leaves_nothing_behind(store):
    """Two real jobs (A/A, so no cold compile): their warmup apart, then blocks of 5 measured steps in turns; each
    took its turns, the scheduling figures leave its waits out, and no FIFO or process is left."""
    from pathlib import Path

    import tcbench as tc
    from tcbench.core import events as ev

    seen: list[str] = []
    spec = tc.JobSpec(steps=14, warmup_steps=2, threads=1)
    cmp = tc.compare(spec, backends=["eager"], rounds=1, pairing="lockstep", store=store,
                     observer=lambda e: seen.append(e.job) if isinstance(e, ev.StepMeasured)
                     and not e.record.warmup else None)
    assert [r.status for r in cmp.results] == ["ok", "ok"], [r.error for r in cmp.results]
    runs = [seen[i:i + 5] for i in range(0, 20, 5)]
    assert all(len(set(b)) == 1 for b in runs) and runs[0][0] != runs[1][0], seen   # whole blocks, alternating
    assert len(seen) == 24 and [r.extra.turns for r in cmp.results] == [3, 3]
    for r in cmp.results:
        assert r.extra.sched is not None and r.extra.sched.wall_s < 0.9 * (r.wall_s or 0), r.extra.sched
        assert not (Path(r.artifacts) / "turns.fifo").exists()
    assert tc.load_comparison(cmp.comparison_id, store=store).pairing == "lockstep"


@pytest.mark.integration
def test_scripts_take_turns_at_their_trackers_step(store):
    """The plain-loop example against itself in one lock-step round: two script processes, each measuring through
    ``tcbench.track()``, take turns of 5 measured steps as the worker's jobs do, and leave no FIFO behind."""
    from pathlib import Path

    import tcbench as tc
    from tcbench.core import events as ev

    seen: list[str] = []
    script = str(Path(__file__).resolve().parents[2] / "examples" / "train_loop.py")
    cmp = tc.compare_script(script, backends=["eager"], rounds=1, steps=12, warmup_steps=2, threads=1, store=store,
                            observer=lambda e: seen.append(e.job) if isinstance(e, ev.StepMeasured)
                            and not e.record.warmup else None)
    assert cmp.pairing == "lockstep" and [r.status for r in cmp.results] == ["ok", "ok"], [r.error for r in
                                                                                          cmp.results]
    blocks = [seen[i:i + 5] for i in range(0, 20, 5)]
    assert len(seen) == 20 and all(len(set(b)) == 1 for b in blocks), seen   # whole blocks of one job each
    assert blocks[0][0] != blocks[1][0] and blocks[1][0] != blocks[2][0], seen   # alternating
    assert [r.extra.turns for r in cmp.results] == [2, 2]
    assert all(not (Path(r.artifacts) / "turns.fifo").exists() for r in cmp.results)
