"""CLI subcommands ``tcbench max-batch`` and ``tcbench retune-lr`` (added by ``cli.build_parser``)."""

from __future__ import annotations

import argparse

# cli.py imports this module; its helpers are imported when called, so either import order works.


def _progress(event: dict) -> None:
    if event["type"] == "probe":
        mark = "fits" if event["fits"] else f"does not fit ({event['reason'][:120]})"
        mem = "" if event["peak_mem_mb"] is None else f", peak {event['peak_mem_mb']:.0f} MiB"
        print(f"[tcbench] {event['backend']} batch {event['batch_size']}: {mark}{mem}", flush=True)
    elif event["type"] == "trial":
        tail = "pruned" if event["pruned"] else event["status"]
        loss = "" if event["eval_loss"] is None else f", held-out loss {event['eval_loss']:.4f}"
        print(f"[tcbench] trial {event['number']} lr={event['lr']:.3g}: {tail}{loss}", flush=True)


def cmd_max_batch(a: argparse.Namespace) -> int:
    from ._maxbatch import find_max_batch
    from .cli import _backends, _print, _spec

    names = _backends(a.backends)
    res = find_max_batch(_spec(a, names[0]), profile=a.profile, backends=names, start=a.start,
                            max_batch=a.max_batch, probe_steps=a.probe_steps, multiple_of=a.multiple_of, observer=_progress,
                            memory_budget_gb=a.budget_gb)
    print(f"profile {res.profile}, memory budget {res.budget_gb:g} GiB")
    _print(res.table())
    if a.probes:
        _print(res.probes())
    return 0 if all(v for v in res.max_batch.values()) else 1


def cmd_retune_lr(a: argparse.Namespace) -> int:
    from ._tuning import retune_lr
    from .cli import _print, _spec

    res = retune_lr(_spec(a, a.backend), new_batch_size=a.new_batch_size, n_trials=a.trials, storage=a.storage,
                       study_name=a.study_name, sampler=a.sampler, steps=a.tune_steps, eval_batches=a.eval_batches,
                       search_factor=a.search_factor, seed=a.seed, pruner=a.pruner, observer=_progress)
    _print(res.summary())
    print(f"trials {len(res.trials)} (pruned {res.n_pruned}, failed {res.n_failed}), wall {res.wall_s:.0f} s, "
          f"steps run {res.total_steps} vs a plain grid's {res.grid_steps}")
    if a.trials_table:
        _print(res.trials)
    if a.storage:   # res.storage shows the URL with its password as ***
        hint = "; put the password back in place of ***" if "***" in res.storage else ""
        print(f"study {res.study_name!r} in {res.storage} (optuna-dashboard {res.storage} opens it{hint})")
    return 0 if res.best_lr is not None else 1


def add_subcommands(sub: "argparse._SubParsersAction") -> None:
    """Add ``max-batch`` and ``retune-lr`` to the ``tcbench`` parser's subcommands."""
    from .cli import _spec_args

    p = sub.add_parser("max-batch", help="largest batch that fits under a profile's memory, per backend")
    _spec_args(p)
    p.add_argument("--backends", default="eager,inductor", help="comma-separated; the first is the native one")
    p.add_argument("--start", type=int, default=None, help="first batch probed (default: --batch-size)")
    p.add_argument("--max-batch", type=int, default=4096, help="stop growing here")
    p.add_argument("--multiple-of", type=int, default=1, help="probe only multiples of this (e.g. 8)")
    p.add_argument("--probe-steps", type=int, default=4, help="steps per probe job (1 warmup)")
    p.add_argument("--budget-gb", type=float, default=None, help="override the profile's memory budget (GiB)")
    p.add_argument("--probes", action="store_true", help="also print every probe")
    p.set_defaults(func=cmd_max_batch)
    p = sub.add_parser("retune-lr", help="retune the learning rate after a batch-size change (Optuna)")
    _spec_args(p)
    p.add_argument("--backend", default="eager", choices=["eager", "inductor", "xla"])
    p.add_argument("--new-batch-size", type=int, required=True)
    p.add_argument("--trials", type=int, default=12)
    p.add_argument("--storage", default=None,
                   help="'store' (tcbench's SQLite file) or a database URL; resumes, retries the trials of killed "
                        "workers (heartbeat), never prints the password")
    p.add_argument("--study-name", default=None)
    p.add_argument("--sampler", default="tpe", choices=["tpe", "random"])
    p.add_argument("--pruner", default="median", choices=["median", "halving", "none"])
    p.add_argument("--tune-steps", type=int, default=None, help="steps per trial (default: --steps)")
    p.add_argument("--eval-batches", type=int, default=8, help="held-out batches for the objective")
    p.add_argument("--search-factor", type=float, default=4.0, help="search [min(rules)/f, max(rules)*f]")
    p.add_argument("--trials-table", action="store_true", help="also print every trial")
    p.set_defaults(func=cmd_retune_lr)
