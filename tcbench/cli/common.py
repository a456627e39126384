"""What every command group shares: the job options (derived from ``JobSpec``'s fields and defaults), the
backend list, and the table printer. Command modules import this one, never each other."""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import typing
from typing import Any, Sequence

import pandas as pd

from tcbench.core.spec import BACKENDS, PADDINGS, PRECISIONS, JobSpec

# the JobSpec fields a command never takes as an option: the backend is the command's own, the rest are API-only
NOT_OPTIONS = ("backend", "memory_budget_gb", "eval_batches", "script", "script_args", "noise_micro_batches")
# the option whose name is not the field's
FLAGS = {"warmup_steps": "--warmup"}
CHOICES = {"precision": PRECISIONS, "padding": PADDINGS, "cache": ("shared", "cold")}
HELP = {
    "model": "catalog name (tcbench models), a local folder, or a factory package.module:function",
    "size": "tiny, small or base (a factory's own word for it)",
    "warmup_steps": "warmup steps, reported apart",
    "dataset": "'builtin', a .csv/.jsonl file with text,label columns, or a batch factory package.module:function",
    "profile": "instance profile (tcbench profiles)",
    "debug": "keep the compiler's own report in the run's artifacts",
    "stall_s": "stop a job that reports nothing for max(this, 20 x its median step) seconds (default 300)",
    "timeout_s": "optional cap on one job's wall-clock seconds",
    "nproc": "data-parallel processes on this machine (torchrun + DDP; --batch-size is per process)",
    "nnodes": "machines of the job: run the same command on each, with its own --node-rank",
    "node_rank": "this machine's place among --nnodes (0 … nnodes-1)",
    "rdzv_endpoint": "host:port of node 0's rendezvous (with --nnodes > 1)",
}


def job_fields() -> list[dataclasses.Field]:
    """The JobSpec fields that are command-line options, in JobSpec's order."""
    return [f for f in dataclasses.fields(JobSpec) if f.name not in NOT_OPTIONS]


def flag(name: str) -> str:
    """The option of a JobSpec field: ``--batch-size`` for ``batch_size``."""
    return FLAGS.get(name, "--" + name.replace("_", "-"))


def _dest(name: str) -> str:
    return flag(name)[2:].replace("-", "_")


def add_job_options(p: argparse.ArgumentParser, only: Sequence[str] | None = None,
                    help: dict[str, str] | None = None) -> None:
    """One option per JobSpec field (``only``: those fields), its type and default taken from JobSpec."""
    hints = typing.get_type_hints(JobSpec)
    for f in job_fields():
        if only is not None and f.name not in only:
            continue
        kind = hints[f.name]
        text = (help or {}).get(f.name, HELP.get(f.name))
        if kind is bool:
            p.add_argument(flag(f.name), action="store_true", help=text)
            continue
        base = next((t for t in typing.get_args(kind) if t is not type(None)), kind)   # int | None -> int
        p.add_argument(flag(f.name), type=base, default=f.default, choices=CHOICES.get(f.name), help=text)


def job_fields_of(a: argparse.Namespace) -> dict[str, Any]:
    """The JobSpec fields the parsed options name (those the command took)."""
    return {f.name: getattr(a, _dest(f.name)) for f in job_fields() if hasattr(a, _dest(f.name))}


def job_spec(a: argparse.Namespace, backend: str = "eager") -> JobSpec:
    """The JobSpec of the parsed job options, with ``backend``."""
    return JobSpec(backend=backend, **job_fields_of(a))


def backend_list(text: str) -> list[str]:
    """The comma-separated backend names, in order, duplicates kept (``eager,eager`` is an A/A run)."""
    names = [b.strip() for b in text.split(",") if b.strip()]
    bad = [b for b in names if b not in BACKENDS]
    if bad or not names:
        raise ValueError(f"--backends={text!r}: unknown {bad}; allowed: {', '.join(BACKENDS)} (comma-separated)")
    return names


def whole_number(text: str) -> int:
    """An argparse ``type``: a whole number >= 1 (a count, an id). Anything else is a one-line usage error naming the
    option, the value and what is allowed (``argument --last: '-1' is not allowed; allowed: …``)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed; allowed: a whole number >= 1")
    return value


def _float(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"


def print_table(df: pd.DataFrame) -> None:
    """A table on stdout, floats to 4 significant digits; wrapped to the terminal's width when stdout is
    one, whole lines in pipes."""
    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else None
    with pd.option_context("display.max_columns", 60, "display.max_colwidth", 60):
        print(df.to_string(index=False, line_width=width, float_format=_float, na_rep="–") if len(df) else "(none)")
