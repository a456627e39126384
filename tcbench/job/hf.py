"""A Hugging Face ``Trainer`` script measured by tcbench: two added lines.

    import tcbench.hf                                   # before transformers (see USE_TORCH_XLA below)
    ...
    args = tcbench.hf.training_args(TrainingArguments(...))          # the compiler tcbench's job asks for
    trainer = Trainer(model=model, args=args, ..., callbacks=[tcbench.hf.TcbenchCallback()])

``tcbench compare-script train.py --backends eager,inductor -- <its arguments>`` then runs the script once
per backend and round. ``training_args`` switches the compiler through the ``TrainingArguments`` the script
already has: ``torch_compile`` with the Inductor backend for ``inductor``, off for the eager baseline, and for
``xla`` the XLA device transformers picks when ``USE_TORCH_XLA=1`` (tcbench sets it for XLA jobs and ``0`` for
the others; transformers reads it once, when it is imported). ``TcbenchCallback`` records one step per
optimizer step (``on_step_begin`` → ``on_step_end``, the device synchronised before the clock stops), the
loss the Trainer logs (every ``loss_every`` steps inside a job), memory, and stops the Trainer at the job's
``steps``. Outside a tcbench job both are no-ops (``TCBENCH_BACKEND`` set by hand still switches the compiler).

Importing this module imports transformers; ``import tcbench`` does not.
"""

from __future__ import annotations

import os
from typing import Any

from tcbench.job import track as _track
from tcbench.job.backends.base import TrainerMismatch

if _track.JOB.spec is not None or _track.BACKEND_ENV in os.environ:   # transformers reads it once, on import
    os.environ.setdefault("USE_TORCH_XLA", "1" if _track.this_backend().torch_xla else "0")

from transformers import TrainerCallback  # noqa: E402 - after USE_TORCH_XLA

__all__ = ["TcbenchCallback", "training_args"]


def training_args(args: Any) -> Any:
    """``args`` (a ``TrainingArguments``) with this job's compiler switched on, or off for eager; in place.

    inductor: ``torch_compile=True`` with the Inductor backend and the job's ``compile_mode``; eager:
    ``torch_compile=False``; xla: checks the Trainer's device is XLA and replaces a fused AdamW (CPU/CUDA
    only) by ``adamw_torch``. Inside a job the Trainer logs its loss every ``loss_every`` steps, which is
    where the callback reads it. Outside a job, and without ``TCBENCH_BACKEND``, ``args`` is returned unchanged.
    """
    if _track.JOB.spec is None and _track.BACKEND_ENV not in os.environ:
        return args
    spec = _track._spec()
    changes = _track.this_backend().trainer_args(args, spec)
    if _track.JOB.active:
        changes.update(logging_strategy="steps", logging_steps=spec.loss_every)
    for name, value in changes.items():
        setattr(args, name, value)
    _track.JOB.configured = True
    _track.announce()
    return args


class TcbenchCallback(TrainerCallback):
    """Reports the Trainer's optimizer steps to tcbench and stops it at the job's ``steps``.

    ``seq_len``: the tokens per sample, for tokens/s and MFU (a callback never sees the batch); default: the
    job's ``seq_len``. The batch size is ``per_device_train_batch_size × gradient_accumulation_steps ×
    world_size``.
    """

    def __init__(self, seq_len: int | None = None) -> None:
        self.seq_len = seq_len
        self.tracker: _track.Tracker | None = None
        self.pending: tuple[int, dict] | None = None   # (global step, record): its loss comes with on_log

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> Any:
        tracker = self.tracker = _track.Tracker(model)
        if not tracker.on:
            return control
        try:
            if _track.this_backend().trainer_configured(args):
                _track.JOB.configured = True
        except TrainerMismatch as exc:
            _track.JOB.end("failed", str(exc))
            raise
        tracker.begin()
        return control

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if self.tracker is not None and self.tracker.on:
            self._flush()
            self.tracker.start_step()
        return control

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        tracker = self.tracker
        if tracker is None or not tracker.on:
            return control
        batch = args.per_device_train_batch_size * args.gradient_accumulation_steps * max(args.world_size, 1)
        rec = tracker.end_step(None, batch, self.seq_len)
        if rec is not None:
            self.pending = (state.global_step, rec)
            if tracker.count >= tracker.spec.steps:
                control.should_training_stop = True
        return control

    def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any) -> Any:
        if self.pending is not None and logs and "loss" in logs and self.pending[0] == state.global_step:
            self.pending[1]["loss"] = float(logs["loss"])
            if self._flush():
                control.should_training_stop = True
        return control

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if self.tracker is not None and self.tracker.on:
            self._flush()
            self.tracker.finish()
        return control

    def _flush(self) -> bool:
        """Send the pending step; True when the job is over (diverged, over budget, or its steps done)."""
        if self.pending is None or self.tracker is None:
            return False
        rec, self.pending = self.pending[1], None
        return self.tracker.emit(rec)
