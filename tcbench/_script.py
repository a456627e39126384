"""compare_script(): your own training script compared natively and compiled, like any built-in job.

The script is a ``JobSpec`` with ``script`` and ``script_args`` set, so everything downstream — the runner,
the store, the summary with its intervals and verdicts, the report and the panel — is the ordinary path.
Inside the script, ``tcbench.track()`` (a plain loop) or ``tcbench.hf.TcbenchCallback()`` (a Trainer)
reports the steps; ``tcbench.compile_for_backend`` / ``tcbench.hf.training_args`` switch the compiler
(README, "Your own training script"; ``examples/``).
"""

from __future__ import annotations

import threading
from typing import Any, Sequence

from ._compare import DEFAULT_ROUNDS, Comparison, compare
from ._runner import Observer
from ._spec import JobSpec
from ._store import Store


def compare_script(script: str, args: Sequence[str] = (), backends: Sequence[str] = ("inductor",),
                   rounds: int = DEFAULT_ROUNDS, observer: Observer | None = None,
                   stop: threading.Event | None = None, store: Store | None = None, **spec_fields: Any) -> Comparison:
    """Run ``python script *args`` natively (eager) and with each backend in ``backends``, ``rounds``
    alternating rounds, each job in its own process; the same ``Comparison`` as ``compare``.

    ``spec_fields`` are JobSpec fields: ``steps`` (the cap the script is measured for), ``warmup_steps``,
    ``loss_every``, ``threads``, ``batch_size`` / ``seq_len`` (only used when the script does not report its
    batch), ``model`` (the name the runs are shown under; default the script's file name), ``stall_s``, ...
    A missing script, one that is not a ``.py`` file or arguments that are not a list of strings are a
    ``SpecError`` naming ``script`` / ``script_args`` before any process starts.
    """
    spec = JobSpec(script=script, script_args=args, **spec_fields)
    return compare(spec, backends=backends, rounds=rounds, observer=observer, stop=stop, store=store)
