"""``import tcbench.hf`` in a Hugging Face ``Trainer`` script: the public name of ``tcbench.job.hf``
(``training_args``, ``TcbenchCallback``; import it before transformers)."""

from __future__ import annotations

from tcbench.job.hf import TcbenchCallback, training_args

__all__ = ["TcbenchCallback", "training_args"]
