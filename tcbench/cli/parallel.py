"""CLI subcommands (added by ``cli.app.build_parser``): ``tcbench scaling`` (measured here: the same job at 1, 2, …
processes) and ``tcbench project-scaling`` (per instance profile, an estimate from a ring all-reduce model; no job
runs)."""

from __future__ import annotations

import argparse

from tcbench.cli.common import GROUPS, PARALLEL, add_job_options, command, job_spec, print_table
from tcbench.core.spec import JobSpec
from tcbench.parallel.projection import LinkAssumptions, project_scaling
from tcbench.parallel.scaling import scaling


_EFA = {"profile": None, "on": True, "off": False, "both": "both"}
_COLUMNS = ["profile", "efa", "nodes", "devices", "grad_mib", "ring_mib_per_device", "allreduce_ms", "compute_ms",
            "step_ms", "samples_s", "scaling_factor", "epoch_h", "cost_per_epoch", "link", "link_gbytes_s", "alpha_us"]


def _whole_numbers(text: str, flag: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        values = ()
    if not values or min(values) < 1:
        raise ValueError(f"{flag} {text!r} is not allowed; use comma-separated whole numbers >= 1, e.g. 1,2,4,8")
    return values


def cmd_project_scaling(a: argparse.Namespace) -> int:
    spec = None
    if a.params is None:   # the catalog's approximate parameter count of --model/--size (no model is built)
        spec = JobSpec(model=a.model, size=a.size, batch_size=a.batch_size, seq_len=a.seq_len, precision=a.precision)
    res = project_scaling(params=a.params, spec=spec, profiles=[p.strip() for p in a.profiles.split(",") if p.strip()],
                          nodes=_whole_numbers(a.nodes, "--nodes"), precision=a.precision,
                          per_device_batch=a.batch_size, seq_len=a.seq_len,
                          compute_step_s=None if a.compute_step_ms is None else a.compute_step_ms / 1000.0,
                          overlap=a.overlap, efa=_EFA[a.efa], assumptions=LinkAssumptions(mfu=a.mfu),
                          dataset_samples=a.dataset_samples)
    table = res.table if a.all_columns else res.table[[c for c in _COLUMNS if c in res.table.columns]]
    print_table(table)
    print(res.describe())
    return 0


def cmd_scaling(a: argparse.Namespace) -> int:
    res = scaling(job_spec(a, a.backend), nprocs=_whole_numbers(a.nprocs, "--nprocs"), rounds=a.rounds,
                  parity=not a.no_parity)
    print_table(res.table())
    print(res.describe())
    return 0 if all(r.ok for r in res.results) else 1


def add_subcommands(sub: "argparse._SubParsersAction") -> None:
    """Add ``scaling`` and ``project-scaling`` to the ``tcbench`` parser's subcommands."""

    p = command(sub, "scaling", "measured data-parallel scaling: the job at 1, 2, … torchrun processes",
                "tcbench scaling --nprocs 1,2,4 --threads 1 --rounds 3",
                "--batch-size is per process: the global batch grows with the process count.")
    add_job_options(p, leave_out=GROUPS[PARALLEL])   # --nprocs names the process counts; one machine
    p.add_argument("--backend", default="eager", choices=["eager", "inductor", "xla"], help="the jobs' backend")
    p.add_argument("--nprocs", default="1,2", help="comma-separated process counts; the first is the baseline")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    p.add_argument("--no-parity", action="store_true", help="skip the one-process run at each global batch")
    p.set_defaults(func=cmd_scaling)
    p = command(sub, "project-scaling", "projected data-parallel scaling per instance profile (an estimate from a "
                "ring all-reduce model; no job runs)", "tcbench project-scaling --model gpt2 --size base --nodes 1,2,4")
    p.add_argument("--model", default="bert-base-cased",
                   help="catalog model whose parameter count is used (tcbench models)")
    p.add_argument("--size", default="base", help="tiny, small or base")
    p.add_argument("--params", type=int, default=None,
                   help="parameter count (default: the catalog's for --model/--size)")
    p.add_argument("--profiles", default="ml.p3.16xlarge,ml.p3dn.24xlarge,ml.p4d.24xlarge",
                   help="comma-separated instance profiles (tcbench profiles)")
    p.add_argument("--nodes", default="1,2,4,8",
                   help="comma-separated instance counts (1 adds 1, 2, 4 … devices of one)")
    p.add_argument("--precision", default="fp16", choices=["fp32", "fp16", "bf16"],
                   help="the all-reduce precision: fp16/bf16 (AMP) 2 bytes per parameter, fp32 4")
    p.add_argument("--batch-size", type=int, default=32, help="samples per device per step")
    p.add_argument("--seq-len", type=int, default=128, help="tokens per sample")
    p.add_argument("--compute-step-ms", type=float, default=None,
                   help="measured compute ms per step on one device (default: estimated from FLOPs)")
    p.add_argument("--overlap", type=float, default=0.5, help="share of the compute that hides the all-reduce, 0..1")
    p.add_argument("--efa", default="profile", choices=list(_EFA),
                   help="profile: as each profile has it; off: without EFA; both: EFA profiles with and without")
    p.add_argument("--mfu", type=float, default=0.35, help="model-FLOPs utilisation for the compute estimate")
    p.add_argument("--dataset-samples", type=int, default=None,
                   help="adds epoch hours and cost per epoch (default: left out)")
    p.add_argument("--all-columns", action="store_true", help="also print the assumption columns")
    p.set_defaults(func=cmd_project_scaling)
