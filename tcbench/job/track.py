"""Your own training loop, measured by tcbench: ``track()``, ``compile_for_backend()`` and ``device()``.

A plain PyTorch loop gets two added lines::

    model, optimizer = tcbench.compile_for_backend(model, optimizer)   # eager / torch.compile / XLA, per job
    with tcbench.track() as t:
        for batch in loader:
            batch = {k: v.to(tcbench.device()) for k, v in batch.items()}
            loss = model(**batch).loss
            loss.backward(); optimizer.step(); optimizer.zero_grad()
            t.step(loss, batch)   # device sync, one step record; StopTraining at the job's step cap

``tcbench compare-script train.py`` (or ``tc.compare_script``) runs the script once per backend and round,
each in its own process with ``TCBENCH_SPEC`` / ``TCBENCH_BACKEND`` / ``TCBENCH_FD`` in its environment
(README, "Your own training script"). Inside such a job the tracker speaks the job protocol
(``tcbench.job.protocol``, as tcbench's own worker does) on that file descriptor: phases, the one-line
compiler announcement, meta, one ``step`` per ``t.step`` (timed between consecutive calls, the device
synchronised before the clock stops; the loss read every ``loss_every`` steps), counters after warmup and at
the end, sched, end. In a lock-step round (``TCBENCH_TURNS``, ``tcbench.runner.turns``) the measured steps go in
turns with the round's other job, as the worker's do: before each block the tracker sends a ``turn`` and waits for
its turn, outside the step's clock; the script's threads are not pinned (its DataLoader workers would inherit it).
At the job's ``steps`` ``t.step`` raises ``StopTraining``, which ``track``'s ``with`` block swallows: the script
goes on after it.

Outside a job (no ``TCBENCH_FD``) ``track()`` is a no-op and ``compile_for_backend`` returns its arguments
unchanged, unless ``TCBENCH_BACKEND`` is set by hand. Importing this module never imports torch.
"""

from __future__ import annotations

import atexit
import math
import os
import sys
import time
import traceback
from typing import Any

from tcbench.core.spec import BACKENDS, JobSpec
from tcbench.job import process_tools as _proc
from tcbench.job.protocol import Channel, End, Message, Meta, Phase, Step, Turn
from tcbench.job.backends import backend_class, get_backend

BACKEND_ENV = "TCBENCH_BACKEND"
_OWNER_ENV = "TCBENCH_SCRIPT_PID"    # the job's own process; its children are never the job


class StopTraining(BaseException):
    """Raised by ``t.step`` once the job's steps are measured; ``with tcbench.track()`` swallows it.

    A BaseException, like KeyboardInterrupt: a loop's ``except Exception`` does not catch it by mistake.
    """


class _Job:
    """This process's part in a tcbench script job (inactive outside one)."""

    def __init__(self) -> None:
        self.spec: JobSpec | None = None
        self.chan: Channel | None = None   # the job's channel on TCBENCH_FD
        self.pid = 0
        self.announced = False
        self.configured = False          # compile_for_backend / hf.training_args switched the compiler
        self.model: Any = None
        self.device: Any = None
        self.tracker: "Tracker | None" = None
        self.diag: Any = None   # tcbench.job.diagnostics.Collector: graph breaks, recompiles, ... where and why
        self.finished = False

    @property
    def active(self) -> bool:
        return self.chan is not None and self.pid == os.getpid()

    def send(self, msg: Message) -> None:
        if self.active:
            self.chan.send(msg)

    def flush(self) -> None:
        if self.active:
            self.chan.flush()

    def end(self, status: str, error: str = "", tb: str = "") -> None:
        """The job's one ``end`` message (counters, the compiler report with debug)."""
        if not self.active or self.finished:
            return
        self.finished = True
        try:
            backend = _backend_object(self.spec)
        except Exception:  # noqa: BLE001 - e.g. torch itself failed to import: the end message still goes out
            backend = None
        if tb or backend is None:
            counters = {} if backend is None else _counters(backend)
            self.chan.send(End(status=status, error=error, traceback=tb, counters=counters,
                               diagnostics=self.diag.collect() if self.diag is not None else {}))
        else:
            _proc.finish(self.chan, backend, self.spec, os.environ.get("TCBENCH_RUN_DIR", "."), status, error)
        self.flush()


JOB = _Job()


def _claim() -> None:
    """Join the job when this process is the one tcbench started (TCBENCH_FD); die with tcbench's process.

    A process the script starts inherits the environment but is not the job: it stays inactive.
    """
    fd, parent = os.environ.get("TCBENCH_FD"), os.environ.get("TCBENCH_PARENT_PID")
    owner = os.environ.get(_OWNER_ENV)
    if not fd or not parent or "TCBENCH_SPEC" not in os.environ or (owner and owner != str(os.getpid())):
        return
    if os.getppid() != int(parent):
        if not _alive(int(parent)):
            os._exit(1)              # tcbench's process died before this one joined: nobody to report to
        return                       # a child the script started before importing tcbench
    _proc.die_with_parent()
    os.environ[_OWNER_ENV] = str(os.getpid())
    _join(JobSpec.from_json(os.environ["TCBENCH_SPEC"]), int(fd))
    import signal

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:   # started from a background shell: SIGINT still stops
        signal.signal(signal.SIGINT, signal.default_int_handler)
    os.register_at_fork(before=JOB.flush)   # a forked child inherits an empty buffer, never a copy to send again
    atexit.register(_at_exit)
    previous = sys.excepthook

    def hook(kind: type, exc: BaseException, tb: Any) -> None:
        _report_exception(exc, "".join(traceback.format_exception(kind, exc, tb)))
        previous(kind, exc, tb)

    sys.excepthook = hook
    JOB.send(Phase("loading"))


def _join(spec: JobSpec, fd: int) -> None:
    """Speak for ``spec``'s job on file descriptor ``fd`` from this process (tests and benchmarks attach a pipe)."""
    JOB.__init__()
    JOB.spec, JOB.chan, JOB.pid = spec, Channel(fd), os.getpid()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _report_exception(exc: BaseException, tb: str) -> None:
    if isinstance(exc, StopTraining):   # raised outside a `with tcbench.track()` block: the steps are measured
        JOB.end("ok")
        return
    JOB.end(_proc.classify(exc), f"{type(exc).__name__}: {exc}"[:2000], tb[-6000:])


def _at_exit() -> None:
    if JOB.active and JOB.tracker is not None and JOB.tracker.count:
        JOB.tracker.finish()   # t.step used without a `with` block: the steps it sent are the job
    JOB.flush()


# -- backends ------------------------------------------------------------------------------------------
def backend_name() -> str:
    """The backend this process trains with: the job's, else ``TCBENCH_BACKEND`` (set by hand), else eager."""
    if JOB.spec is not None:
        return JOB.spec.backend
    name = os.environ.get(BACKEND_ENV, "eager") or "eager"
    if name not in BACKENDS:
        raise ValueError(f"{BACKEND_ENV}={name!r} is not allowed; allowed: {', '.join(BACKENDS)}")
    return name


def _spec() -> JobSpec:
    return JOB.spec if JOB.spec is not None else JobSpec(backend=backend_name())


def this_backend() -> Any:
    """This process's backend class (``tcbench.job.backends.base.Backend``): its script-side classmethods."""

    return backend_class(backend_name())


def _backend_object(spec: JobSpec | None) -> Any:
    """The backend's own sync / peak memory / counters / report, on this process's device."""

    spec = spec or _spec()
    b = get_backend(spec.backend)
    b.spec, b.device = spec, device()
    b.diag = JOB.diag if JOB.diag is not None else _NoDiagnostics()
    return b


class _NoDiagnostics:
    def collect(self) -> dict:
        return {}


def _counters(backend: Any) -> dict:
    try:
        return backend.counters()
    except Exception as exc:  # noqa: BLE001 - counters are a detail; the end message must go out
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}


def device() -> Any:
    """The torch device this job trains on: the XLA device for ``xla``, else CUDA when present, else CPU.

    Move each batch there (``batch.to(tcbench.device())``); ``compile_for_backend`` moves the model.
    """
    if JOB.device is None:
        JOB.device = this_backend().script_device(JOB.spec)
    return JOB.device


def announce() -> None:
    """The compiled run's one log line (and the ``compiler`` event), once per process."""
    if JOB.announced:
        return
    JOB.announced = True
    spec = _spec()
    if JOB.active:
        _proc.announce(JOB.chan, spec)
    elif spec.compiled:
        print(f"[tcbench] Found configuration for compiler {spec.backend} ({BACKEND_ENV}). Configuring tcbench "
              f"{spec.backend} backend (mode={spec.compile_mode}) ...", file=sys.stderr, flush=True)


def compile_for_backend(model: Any, optimizer: Any = None) -> tuple[Any, Any]:
    """``(model, optimizer)`` prepared for this job's backend; the same objects, changed in place.

    eager: unchanged. inductor: ``model.compile()`` (forward and backward; ``state_dict`` keys unchanged) and
    ``optimizer.step`` compiled, whatever optimizer the script built (create an LR scheduler after this call; an
    lr that changes every step recompiles the optimizer step). xla: the model moved to ``tcbench.device()``
    and the optimizer re-pointed at the moved parameters (``Module.to`` makes new XLA parameters), so call
    it before the first backward; move batches with ``tcbench.device()``; ``t.step`` ends each step with
    ``torch_xla.sync()``.
    """
    JOB.model = model
    this_backend().compile_script(model, optimizer, _spec(), device)
    JOB.configured = True
    announce()
    return model, optimizer


# -- the tracker -----------------------------------------------------------------------------------------
def _shape(batch: Any) -> tuple[int | None, int | None]:
    """(batch size, sequence length) from a batch: ``input_ids`` or its first tensor, [B] or [B, L, ...]."""
    if isinstance(batch, dict):
        batch = batch.get("input_ids", next((v for v in batch.values() if hasattr(v, "shape")), None))
    elif isinstance(batch, (list, tuple)):
        batch = next((v for v in batch if hasattr(v, "shape")), None)
    shape = tuple(getattr(batch, "shape", ()) or ())
    return (int(shape[0]) if shape else None), (int(shape[1]) if len(shape) > 1 else None)


class Tracker:
    """One measured training loop (``tcbench.track()``); a no-op outside a tcbench job."""

    def __init__(self, model: Any = None) -> None:
        self.on = JOB.active and JOB.tracker is None and not JOB.finished
        self.count = 0
        if not self.on:
            return
        JOB.tracker = self
        self.spec = JOB.spec
        self.model = model if model is not None else JOB.model
        self._t = self._c = 0.0
        self._steady: tuple | None = None
        self._meter: Any = None
        self._turns: _proc.TurnGate | None = None   # a lock-step round's gate (TCBENCH_TURNS)
        self._spans: tuple | None = None   # the steady spans of the turns taken so far (waits left out)

    # the protocol, shared with tcbench.hf.TcbenchCallback
    def begin(self) -> None:
        if not self.on:
            return
        if self.spec.compiled and not JOB.configured:
            msg = (f"{BACKEND_ENV}={self.spec.backend}, but the script never switched the compiler on: call "
                   "tcbench.compile_for_backend(model, optimizer) (a Trainer: args = tcbench.hf.training_args(args)); "
                   f"measuring it would label an eager run as {self.spec.backend}")
            JOB.end("failed", msg)
            raise RuntimeError(msg)
        announce()
        JOB.diag = this_backend().collector()   # before the first compiled step (compiling is lazy)
        self._backend = _backend_object(self.spec)
        self._meter = _proc.RssMeter()   # baseline: the script's model, optimizer and data exist by now
        self._turns = _proc.TurnGate.from_env() if JOB.chan.reports and self.spec.world_size == 1 else None
        JOB.send(Phase("compiling" if self.spec.compiled else "warmup"))
        if self.spec.warmup_steps == 0:
            self._measuring()
        self.start_step()

    def start_step(self) -> None:
        if not self.on or JOB.finished:
            return
        turns, spec = self._turns, self.spec
        if turns is not None and self.count < spec.steps and turns.starts_block(self.count, spec.warmup_steps):
            # the other job's block runs meanwhile; this one's clock has not started
            self._spans, self._steady = turns.take(JOB.chan, self.count, self._steady, self._spans)
        if JOB.diag is not None:   # the step's shapes are filled in at its end (the loop has the batch then)
            self._shapes: dict = {}
            self._diag_step = JOB.diag.step(self._shapes)
            self._diag_step.__enter__()
        self._c, self._t = time.process_time(), time.perf_counter()

    def end_step(self, loss: Any = None, batch_size: int | None = None, seq_len: int | None = None,
                 batch: Any = None) -> dict | None:
        """The step just done: the device synchronised, then its record (not sent yet: ``emit``)."""
        if not self.on or JOB.finished:
            return None
        self._backend.cut_graph()   # XLA: cut the lazy graph, compiled (first time) and launched here
        self._backend.sync()     # CUDA synchronize / XLA wait_device_ops: the clock stops when the device is done
        dt = time.perf_counter() - self._t
        cpu = time.process_time() - self._c
        if JOB.diag is not None:
            self._shapes.update(batch if isinstance(batch, dict)
                                else {"batch": batch} if hasattr(batch, "shape") else {})
            self._diag_step.__exit__(None, None, None)
        i, spec = self.count, self.spec
        batch = batch_size or spec.batch_size
        seq = seq_len or spec.seq_len
        if i == 0:
            self._meta(batch, seq)
        read = (i + 1) % spec.loss_every == 0 or i == spec.steps - 1
        value = None if loss is None or not read else float(loss.detach() if hasattr(loss, "detach") else loss)
        peak = self._backend.peak_memory()
        mem = peak if peak is not None else self._meter.peak_above_baseline()
        self.count = i + 1
        if self.count == spec.warmup_steps:
            _proc.send_after_warmup(JOB, self._backend, _counters(self._backend))
            self._measuring()
        return dict(step=i, step_s=dt, samples_s=batch / dt, tokens_s=batch * seq / dt, mem_bytes=int(mem),
                    loss=value, warmup=i < spec.warmup_steps, seq_len=seq, cpu_s=cpu)

    def emit(self, rec: dict | None) -> bool:
        """Send a step record; True when the job is over (its steps done, or diverged / out of budget)."""
        if rec is None:
            return JOB.finished
        JOB.send(Step(**rec))
        loss, spec = rec["loss"], self.spec
        budget = None if spec.memory_budget_gb is None else spec.memory_budget_gb * 2**30
        if loss is not None and not math.isfinite(loss):
            self.finish("diverged", f"loss became {loss} at step {rec['step']}")
        elif budget is not None and rec["mem_bytes"] > budget:
            self.finish("oom", f"peak memory {rec['mem_bytes'] / 2**30:.2f} GiB at step {rec['step']} exceeds the "
                               f"profile's budget of {spec.memory_budget_gb:.2f} GiB")
        elif self.count >= spec.steps:
            self.finish()
        return JOB.finished

    def finish(self, status: str = "ok", error: str = "") -> None:
        if not self.on or JOB.finished:
            return
        if self._turns is not None:
            JOB.send(Turn(step=self.count, waits=False))   # the other job's turn: this one has no more steps
        _proc.send_sched(JOB.chan, self._steady, before=self._spans)
        JOB.end(status, error)

    def _measuring(self) -> None:
        JOB.send(Phase("measuring"))
        self._steady = _proc.steady_start()

    def _meta(self, batch: int, seq: int) -> None:
        import torch

        n = None if self.model is None else int(sum(p.numel() for p in self.model.parameters()))
        JOB.send(Meta(n_params=n, flops_per_step=None if n is None else 6.0 * n * batch * seq,
                      device=str(self._backend.device), task="script", threads=torch.get_num_threads(),
                      env=_proc.gpu_env(), mem_baseline_bytes=self._meter.baseline))

    # the plain loop's API
    def step(self, loss: Any = None, batch: Any = None, *, batch_size: int | None = None,
             seq_len: int | None = None) -> None:
        """End one optimizer step: sync the device, record it, raise StopTraining at the job's step cap.

        ``batch`` (a dict with ``input_ids``, or a tensor [B, L]) gives the step's batch size and sequence
        length for samples/s and tokens/s; without it ``batch_size``/``seq_len`` or the job's own are used.
        The loss (a tensor or a number) is read on the host every ``loss_every`` steps only.
        """
        if not self.on:
            return
        if JOB.finished:
            raise StopTraining("tcbench: this job has ended")
        shape = _shape(batch) if batch is not None else (None, None)
        if self.emit(self.end_step(loss, batch_size or shape[0], seq_len or shape[1], batch)):
            raise StopTraining(f"tcbench: {self.count} steps measured (the job's steps={self.spec.steps}); "
                               "`with tcbench.track() as t:` ends the loop here")
        self.start_step()

    def __enter__(self) -> "Tracker":
        self.begin()
        return self

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> bool:
        if not self.on:
            return False
        if exc is None or isinstance(exc, StopTraining):
            self.finish()
            return exc is not None
        _report_exception(exc, "".join(traceback.format_exception(kind, exc, tb)))
        return False


def track(model: Any = None) -> Tracker:
    """Measure the training loop in its ``with`` block: ``with tcbench.track() as t: ... t.step(loss, batch)``.

    ``model`` (default: the one given to ``compile_for_backend``) gives the parameter count for MFU.
    """
    return Tracker(model)


_claim()
