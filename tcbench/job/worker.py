"""The job process: one process trains one JobSpec and streams what it measures.

Run as ``python -m tcbench.job.worker <spec-json> <fd> <run-dir>``, or ``main`` is called with those arguments in a
child forked by the warm launcher (``tcbench.job.zygote``), which has this module's imports done already (the
runner decides which: ``tcbench.runner.zygote_client``). Every message is one line of the job
protocol (``tcbench.job.protocol``) on file descriptor ``fd`` (stdout/stderr go to the run's log file, so
library prints cannot corrupt the stream): ``Log``, ``Meta`` (after model and data load), ``Step`` (one per
optimizer step), ``Counters`` and ``CompileTimes`` (after warmup), ``End`` (status, error, counters) and the
others. A crash, an OOM or a kill stays in this process; the parent turns whatever arrived into a JobResult.
"""

from __future__ import annotations

import math
import os
import sys
import time
import traceback

from tcbench.job.factory import batch_size_of, loss_of, seq_len_of
from tcbench.core.spec import JobSpec, is_factory
from tcbench.core.results import TRACE_DIR
from tcbench.job.process_tools import (RssMeter, TurnGate, announce, classify, die_with_parent, finish,
                                       gpu_env, pin_cpus, send_after_warmup, send_sched, stdlib_first, steady_start)
from tcbench.job.protocol import Channel, End, Eval, Log, Meta, Parallel, Phase, Step, Turn
from tcbench.job.backends.base import dist_backend
from tcbench.job.backends import get_backend
from tcbench.job import data as _data, factory as _factory


class Workload:
    """What a job trains on: its model (catalog, local folder or factory) and its batches (the shipped task,
    a CSV/JSONL file or a batch factory). Text data is tokenized with a local folder's own tokenizer when it
    has one, else with the shipped one."""

    def __init__(self, spec: JobSpec) -> None:
        from tcbench.job.models import model_task

        self.spec = spec
        self.custom_data = is_factory(spec.dataset)
        self.custom_model = spec.model_kind == "factory"
        if self.custom_data:
            self.task, self.num_labels, self.tokenizer, self.tokenizer_source = "custom", None, None, None
        else:
            self.task = "sequence-classification" if self.custom_model else model_task(spec.model)
            self.num_labels = _data.num_labels(_data.load_examples(spec.dataset, "train"))
            self.tokenizer, self.tokenizer_source = _data.job_tokenizer(spec.model)

    def model(self):
        from tcbench.job.models import build_model

        s = self.spec
        if self.custom_model:
            import torch

            torch.manual_seed(s.seed)
            return _factory.build_model(s.model, s.size, s.seq_len, self.num_labels, s.dropout, s.seed)
        m = build_model(s.model, s.size, dropout=s.dropout, num_labels=self.num_labels or 2, seed=s.seed)
        # training never reads a key/value cache: building one in every forward is work for neither side, and
        # its state changing from block to block recompiles each block under compile_scope="blocks". Every config:
        # T5's encoder and decoder keep copies of their own (its decoder's cache broke the graph 3 times a step)
        for module in m.modules():
            if hasattr(getattr(module, "config", None), "use_cache"):
                module.config.use_cache = False
        return m

    def batches(self, split: str):
        s = self.spec
        seed = s.seed if split == "train" else s.seed + 1
        rank, world = _rank_world()
        shard = split == "train" and world > 1   # DistributedSampler's split: process r takes every world-th example
        if self.custom_data:   # a factory's stream cannot be split: each process draws its own with seed + rank
            return _factory.batches(s.dataset, s.batch_size, s.seq_len, s.seed + rank if shard else s.seed, split)
        examples = _data.load_examples(s.dataset, split)
        return _data.batches(self.task, examples[rank::world] if shard else examples, self.tokenizer, s.batch_size,
                             s.seq_len, s.padding, seed)

    def flops(self, n_params: int) -> float | None:
        """FLOPs of one training step: the catalog's formula for text models, counted for a factory model."""
        from tcbench.job.models import flops_per_step

        s = self.spec
        if not self.custom_model:
            return flops_per_step(s.model, s.size, n_params, s.batch_size, s.seq_len, self.task)
        first = next(self.batches("train"))
        return _factory.count_flops(s.model, s.size, s.seq_len, self.num_labels, s.dropout, s.seed, first)


def _rank_world() -> tuple[int, int]:
    """(rank, world size) under torchrun; (0, 1) for a single-process job."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def _init_data_parallel(chan: Channel, backend, device) -> int:
    """Join the job's process group; returns the world size (1: no group)."""
    rank, world = _rank_world()
    if world == 1:
        return 1
    name = dist_backend(device.type)
    backend.join_process_group(name)
    chan.send(Parallel(world_size=world, backend=name, local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", world))))
    return world


def train(spec: JobSpec, chan: Channel, run_dir: str) -> None:
    """The measured loop: one straight path from spec to step records."""
    chan.send(Phase("loading"))   # importing torch alone takes seconds: the stall clock starts here
    import torch

    from tcbench.job.models import count_params

    torch.set_num_threads(spec.threads or max(1, len(os.sched_getaffinity(0)) // spec.nproc))
    backend = get_backend(spec.backend)
    announce(chan, spec)
    chan.send(Log(f"[tcbench] {torch.get_num_threads()} CPU thread(s) for this job"))
    device = backend.setup(spec, os.environ.get("TCBENCH_XLA_CACHE", os.path.join(run_dir, "xla-cache")))
    if spec.debug and hasattr(backend, "trace"):   # the compiler's own trace, before anything is compiled
        backend.trace(os.path.join(run_dir, TRACE_DIR))
    world = _init_data_parallel(chan, backend, device)

    work = Workload(spec)
    model = work.model()
    n_params = count_params(model)
    flops = work.flops(n_params)          # before prepare: a factory's count runs on a meta-device copy
    backend.prepare(model, spec)          # under torchrun: wrapped in DistributedDataParallel
    torch.manual_seed(spec.seed)
    # Encoding the data set happens here, before the meter: it is the same for every backend and batch size,
    # and its transient peak would otherwise dominate a small model's training memory.
    batches = work.batches("train")
    meter = RssMeter()   # baseline: after the model, the optimizer and the encoded data exist
    chan.send(Meta(n_params=n_params, flops_per_step=flops, device=str(device), task=work.task,
                   threads=torch.get_num_threads(), env=gpu_env(), mem_baseline_bytes=meter.baseline,
                   tokenizer=work.tokenizer_source))
    it = _on_device(backend, batches, device, spec.steps)
    if spec.eval_batches and not spec.compiled and chan.reports:   # the untrained model's loss: did it learn?
        _send_eval(chan, spec, backend, work, device, "initial")
    chan.send(Phase("compiling" if spec.compiled else "warmup"))
    # the eval curve's clock starts here, at the first step: a compile (at the first step) counts, loading does not
    # (a forked job finds torch imported and a spawned one imports it: that is the launcher's, not the job's)
    curve = _Curve(spec, chan, backend, work, device, time.perf_counter()) if spec.eval_every and chan.reports else None
    if not _run_steps(spec, chan, backend, it, world, meter, run_dir, curve):
        return
    if spec.eval_batches and chan.reports:
        _send_eval(chan, spec, backend, work, device, "final")
    finish(chan, backend, spec, run_dir, "ok", "")


def _on_device(backend, batches, device, steps: int):
    """The training batches on the device: through the backend's own loader where it has one (XLA's
    background copy), else moved one by one."""
    if hasattr(backend, "wrap_loader"):
        import itertools

        return backend.wrap_loader(list(itertools.islice(batches, steps)))

    return (_data.batch_on_device(b, device) for b in batches)


def _send_eval(chan: Channel, spec: JobSpec, backend, work: "Workload", device, when: str) -> None:
    chan.send(Phase("eval"))
    losses = evaluate(spec, backend, work, device)
    chan.send(Eval(eval_loss=sum(losses) / len(losses), losses=losses, when=when))


class _Curve:
    """The held-out evaluations every ``eval_every`` steps (time to quality): the same batches as the final one,
    each sent with the steps, samples and wall time so far; the evaluations' own time is left out of the wall
    time (it is the same for every candidate, and a target is reached by training)."""

    def __init__(self, spec: JobSpec, chan: Channel, backend, work: "Workload", device, started: float) -> None:
        self.spec, self.chan, self.backend, self.work, self.device = spec, chan, backend, work, device
        self.started, self.eval_s, self.samples = started, 0.0, 0

    def after(self, step: int, samples: int) -> bool:
        """Count the step's samples (all processes'); evaluate when ``step`` ends an interval. True when that
        evaluation reached ``spec.stop_at_loss``: training ends there."""
        self.samples += samples
        if (step + 1) % self.spec.eval_every:
            return False
        t0 = time.perf_counter()
        losses = evaluate(self.spec, self.backend, self.work, self.device)
        loss = sum(losses) / len(losses)
        wall = t0 - self.started - self.eval_s
        self.eval_s += time.perf_counter() - t0
        self.chan.send(Eval(eval_loss=loss, losses=losses, when="during", steps=step + 1, samples=self.samples,
                            wall_s=wall, eval_s=self.eval_s))
        target = self.spec.stop_at_loss
        return target is not None and math.isfinite(loss) and loss <= target


def _run_steps(spec: JobSpec, chan: Channel, backend, it, world: int, meter: RssMeter, run_dir: str,
               curve: _Curve | None = None) -> bool:
    """Warmup then the measured steps, one ``Step`` each (and the eval curve's points, with ``curve``); False when
    the job ended early (its loss diverged or its memory went over the budget: the ``End`` is sent)."""
    import torch

    comm = getattr(backend, "comm", None)
    budget = None if spec.memory_budget_gb is None else spec.memory_budget_gb * 2**30
    steady_from: tuple | None = None    # (wall, cpu, schedstat wait) when the steady steps began
    # a rank's communication threads or a runtime's own (XLA) wait for a CPU by themselves: the main thread's wait
    main_only: bool | None = world > 1 or backend.runtime_threads
    cpus: tuple[int, ...] | None = None
    # lock-step rounds: the measured steps in turns with the other jobs of the round, on the same CPUs; the scheduling
    # figures sum this job's own turns (``spans``), never its waits for one
    turns = TurnGate.from_env() if world == 1 and chan.reports else None
    spans: tuple | None = None
    for step in range(spec.steps):
        if step == spec.warmup_steps:
            chan.send(Phase("measuring"))
            cpus = pin_cpus(torch.get_num_threads(), spec.world_size)
            if cpus is not None and backend.runtime_threads:
                # a runtime's own threads share the pinned CPUs with the main thread, which then waits for its own
                # process (XLA: 17 % of the time on a quiet machine): other processes' use of those CPUs says it
                main_only = None
            steady_from = steady_start(main_only=main_only, cpus=cpus)
        if turns is not None and turns.starts_block(step, spec.warmup_steps):
            spans, steady_from = turns.take(chan, step, steady_from, spans, main_only, cpus)
        batch = next(it)
        seq, samples = seq_len_of(batch), batch_size_of(batch)
        c0 = time.process_time()   # CPU time of all this process's threads: how much of the step it had the CPU
        t0 = time.perf_counter()
        loss_t = backend.step(batch)
        backend.sync()
        dt = time.perf_counter() - t0
        cpu = time.process_time() - c0
        # Reading the loss is a host<->device sync: only every loss_every steps (and the last one).
        read = (step + 1) % spec.loss_every == 0 or step == spec.steps - 1
        loss = float(loss_t) if read else None
        dev_peak = backend.peak_memory()
        mem = dev_peak if dev_peak is not None else meter.peak_above_baseline()
        # data parallel: rank 0 reports; a step is synchronous (the all-reduce), so the job's throughput is world×
        chan.send(Step(step=step, step_s=dt, samples_s=world * samples / dt, tokens_s=world * samples * seq / dt,
                       mem_bytes=int(mem), loss=loss, warmup=step < spec.warmup_steps, seq_len=seq, cpu_s=cpu,
                       **(comm.take() if comm is not None else {})))
        if step == spec.warmup_steps - 1:
            send_after_warmup(chan, backend, backend.counters())
        if loss is not None and not math.isfinite(loss):
            finish(chan, backend, spec, run_dir, "diverged", f"loss became {loss} at step {step} (lr={spec.lr})")
            return False
        if budget is not None and mem > budget:
            finish(chan, backend, spec, run_dir, "oom",
                    f"peak memory {mem / 2**30:.2f} GiB at step {step} exceeds the profile's budget of "
                    f"{spec.memory_budget_gb:.2f} GiB (batch_size={spec.batch_size})")
            return False
        if curve is not None and curve.after(step, world * samples):
            chan.send(Log(f"[tcbench] reached the target loss {spec.stop_at_loss:g} after {step + 1} steps: "
                          "training ends here (stop_at_loss)"))
            break
    if turns is not None:
        chan.send(Turn(step=spec.steps, waits=False))   # the next job's turn: this one has no more steps
    send_sched(chan, steady_from, main_only=main_only, cpus=cpus, before=spans)
    return True


def evaluate(spec: JobSpec, backend, work: "Workload", device) -> list[float]:
    """The loss of each of ``spec.eval_batches`` batches of the held-out split (no grad, eval mode; the same
    batches every time, so two evaluations of one job are paired batch by batch)."""
    import torch

    model = backend.model
    model = getattr(model, "module", model)   # DDP's replica on this process: no collective in an evaluation
    model.eval()
    batches = work.batches("eval")
    losses = []
    with torch.no_grad():
        for _ in range(spec.eval_batches):
            batch = _data.batch_on_device(next(batches), device)
            losses.append(loss_of(model(**batch)).detach())
        backend.cut_graph()   # a lazy device runs the evaluation's graph here, once
        values = [float(x) for x in torch.stack(losses).float().cpu()]
    model.train()
    return values


def main(argv: list[str]) -> int:
    die_with_parent()
    sys.path[:] = stdlib_first(sys.path)   # the caller's folders (PYTHONPATH) never shadow a standard module
    # SIGINT means "stop" even when the caller's shell started us with it ignored (a background job, nohup, CI)
    import signal

    signal.signal(signal.SIGINT, signal.default_int_handler)
    spec = JobSpec.from_json(argv[0])
    rank, _ = _rank_world()
    channel = os.environ.get("TCBENCH_CHANNEL")   # data parallel: the ranks share the launcher's FIFO
    chan = Channel(os.open(channel, os.O_WRONLY) if channel else int(argv[1]), rank,
                   reports=os.environ.get("LOCAL_RANK", "0") == "0")
    run_dir = argv[2]
    try:
        train(spec, chan, run_dir)
    except BaseException as exc:  # the job's failure is data for the parent, not a crash
        traceback.print_exc()
        tb = traceback.format_exc()
        status = classify(exc)
        keep = 6000 if chan.reports else 1500   # another rank's end stays one whole write on the shared FIFO
        chan.send(End(status=status, error=f"{type(exc).__name__}: {exc}"[:min(2000, keep)], traceback=tb[-keep:]))
        chan.flush()
        return 1
    finally:
        _leave_group()
    chan.flush()
    return 0


def _leave_group() -> None:
    if "torch.distributed" not in sys.modules:
        return
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - the job's result is already sent
        pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
