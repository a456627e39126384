"""The ``tcbench`` command line: compare, noise-floor, run, history, catalogs, max batch, learning-rate retuning
and the projected data-parallel scaling.

Every table speaks the same units under the same names (median step ms, IQR ms, CV, samples/s, compile s,
peak MiB, MFU, noisy); the full data stays in ``--json`` and in ``tc.runs()``. Errors a user can fix are
one line ``tcbench: <message>`` on stderr and exit code 2, in the command line's words (``--threads``, not the
JobSpec field ``threads``). The reading commands (``cli.history``) never create a store: a missing one is such an
error; only commands that run jobs create it. Each command offers the options it uses, grouped, with their defaults.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Any, Sequence

from tcbench.comparison import DEFAULT_BUDGET_S, DEFAULT_RESOLVE, DEFAULT_ROUNDS, MAX_ROUNDS, PAIRINGS
from tcbench.view.format import fmt_ratio, fmt_ratio_range
from tcbench.cli import history, parallel, premise, tuning
from tcbench.cli.common import (MEASUREMENT, MULTI_NODE, OUTPUT, Formatter, add_job_options, add_report_options,
                                backend_list, check_compiler_options, check_writable, cli_words, command, group,
                                job_fields_of, job_spec, option_words, plotlyjs_of, print_table, write_file)
from tcbench.cli.progress import Progress
from tcbench.cli.tables import RUN_COLUMNS, people, print_comparison
from tcbench.cli.tables import COMPARE_COLUMNS, RUNS_COLUMNS, STEPS_COLUMNS  # noqa: F401 (re-exported, as before)
from tcbench.core.spec import BACKENDS, NATIVE
from tcbench.store.api import StoreError
from tcbench.host.doctor import cli as doctor_cli

# the job options of compare-script (the rest is the script's business), in JobSpec's order
SCRIPT_FIELDS = ("batch_size", "seq_len", "steps", "warmup_steps", "profile", "loss_every", "threads", "cache", "debug",
                 "stall_s", "timeout_s")


def _compared(names: list[str]) -> list[str]:
    """The backends compared with the eager baseline: a leading ``eager`` is the baseline itself, so
    ``eager,inductor`` compares inductor and ``eager,eager`` runs eager against itself (A/A)."""
    rest = names[1:] if names[0] == NATIVE else names
    if not rest:
        raise ValueError("--backends 'eager': nothing to compare the baseline with; add a compiled backend "
                         "(eager,inductor) or eager again for an A/A run (eager,eager)")
    return rest


# -- commands -----------------------------------------------------------------------------------------------
def cmd_compare(a: argparse.Namespace) -> int:
    import tcbench as tc

    others = _compared(backend_list(a.backends))
    check_compiler_options(a, others)
    check_writable(("--report", a.report), ("--json", a.json), force=a.force)
    with Progress(rounds=0 if a.rounds is None or a.resolve or a.budget_s else a.rounds) as progress:
        cmp = tc.compare(job_spec(a, "eager"), backends=others, rounds=a.rounds, resolve=a.resolve,
                         budget_s=a.budget_s, max_rounds=a.max_rounds, observer=progress, pairing=a.pairing)
    return _show_comparison(a, cmp)


def cmd_compare_script(a: argparse.Namespace) -> int:
    import tcbench as tc

    others = _compared(backend_list(a.backends))
    check_writable(("--report", a.report), ("--json", a.json), force=a.force)
    fields = {**job_fields_of(a), **({"model": a.name} if a.name else {})}
    with Progress(rounds=0 if a.resolve or a.budget_s else a.rounds) as progress:
        cmp = tc.compare_script(a.script, a.script_args, backends=others, rounds=a.rounds, observer=progress,
                                resolve=a.resolve, budget_s=a.budget_s, pairing=a.pairing, **fields)
    return _show_comparison(a, cmp)


def _show_comparison(a: argparse.Namespace, cmp: Any) -> int:
    print_comparison(cmp)
    for path, flag in ((a.report, "--report"), (a.json, "--json")):
        if path:
            try:
                if flag == "--report":
                    write_file(path, flag, report=cmp, plotlyjs=plotlyjs_of(a))
                else:
                    write_file(path, flag, cmp.to_json())
            except ValueError as exc:   # the jobs are measured and stored: say how to get the file later
                later = (f"tcbench report {cmp.comparison_id} --out PATH writes its report" if flag == "--report" else
                         f"tcbench show {cmp.comparison_id} --json > PATH writes its JSON")
                raise ValueError(f"{exc}; the comparison is stored: {later}") from None
            print(f"{flag.lstrip('-')} written to {path}")
    return 0 if all(r.ok for r in cmp.results) else 1


def noise_floor_line(nf: Any) -> str:
    """``smallest resolvable speedup now: 1.06× (A/A interval 0.96–1.06×, verdict: no measurable difference)``."""
    if nf.resolvable is None:
        return f"smallest resolvable speedup now: unknown (verdict: {nf.verdict_kind})"
    return (f"smallest resolvable speedup now: {fmt_ratio(nf.resolvable)} (A/A interval "
            f"{fmt_ratio_range(nf.low, nf.high)}, verdict: {nf.verdict_kind})")


def cmd_noise_floor(a: argparse.Namespace) -> int:
    import tcbench as tc

    check_compiler_options(a, [a.backend])
    with Progress(rounds=a.rounds) as progress:
        nf = tc.noise_floor(job_spec(a, a.backend), rounds=a.rounds, observer=progress, pairing=a.pairing)
    print_comparison(nf.comparison)
    print(noise_floor_line(nf))
    return 0 if all(r.ok for r in nf.comparison.results) else 1


def cmd_run(a: argparse.Namespace) -> int:
    import tcbench as tc

    check_compiler_options(a, [a.backend])
    with Progress() as progress:
        r = tc.run(job_spec(a, a.backend), observer=progress)
    print_table(people([r.summary_row()], RUN_COLUMNS))
    for text in (f"noisy: {r.noise_reason}" if r.noisy else "", r.mfu_note,
                 f"error: {r.error.strip()[-1500:]}" if r.error else "",
                 f"artifacts: {r.artifacts}" if r.artifacts else ""):
        if text:
            print(text)
    return 0 if r.ok else 1


def _add_round_options(p: argparse.ArgumentParser, adaptive: bool) -> None:
    """--rounds, --resolve and --budget-s, as compare()'s arguments (``adaptive``: the default is adaptive rounds)."""
    g = group(p, MEASUREMENT)
    default = (f"default: adaptive, until ±{DEFAULT_RESOLVE * 100:g} %% or {DEFAULT_BUDGET_S:g} s" if adaptive
               else f"default: {DEFAULT_ROUNDS} fixed rounds")
    g.add_argument("--rounds", type=int, default=None if adaptive else DEFAULT_ROUNDS,
                   help=f"alone: exactly this many alternating rounds (1: no run-to-run spread); with --resolve: the "
                        f"first stage ({default})")
    resolve = f"{DEFAULT_RESOLVE:g} when rounds are adaptive" if adaptive else "fixed rounds"
    g.add_argument("--resolve", type=float, default=None,
                   help=f"add rounds until every speedup's verdict at ± this share is decided (0.05: ±5 %%; "
                        f"default: {resolve})")
    budget = f"{DEFAULT_BUDGET_S:g} when rounds are adaptive" if adaptive else "none"
    g.add_argument("--budget-s", type=float, default=None,
                   help=f"with adaptive rounds: start no round that would end past this many seconds (default: "
                        f"{budget})")


def _add_pairing(p: argparse.ArgumentParser) -> None:
    group(p, MEASUREMENT).add_argument(
        "--pairing", default="auto", choices=PAIRINGS,
        help="lockstep: a round's jobs together, taking turns of 5 measured steps on the same CPUs once each has "
             "compiled, so the machine's speed of the moment is common to both; sequential: one after the other; "
             "auto: lockstep where every job can take turns (one process: not nproc > 1) and no GPU is present, else "
             "sequential (default: auto)")


def _add_outputs(p: argparse.ArgumentParser) -> None:
    g = group(p, OUTPUT)
    g.add_argument("--report", help="write the HTML report here, plotly.min.js beside it (default: no report; "
                                     "tcbench report ID writes one later)")
    g.add_argument("--json", help="write the full summary and every step as JSON here (default: none; tcbench "
                                  "show ID --json prints the summary later)")
    add_report_options(p)


def _add_compare(sub: "argparse._SubParsersAction") -> None:
    p = command(sub, "compare", "run the eager baseline and compiled jobs, print the summary and verdicts",
                "tcbench compare --backends eager,inductor --report report.html",
                "Each job runs in its own process, native and compiled in alternating rounds. By default rounds are "
                f"added until every\nspeedup's verdict at ±{DEFAULT_RESOLVE * 100:g} % is decided or "
                f"{DEFAULT_BUDGET_S:g} s have passed. The comparison is stored: tcbench show ID prints it again.")
    add_job_options(p)
    group(p, MEASUREMENT).add_argument(
        "--backends", default="eager,inductor",
        help="comma-separated, e.g. eager,inductor,xla; eager is the baseline, eager,eager runs A/A")
    _add_round_options(p, adaptive=True)
    group(p, MEASUREMENT).add_argument("--max-rounds", type=int, default=MAX_ROUNDS,
                                       help="adaptive rounds stop here at the latest")
    _add_pairing(p)
    _add_outputs(p)
    p.set_defaults(func=cmd_compare)


def _add_compare_script(sub: "argparse._SubParsersAction") -> None:
    p = command(sub, "compare-script", "run your own training script natively and compiled: the same summary as "
                "compare", "tcbench compare-script train.py --steps 50 -- --epochs 1",
                "Inside the script: tcbench.track() or tcbench.hf.TcbenchCallback. Model, data and learning rate are "
                "the script's;\nits own arguments go after --.",
                usage="tcbench compare-script SCRIPT [options] [-- SCRIPT_ARGS ...]")
    p.add_argument("script", help="your training script (.py); its own arguments go after --")
    group(p, MEASUREMENT).add_argument("--backends", default="eager,inductor",
                                      help="comma-separated; eager is the baseline")
    _add_round_options(p, adaptive=False)
    add_job_options(p, only=SCRIPT_FIELDS, help={
        "steps": "the steps each run is measured for (the script stops there)",
        "batch_size": "samples per step when the script does not report it",
        "seq_len": "tokens per sample when the script does not report it"})
    group(p, OUTPUT).add_argument("--name", default=None,
                                  help="the name the runs are shown under (default: the script's file name)")
    _add_pairing(p)
    _add_outputs(p)
    p.set_defaults(func=cmd_compare_script, script_args=[])


def _add_run_commands(sub: "argparse._SubParsersAction") -> None:
    _add_compare(sub)
    _add_compare_script(sub)
    p = command(sub, "noise-floor", "run a job against itself (A/A): the smallest speedup resolvable now",
                "tcbench noise-floor --threads 1 --rounds 5",
                "A compiled job must be at least this much faster (or slower) for a verdict to tell it from noise.")
    add_job_options(p, leave_out=MULTI_NODE)
    group(p, MEASUREMENT).add_argument("--backend", default="eager", choices=BACKENDS, help="the job's backend")
    group(p, MEASUREMENT).add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, help="alternating rounds")
    _add_pairing(p)
    p.set_defaults(func=cmd_noise_floor)
    p = command(sub, "run", "run one job and print its figures", "tcbench run --backend inductor --steps 60",
                "The run is stored: tcbench runs lists it, tcbench steps RUN_ID prints its steps.")
    add_job_options(p)
    group(p, MEASUREMENT).add_argument("--backend", default="eager", choices=BACKENDS, help="the job's backend")
    p.set_defaults(func=cmd_run)


class _Parser(argparse.ArgumentParser):
    """argparse with a usage error in one line (``tcbench: …``, exit 2) like every other bad input, no abbreviated
    options (argparse's ``allow_abbrev=False``, the ecosystem's guard), and a negative
    number in any notation read as a value (argparse's own takes ``-1e-3`` for an option: "--lr: expected one
    argument"), so that ``--lr -1e-3`` is refused for what it is."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)   # --target is not --target-loss: a typo is refused, never guessed
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = re.compile(r"^-(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$")

    def error(self, message: str) -> None:   # type: ignore[override]
        self.exit(2, f"tcbench: {message} (see {self.prog} --help)\n")


EXAMPLES = """examples:
  tcbench compare                      the eager baseline against inductor, rounds until the answer is known
  tcbench show 3                       a stored comparison's verdicts again (tcbench comparisons lists them)
  tcbench compare --help               every option of a command, grouped, with its default"""


def build_parser() -> argparse.ArgumentParser:
    """The ``tcbench`` parser: one subcommand per command, each with its own options, description and example."""
    ap = _Parser(prog="tcbench", description="Native vs compiled training jobs, measured honestly.",
                 epilog=EXAMPLES, formatter_class=Formatter)
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_run_commands(sub)
    history.add_subcommands(sub)

    command(sub, "doctor", "what is installed, what each backend needs, what is missing (and the pip command)",
            "tcbench doctor").set_defaults(func=doctor_cli)
    tuning.add_subcommands(sub)
    premise.add_subcommands(sub)
    parallel.add_subcommands(sub)
    for p in sub.choices.values():   # a message in API words is told in this command's words (main)
        p.set_defaults(cli_words=option_words(p))
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    argv, script_args = list(sys.argv[1:] if argv is None else argv), None
    if argv[:1] == ["compare-script"] and "--" in argv:   # the script's own arguments, passed on as they are
        argv, script_args = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    try:
        a = build_parser().parse_args(argv)
    except SystemExit as exc:   # --help (0), or a usage error already printed in one line (2)
        return exc.code if isinstance(exc.code, int) else 2
    if script_args is not None:
        a.script_args = script_args
    try:
        return a.func(a)
    except ValueError as exc:   # a SpecError too: its field named by this command's option
        print(f"tcbench: {cli_words(str(exc), getattr(a, 'cli_words', {}))}", file=sys.stderr)
    except StoreError as exc:
        print(f"tcbench: {exc}", file=sys.stderr)
    except KeyError as exc:   # str(KeyError) quotes its message
        print(f"tcbench: {exc.args[0] if exc.args else exc}", file=sys.stderr)
    except KeyboardInterrupt:
        print("tcbench: interrupted; the steps measured so far are kept in the store", file=sys.stderr)
        return 130
    except BrokenPipeError:   # `tcbench runs | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
