"""CLI subcommand ``tcbench check-lr``: is the learning rate near its optimum at its batch? (``tc.check_lr``; added by
``cli.app.build_parser`` through ``add_subcommands``)."""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING

from tcbench.cli.common import MULTI_NODE, add_job_options, command, job_spec, print_table, whole_number
from tcbench.core.events import Event, JobEnded

if TYPE_CHECKING:
    import pandas as pd

    import tcbench as tc


def factor_list(text: str) -> tuple[float, ...]:
    """An argparse ``type``: comma-separated positive numbers ("0.5,1,2"); the rest (1 among them, none repeated)
    is ``check_lr``'s to refuse, naming ``factors``."""
    try:
        values = tuple(float(x) for x in text.split(","))
    except ValueError:
        values = ()
    if not values or any(not math.isfinite(v) or v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed; allowed: comma-separated positive numbers "
                                         "including 1, e.g. 0.5,1,2")
    return values


def _progress(event: Event) -> None:
    if isinstance(event, JobEnded):
        r = event.result
        loss = "" if r.extra.eval_loss is None else f", held-out loss {r.extra.eval_loss:.4f}"
        print(f"[tcbench] {event.label} (lr {r.spec.lr:.3g}) seed {r.spec.seed}: {r.status}{loss}", flush=True)


def cmd_check_lr(a: argparse.Namespace) -> int:
    """Run the check and print its table and verdict; exit 0 when lr0 held, 1 when it is off, 3 when inconclusive."""
    import tcbench as tc

    p = tc.check_lr(job_spec(a, a.backend), factors=a.factors, seeds=a.seeds, eval_batches=a.eval_batches,
                    extend=a.extend, observer=_progress)
    print_table(p.table().drop(columns=["losses"]))
    print(p.verdict)
    if a.runs:
        print_table(_runs(p))
    return {True: 0, False: 1, None: 3}[p.held]


def _runs(p: "tc.LrPremise") -> "pd.DataFrame":
    import pandas as pd

    return pd.DataFrame([dict(factor=r.factor, lr=r.lr, seed=r.seed, status=r.status, eval_loss=r.eval_loss,
                              run_id=r.run_id) for r in p.runs])


def add_subcommands(sub: "argparse._SubParsersAction") -> None:
    """Add ``check-lr`` to the ``tcbench`` parser's subcommands."""
    p = command(sub, "check-lr", "check that the learning rate is near its optimum at its batch (the premise of "
                "predict-lr and retune-lr)", "tcbench check-lr --model gpt2 --batch-size 8 --lr 5e-4 --steps 160",
                "Paired runs at lr × each factor over several seeds (the same seeds at every rate), each judged on its "
                "held-out loss after --steps steps; per factor the difference from lr with its 95 % interval. When "
                "lr is off, more factors are run beyond the edge and a re-centred rate is named. Exit status: 0 "
                "held, 1 off, 3 inconclusive.")
    add_job_options(p, leave_out=MULTI_NODE)
    p.add_argument("--backend", default="eager", help="the runs' backend (default: eager)")
    p.add_argument("--factors", type=factor_list, default=(0.5, 1.0, 2.0),
                   help="lr × each (comma-separated, 1 among them; default 0.5,1,2)")
    p.add_argument("--seeds", type=whole_number, default=3, help="seeds per factor (2 at least; default 3)")
    p.add_argument("--eval-batches", type=whole_number, default=8, help="held-out batches each run is judged on")
    p.add_argument("--extend", type=int, default=2, help="at most this many more factors beyond the edge while the "
                                                         "best is there (default 2; 0: none)")
    p.add_argument("--runs", action="store_true", help="also print every run")
    p.set_defaults(func=cmd_check_lr)
