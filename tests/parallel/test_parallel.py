"""Data-parallel jobs (JobSpec.nproc): torchrun + DDP on gloo, their records, their ends, and their spec checks.

Integration tests run 2 processes × 1 thread (this machine has 2 cores) on tiny models; they assert results,
records, world size, all-reduce bytes and loss parity — never timings.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import threading
import time
from pathlib import Path

import pytest

import tcbench as tc
from tcbench import JobSpec, SpecError
from tcbench.core.extras import JobExtras, RankEnd, SchedTimes

DDP = dict(model="bert-base-cased", size="tiny", seq_len=32, batch_size=4, steps=6, warmup_steps=2, lr=1e-3,
           threads=1, dropout=0.0, nproc=2)


def test_nproc_is_checked_and_gives_the_global_batch():
    assert JobSpec(**DDP).global_batch == 8 and JobSpec().global_batch == JobSpec().batch_size
    for bad in (0, -1, 1.5, "2", 65):
        with pytest.raises(SpecError) as e:
            JobSpec(**{**DDP, "nproc": bad})
        assert e.value.field == "nproc"
    with pytest.raises(SpecError) as e:
        JobSpec(**{**DDP, "noise_micro_batches": 2})
    assert e.value.field == "noise_micro_batches" and "nproc=2" in str(e.value)


def test_nnodes_needs_a_rendezvous_endpoint_and_a_node_rank_in_range():
    two = dict(DDP, nproc=1, nnodes=2, rdzv_endpoint="10.0.0.1:29500")
    spec = JobSpec(**two, node_rank=1)
    assert spec.world_size == 2 and spec.global_batch == 8
    assert JobSpec(**{**DDP, "nnodes": 3, "rdzv_endpoint": "[fe80::1]:29500"}).world_size == 6
    for bad, field in ((dict(rdzv_endpoint=None), "rdzv_endpoint"), (dict(rdzv_endpoint="node0"), "rdzv_endpoint"),
                       (dict(rdzv_endpoint="node0:70000"), "rdzv_endpoint"), (dict(node_rank=2), "node_rank"),
                       (dict(node_rank=-1), "node_rank"), (dict(nnodes=0), "nnodes")):
        with pytest.raises(SpecError) as e:
            JobSpec(**{**two, **bad})
        assert e.value.field == field, (bad, e.value)
    with pytest.raises(SpecError) as e:   # one machine needs no rendezvous: a stray endpoint is a mistake
        JobSpec(**{**DDP, "rdzv_endpoint": "node0:29500"})
    assert e.value.field == "rdzv_endpoint" and "nnodes=1" in str(e.value)
    with pytest.raises(SpecError) as e:
        tc.scaling(spec, nprocs=[1, 2])
    assert e.value.field == "nnodes"
    from tcbench.job.launch import torchrun_args

    args = torchrun_args(spec, "{}", "/tmp/x")
    assert "--node-rank=1" in args and "--master-addr=10.0.0.1" in args and "--master-port=29500" in args
    assert "--standalone" not in args and "--standalone" in torchrun_args(JobSpec(**DDP), "{}", "/tmp/x")
    from tcbench.tuning.lr.noise import one_process

    assert one_process(spec).world_size == 1 and one_process(spec).batch_size == 8
    from tcbench.tuning.lr.prediction import target_batch

    assert target_batch(spec, nproc=4) == 4 * 4 * 2   # 4 processes of batch 4 on each of the 2 machines


def test_more_processes_than_cores_is_refused_before_anything_starts():
    cores = len(os.sched_getaffinity(0))
    with pytest.raises(SpecError) as e:
        tc.preflight(JobSpec(**{**DDP, "nproc": cores + 1}))
    assert e.value.field == "nproc" and str(cores) in str(e.value)


def test_a_mis_set_xla_device_count_is_named_with_its_fix(monkeypatch):
    monkeypatch.setenv("GPU_NUM_DEVICES", "4")
    with pytest.raises(SpecError) as e:
        tc.preflight(JobSpec(**{**DDP, "backend": "xla"}))
    assert e.value.field == "nproc" and "Missing XLA configuration" in str(e.value) and "GPU_NUM_DEVICES=2" in str(e.value)


@pytest.mark.skipif(importlib.util.find_spec("torch_xla") is None,
                    reason="needs torch_xla: without it the job is unavailable for that reason first")
def test_xla_data_parallel_on_the_cpu_device_is_unavailable_with_the_upstream_issue(store, monkeypatch):
    monkeypatch.delenv("GPU_NUM_DEVICES", raising=False)
    monkeypatch.delenv("PJRT_DEVICE", raising=False)
    res = tc.run(JobSpec(**{**DDP, "backend": "xla"}), store=store)
    assert res.status == "unavailable" and "pytorch/xla#5005" in res.error and "backend='eager'" in res.error
    assert not res.records


def test_xla_data_parallel_runs_under_torchrun_on_tpu_and_cuda_devices(monkeypatch):
    """Where XLA's collectives work the job is not refused: it takes the launcher like DDP, its process group is
    torch_xla's (xla://), and its gradients are all-reduced by xm.optimizer_step (one device here: a plain step,
    which every xla integration test runs)."""
    from tcbench.job.backends import backend_class
    from tcbench.job.worker import dist_backend
    from tcbench.runner.process import _command

    refusal = backend_class("xla").parallel_unavailable

    spec = JobSpec(**{**DDP, "backend": "xla"})
    for device in ("TPU", "CUDA"):
        monkeypatch.setenv("PJRT_DEVICE", device)
        assert refusal(spec) == ""
        argv, _, _ = _command(spec, backend_class(spec.backend), 3, "/tmp/x", "/tmp/c")
        assert argv[1:3] == ["-m", "tcbench.job.launch"]
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    assert "pytorch/xla#5005" in refusal(spec)
    assert [dist_backend(d) for d in ("xla", "cuda", "cpu")] == ["xla", "nccl", "gloo"]


def test_a_ranks_wait_for_a_cpu_is_its_main_threads_share():
    """A rank reports its main thread's run-queue wait (its communication threads' wait is the job's own): the share
    is that wait over the wall time, not over wall × threads; a single process's is over all its threads."""
    from tcbench.core.results import JobResult, StepRecord
    from tcbench.runner.process import _set_figures
    from tcbench.job.process_tools import sched_wait_s as _sched_wait_s

    assert 0 <= _sched_wait_s(main_only=True) <= _sched_wait_s()
    recs = [StepRecord(step=i, step_s=0.1, samples_s=80.0, tokens_s=2560.0, mem_bytes=0, cpu_s=0.1, warmup=i < 2)
            for i in range(12)]
    one = JobSpec(**{**DDP, "nproc": 1, "threads": 2})
    for main_only, spec, share in ((True, JobSpec(**{**DDP, "threads": 2}), 0.06), (False, one, 0.03)):
        res = JobResult(spec=spec, status="ok", records=list(recs), env={"threads": 2},
                        extra=JobExtras(sched=SchedTimes(wall_s=1.0, cpu_s=1.0, wait_s=0.06, steal_share=None,
                                                          wait_main_only=main_only)))
        _set_figures(res, spec, {})
        assert res.figures.wait_share == pytest.approx(share)


def test_the_cli_takes_nproc():
    import argparse

    from tcbench.cli.common import add_job_options as _spec_args, job_spec as _spec

    p = argparse.ArgumentParser()
    _spec_args(p)
    assert _spec(p.parse_args(["--nproc", "2", "--threads", "1"])).nproc == 2
    two = _spec(p.parse_args(["--nnodes", "2", "--node-rank", "1", "--rdzv-endpoint", "node0:29500"]))
    assert (two.nnodes, two.node_rank, two.rdzv_endpoint, two.world_size) == (2, 1, "node0:29500", 2)
    from tcbench.cli.app import build_parser
    from tcbench.cli.parallel import cmd_scaling

    a = build_parser().parse_args(["scaling", "--nprocs", "1,2", "--threads", "1", "--rounds", "2"])
    assert a.func is cmd_scaling and a.nprocs == "1,2" and a.rounds == 2 and not a.no_parity


@pytest.mark.integration
def test_two_processes_train_with_ddp_and_report_the_all_reduce(store):
    res = tc.run(JobSpec(**DDP, eval_batches=2), store=store)
    assert res.status == "ok", res.error + res.log_tail[-2000:]
    assert res.extra.world_size == 2 and res.extra.dist_backend == "gloo"
    assert [r.step for r in res.records] == list(range(6)) and all(r.loss is not None for r in res.records)
    assert res.extra.rank_ends == {"1": RankEnd(status="ok", error="")}
    ar = res.extra.allreduce
    assert ar.steps == 4 and ar.ms_median > 0 and 0 < ar.share_of_step < 1
    # fp32 gradients: 4 bytes per trainable parameter go into the all-reduce every step
    assert ar.bytes_per_step == 4 * res.extra.n_params
    assert res.extra.eval_loss is not None and res.extra.eval_loss_initial is not None
    stored = store.query("SELECT COUNT(*) AS n FROM steps WHERE run_id = :run", {"run": res.run_id})
    assert int(stored.n.iloc[0]) == 6
    assert not list(Path(res.artifacts).glob("*.fifo"))   # the ranks' channel is gone with the job


@pytest.mark.integration
def test_two_nodes_on_this_machine_train_as_one_job(store):
    """Two ``tc.run`` calls (two "machines": node 0 and node 1, one process each) meet at node 0's rendezvous
    endpoint: one job of world size 2, and each machine's result holds its own first process's steps."""
    import socket

    with socket.socket() as s:   # a free port for node 0's rendezvous store
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = JobSpec(**{**DDP, "nproc": 1, "nnodes": 2, "rdzv_endpoint": f"127.0.0.1:{port}", "stall_s": 120.0,
                        "eval_batches": 2})
    results: dict[int, tc.JobResult] = {}

    def node(rank: int) -> None:
        results[rank] = tc.run(base.replace(node_rank=rank), store=store)

    threads = [threading.Thread(target=node, args=(k,)) for k in (1, 0)]   # the follower may come first
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    for rank, res in results.items():
        assert res.status == "ok", (rank, res.error + res.log_tail[-2000:])
        assert res.extra.world_size == 2 and res.spec.global_batch == 8
        assert [r.step for r in res.records] == list(range(6)) and res.records[-1].loss is not None
        assert res.extra.allreduce.bytes_per_step == 4 * res.extra.n_params
    assert sorted(results) == [0, 1]
    # each node logs the loss of its own shard's batch, but the all-reduce keeps one model: the same held-out loss
    assert results[0].extra.eval_loss == pytest.approx(results[1].extra.eval_loss, rel=1e-5)
    assert results[0].extra.eval_loss != pytest.approx(results[0].extra.eval_loss_initial, rel=1e-5)


@pytest.mark.integration
def test_a_node_whose_partners_never_come_stops_at_the_stall_limit_saying_what_it_waited_for(store):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = tc.run(JobSpec(**{**DDP, "nproc": 1, "nnodes": 2, "rdzv_endpoint": f"127.0.0.1:{port}", "stall_s": 8.0}),
                 store=store)
    assert res.status == "interrupted" and "waiting for 2 nodes at 127.0.0.1" in res.error, res.error
    assert not res.records and store.run_row(res.run_id)["status"] == "interrupted"


@pytest.mark.integration
def test_inductor_compiles_the_ddp_model_and_trains(store):
    res = tc.run(JobSpec(**{**DDP, "backend": "inductor", "steps": 4, "warmup_steps": 1}), store=store)
    assert res.status == "ok", res.error + res.log_tail[-2000:]
    assert res.extra.world_size == 2 and res.extra.counters["compiles"] >= 1
    assert res.extra.allreduce.bytes_per_step == 4 * res.extra.n_params
    assert all(r.loss is not None for r in res.records)


@pytest.mark.integration
def test_a_failing_rank_ends_the_job_with_its_reason(store, tmp_path, monkeypatch):
    """Rank 1's data factory raises: the job fails naming rank 1 and its error, and no rank is left running."""
    (tmp_path / "rankdata.py").write_text(
        "import os, torch\n"
        "def batches(batch_size, seq_len, seed, split):\n"
        "    if split == 'train' and os.environ.get('RANK') == '1':\n"
        "        raise RuntimeError('rank one has no data')\n"
        "    g = torch.Generator().manual_seed(seed)\n"
        "    while True:\n"
        "        ids = torch.randint(5, 100, (batch_size, seq_len), generator=g)\n"
        "        yield {'input_ids': ids, 'attention_mask': torch.ones_like(ids), 'labels': ids[:, 0] % 2}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    res = tc.run(JobSpec(**{**DDP, "dataset": "rankdata:batches"}), store=store)
    assert res.status == "failed" and res.error.startswith("rank 1:") and "rank one has no data" in res.error
    assert not _ranks_of(res)


@pytest.mark.integration
def test_sigkill_of_the_launcher_leaves_no_rank(store):
    spec = JobSpec(**{**DDP, "steps": 400, "warmup_steps": 1})
    seen = threading.Event()
    box: dict = {}

    def observer(event: tc.events.Event) -> None:
        if isinstance(event, tc.events.StepMeasured):
            seen.set()

    t = threading.Thread(target=lambda: box.update(res=tc.run(spec, observer=observer, store=store)))
    t.start()
    assert seen.wait(300), "no step arrived"
    run = store.runs().iloc[-1]
    launcher = int(run["worker_pid"])
    ranks = _children(launcher)
    assert len(ranks) == 2, ranks
    os.kill(launcher, signal.SIGKILL)
    t.join(120)
    deadline = time.monotonic() + 30
    while any(_alive(p) for p in ranks) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(p) for p in ranks), [(p, _cmdline(p)) for p in ranks if _alive(p)]
    res = box["res"]
    assert res.status == "interrupted" and "SIGKILL" in res.error and res.records   # its steps are kept
    assert not list(Path(res.artifacts).glob("*.fifo"))   # the killed launcher's channel removed by the runner


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return out


def _alive(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _cmdline(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/cmdline").read().replace("\0", " ")
    except OSError:
        return ""


def _ranks_of(res) -> list[int]:
    """Processes still running this job's worker (its run folder is in their command line)."""
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and res.artifacts in _cmdline(int(p))
            and "tcbench.job.worker" in _cmdline(int(p)) and _alive(int(p))]


def test_scaling_refuses_bad_process_counts_before_any_job(store):
    for bad in ([1], [1, 1], [0, 2], [1, "2"]):
        with pytest.raises(SpecError) as e:
            tc.scaling(JobSpec(**DDP), nprocs=bad, store=store)
        assert e.value.field == "nprocs"
    with pytest.raises(SpecError) as e:
        tc.scaling(JobSpec(**DDP), nprocs=[1, len(os.sched_getaffinity(0)) + 1], store=store)
    assert e.value.field == "nproc"
    assert store.comparisons().empty   # nothing was stored or started


@pytest.mark.integration
def test_scaling_measures_the_factor_with_its_interval_and_loss_parity(store):
    base = dict(model="gpt2", size="tiny", seq_len=32, batch_size=4, steps=16, warmup_steps=2, lr=3e-3, threads=1,
                dropout=0.0)
    res = tc.scaling(JobSpec(**base), nprocs=[1, 2], rounds=1, store=store)
    t = res.table()
    assert list(t.nproc) == [1, 2] and list(t.global_batch) == [4, 8]
    assert t.scaling_factor.iloc[0] == 1.0 and t.verdict.iloc[0] == "baseline"
    two = t.iloc[1]
    assert two.ok_runs == "1/1" and 0 < two.ci_low <= two.scaling_factor <= two.ci_high
    assert two.allreduce_mib > 0 and 0 < two.comm_share < 1
    assert two.verdict.startswith(("scaling factor", "inconclusive"))
    assert two.parity is True, two.parity_note          # DDP 2 × 4 learns as one process at batch 8
    one = res.parity_runs[2]
    assert one.extra.world_size is None and res._runs(2)[0].extra.world_size == 2
    assert res.parity_runs[2].spec.batch_size == 8 and "2 processes (global batch 8)" in res.describe()
    assert (store.comparisons().kind == "scaling").any() and len(res.plot().data) == 2
    again = tc.load_scaling(res.comparison_id, store)   # from the store, nothing rerun: the same table
    cols = ["nproc", "global_batch", "ok_runs", "scaling_factor", "ci_low", "ci_high", "parity", "verdict"]
    assert again.table()[cols].equals(t[cols]) and set(again.parity_runs) == {2}
    with pytest.raises(ValueError, match="kind 'scaling'"):
        tc.load_scaling(store.insert_comparison("compare", JobSpec(**base), ["eager"], 1, {}), store)
