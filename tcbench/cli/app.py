"""The ``tcbench`` command line: compare, noise-floor, run, history, catalogs, max batch, learning-rate retuning
and the projected data-parallel scaling.

Every table speaks the same units under the same names (median step ms, IQR ms, CV, samples/s, compile s,
peak MiB, MFU, noisy); the full data stays in ``--json`` and in ``tc.runs()``. Errors a user can fix are
one line ``tcbench: <message>`` on stderr and exit code 2. The reading commands (runs, comparisons, steps, report)
never create a store: a missing one is such an error; only commands that run jobs create it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from tcbench.comparison import DEFAULT_BUDGET_S, DEFAULT_RESOLVE, DEFAULT_ROUNDS, MAX_ROUNDS
from tcbench.job.diagnostics import lines as diagnose_lines
from tcbench.view.format import CLI_COLUMNS, fmt_ratio, fmt_ratio_range, is_missing
from tcbench.cli import parallel, tuning
from tcbench.cli.common import add_job_options, backend_list, job_fields_of, job_spec, print_table, whole_number
from tcbench.cli.progress import Progress
from tcbench.core.spec import BACKENDS
from tcbench.store.api import StoreError

SINGLE_ROUND = "single round: no run-to-run spread"
# the job options of compare-script (the rest is the script's business), in JobSpec's order
SCRIPT_FIELDS = ("batch_size", "seq_len", "steps", "warmup_steps", "profile", "loss_every", "threads", "cache", "debug",
                 "stall_s", "timeout_s")


def _compared(names: list[str]) -> list[str]:
    """The backends compared with the eager baseline: a leading ``eager`` is the baseline itself, so
    ``eager,inductor`` compares inductor and ``eager,eager`` runs eager against itself (A/A)."""
    rest = names[1:] if names[0] == "eager" else names
    if not rest:
        raise ValueError("--backends='eager': nothing to compare the baseline with; add a compiled backend "
                         "(eager,inductor) or eager again for an A/A run (eager,eager)")
    return rest


# -- numbers for people -----------------------------------------------------------------------------------
# each command's columns; their names, units and cells are tcbench.view.format.COLUMNS (the report's too), the same
# in `run`, `runs`, `compare` and `noise-floor`. `compare` fits 120 columns: noise and loss parity are told in words
# below it, the intervals are in --json
COMPARE_COLUMNS = ["backend", "status", "median_step_ms", "step_cv", "samples_s", "compile_latency_s", "cache",
                   "peak_mem_mb", "mfu", "speedup", "memory_ratio", "break_even_steps"]
RUN_COLUMNS = ["run_id", "backend", "status", "median_step_ms", "step_iqr_ms", "step_cv", "samples_s", "tokens_s",
               "compile_latency_s", "cache", "peak_mem_mb", "mfu", "noisy", "final_loss"]
RUNS_COLUMNS = ["run_id", "created", "backend", "status", "model", "size", "batch_size", "seq_len",
                "median_step_ms", "step_cv", "samples_s", "peak_mem_mb", "noisy", "host", "threads", "torch",
                "commit", "load"]
STEPS_COLUMNS = ["step", "warmup", "step_ms", "samples_s", "tokens_s", "peak_mem_mb", "loss", "seq_len", "cpu_ms"]


def people(rows: pd.DataFrame | Sequence[Mapping[str, Any]], columns: Sequence[str]) -> pd.DataFrame:
    """``rows`` as text in people's names and units (``tcbench.view.format.COLUMNS``); absent columns are left out."""
    records = rows.to_dict("records") if isinstance(rows, pd.DataFrame) else list(rows)
    present = [CLI_COLUMNS[c] for c in columns if any(c in r for r in records)]
    return pd.DataFrame({c.heading: [c.cli_text(r) for r in records] for c in present},
                        columns=[c.heading for c in present])


def _write(path: str, flag: str, text: str) -> None:
    """Write ``text`` to ``path``; a path that cannot be written is a one-line error naming it and why."""
    try:
        Path(path).expanduser().write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"{flag} {path}: cannot write it ({exc.strerror or exc})") from None


def _check_writable(path: str | None, flag: str) -> None:
    """Fail before a long run, not after it, when ``path``'s folder does not exist or is a file."""
    if path is None:
        return
    p = Path(path).expanduser()
    if p.is_dir():
        raise ValueError(f"{flag} {path}: cannot write it (it is a folder)")
    if not p.parent.is_dir():
        raise ValueError(f"{flag} {path}: cannot write it (the folder {p.parent} does not exist)")


# -- commands -----------------------------------------------------------------------------------------------
def print_comparison(cmp: Any) -> None:
    """The summary table, then per backend its verdict sentence, warnings, loss parity and error; MFU notes last."""
    summary, spec = cmp.summary(), cmp.spec
    job = (f"{spec.model} {spec.size}, batch {spec.batch_size}, seq {spec.seq_len}, {spec.precision}" if spec.script is None
           else f"your script {' '.join([spec.script, *spec.script_args])}, {spec.steps} steps ({spec.warmup_steps} warmup)")
    print(f"{job}, {cmp.rounds_note}; comparison {cmp.comparison_id}")
    print_table(people(summary, COMPARE_COLUMNS))
    if cmp.rounds == 1:
        print(f"note: {SINGLE_ROUND} (use --rounds 3 or more for an interval across runs)")
    notes: dict[str, list[str]] = {}
    diagnosis = cmp.diagnostics()
    for row in cmp.rows():
        print(f"- {row.label}: {row.verdict}")
        for w in row.warnings:
            print(f"    warning: {w}")
        if row.verdict_kind != "baseline" and row.loss_parity is not False:   # a failure is a warning
            print(f"    loss parity {'' if row.loss_parity is None else 'ok: '}{row.loss_parity_note}")
        if row.error:
            print(f"    error: {row.error.strip().splitlines()[-1][:300]}")
        for line in diagnose_lines(diagnosis, row.label):   # graph breaks, recompiles, ...: where and why
            print(f"    {line}")
        if row.mfu_note:
            notes.setdefault(row.mfu_note, []).append(row.label)
    for note, labels in notes.items():
        print(f"{', '.join(labels)}: {note}")


def cmd_compare(a: argparse.Namespace) -> int:
    import tcbench as tc

    others = _compared(backend_list(a.backends))
    _check_writable(a.report, "--report")
    _check_writable(a.json, "--json")
    with Progress(rounds=0 if a.rounds is None or a.resolve or a.budget_s else a.rounds) as progress:
        cmp = tc.compare(job_spec(a, "eager"), backends=others, rounds=a.rounds, resolve=a.resolve,
                         budget_s=a.budget_s, max_rounds=a.max_rounds, observer=progress)
    return _show_comparison(a, cmp)


def cmd_compare_script(a: argparse.Namespace) -> int:
    import tcbench as tc

    others = _compared(backend_list(a.backends))
    _check_writable(a.report, "--report")
    _check_writable(a.json, "--json")
    fields = {**job_fields_of(a), **({"model": a.name} if a.name else {})}
    with Progress(rounds=0 if a.resolve or a.budget_s else a.rounds) as progress:
        cmp = tc.compare_script(a.script, a.script_args, backends=others, rounds=a.rounds, observer=progress,
                                resolve=a.resolve, budget_s=a.budget_s, **fields)
    return _show_comparison(a, cmp)


def _show_comparison(a: argparse.Namespace, cmp: Any) -> int:
    print_comparison(cmp)
    for path, flag, text in ((a.report, "--report", cmp.to_html), (a.json, "--json", cmp.to_json)):
        if path:
            try:
                _write(path, flag, text())
            except ValueError as exc:   # the jobs are measured and stored: say how to get the file later
                raise ValueError(f"{exc}; the comparison is stored: tcbench report {cmp.comparison_id} "
                                 "--out PATH writes its report") from None
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

    with Progress(rounds=a.rounds) as progress:
        nf = tc.noise_floor(job_spec(a, a.backend), rounds=a.rounds, observer=progress)
    print_comparison(nf.comparison)
    print(noise_floor_line(nf))
    return 0 if all(r.ok for r in nf.comparison.results) else 1


def cmd_run(a: argparse.Namespace) -> int:
    import tcbench as tc

    with Progress() as progress:
        r = tc.run(job_spec(a, a.backend), observer=progress)
    print_table(people([r.summary_row()], RUN_COLUMNS))
    for text in (f"noisy: {r.noise_reason}" if r.noisy else "", r.mfu_note,
                 f"error: {r.error.strip()[-1500:]}" if r.error else "",
                 f"artifacts: {r.artifacts}" if r.artifacts else ""):
        if text:
            print(text)
    return 0 if r.ok else 1


def _runs_table(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    df["backend"] = [lab or b for lab, b in zip(df["label"].fillna(""), df["backend"])]
    first = (lambda v: "?" if is_missing(v) or not v else str(v).split()[0])
    df["load"] = [f"{first(s)}→{first(e)}" for s, e in zip(df["load_start"], df["load_end"])]
    return people(df, RUNS_COLUMNS)


def _steps_table(run_id: int) -> pd.DataFrame:
    import tcbench as tc

    from tcbench.store.api import Store

    Store(create=False).run_row(run_id)   # a KeyError naming the id and the store when there is no such run
    df = tc.steps(run_id)
    df["step_ms"], df["cpu_ms"], df["peak_mem_mb"] = df["step_s"] * 1e3, df["cpu_s"] * 1e3, df["mem_bytes"] / 2**20
    return people(df, STEPS_COLUMNS)


def cmd_table(a: argparse.Namespace) -> int:
    import tcbench as tc

    tables = {"runs": lambda: _runs_table(tc.runs().tail(a.last)), "steps": lambda: _steps_table(a.run_id),
              "comparisons": lambda: tc.comparisons().tail(a.last), "models": tc.models, "backends": tc.backends,
              "profiles": lambda: (tc.profiles(sources=True) if a.sources else
                                   tc.profiles().drop(columns=["label"], errors="ignore"))}
    print_table(tables[a.command]())
    return 0


def cmd_report(a: argparse.Namespace) -> int:
    import tcbench as tc

    from tcbench.store.api import Store

    _check_writable(a.out, "--out")
    _write(a.out, "--out", tc.load_comparison(a.comparison_id, Store(create=False)).to_html())
    print(f"report written to {a.out}")
    return 0


def _add_round_options(p: argparse.ArgumentParser, adaptive: bool) -> None:
    """--rounds, --resolve and --budget-s, as compare()'s arguments (``adaptive``: the default is adaptive rounds)."""
    default = (f"default: until ±{DEFAULT_RESOLVE * 100:g} %% or {DEFAULT_BUDGET_S:g} s" if adaptive
               else f"default: {DEFAULT_ROUNDS} fixed rounds")
    p.add_argument("--rounds", type=int, default=None if adaptive else DEFAULT_ROUNDS,
                   help=f"alone: exactly this many alternating rounds (1: no run-to-run spread); with --resolve: the "
                        f"first stage ({default})")
    p.add_argument("--resolve", type=float, default=None,
                   help="add rounds until every speedup's 95 %% interval is within ± this share (0.05: ±5 %%)")
    p.add_argument("--budget-s", type=float, default=None,
                   help="with adaptive rounds: start no round that would end past this many seconds")


def _add_run_commands(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser("compare", help="run the eager baseline and compiled jobs, print the summary and verdicts")
    add_job_options(p)
    p.add_argument("--backends", default="eager,inductor",
                   help="comma-separated, e.g. eager,inductor,xla; eager is the baseline, eager,eager runs A/A")
    _add_round_options(p, adaptive=True)
    p.add_argument("--max-rounds", type=int, default=MAX_ROUNDS, help="adaptive rounds stop here at the latest")
    p.add_argument("--report", help="write a self-contained HTML report here")
    p.add_argument("--json", help="write the full summary and every step as JSON here")
    p.set_defaults(func=cmd_compare)
    p = sub.add_parser("compare-script", help="run your own training script natively and compiled (tcbench.track() "
                       "or tcbench.hf.TcbenchCallback inside): the same summary as compare",
                       usage="tcbench compare-script SCRIPT [options] [-- SCRIPT_ARGS ...]")
    p.add_argument("script", help="your training script (.py); its own arguments go after --")
    p.add_argument("--backends", default="eager,inductor", help="comma-separated; eager is the baseline")
    _add_round_options(p, adaptive=False)
    add_job_options(p, only=SCRIPT_FIELDS, help={
        "steps": "the steps each run is measured for (the script stops there)",
        "batch_size": "samples per step when the script does not report it",
        "seq_len": "tokens per sample when the script does not report it"})
    p.add_argument("--name", default=None, help="the name the runs are shown under (default: the script's file name)")
    p.add_argument("--report", help="write a self-contained HTML report here")
    p.add_argument("--json", help="write the full summary and every step as JSON here")
    p.set_defaults(func=cmd_compare_script, script_args=[])
    p = sub.add_parser("noise-floor", help="run a job against itself (A/A): the smallest speedup resolvable now")
    add_job_options(p)
    p.add_argument("--backend", default="eager", choices=BACKENDS)
    p.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS)
    p.set_defaults(func=cmd_noise_floor)
    p = sub.add_parser("run", help="run one job")
    add_job_options(p)
    p.add_argument("--backend", default="eager", choices=BACKENDS)
    p.set_defaults(func=cmd_run)


class _Parser(argparse.ArgumentParser):
    """argparse with a usage error in one line (``tcbench: …``, exit 2) like every other bad input."""

    def error(self, message: str) -> None:   # type: ignore[override]
        self.exit(2, f"tcbench: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="tcbench", description="native vs compiled training jobs, measured honestly")
    sub = ap.add_subparsers(dest="command", required=True)
    _add_run_commands(sub)
    for name in ("runs", "comparisons"):
        p = sub.add_parser(name, help=f"list stored {name}")
        p.add_argument("--last", type=whole_number, default=20, help="how many of the newest to show (default 20)")
        p.set_defaults(func=cmd_table)
    p = sub.add_parser("steps", help="one stored run's step records")
    p.add_argument("run_id", type=whole_number)
    p.set_defaults(func=cmd_table)
    for name in ("models", "backends"):
        sub.add_parser(name, help=f"list {name}").set_defaults(func=cmd_table)
    p = sub.add_parser("profiles", help="list instance profiles")
    p.add_argument("--sources", action="store_true", help="one row per figure: its value, source and date")
    p.set_defaults(func=cmd_table)
    p = sub.add_parser("report", help="write the HTML report of a stored comparison")
    p.add_argument("comparison_id", type=whole_number)
    p.add_argument("--out", default="report.html")
    p.set_defaults(func=cmd_report)
    from tcbench.host.doctor import cli as doctor_cli

    sub.add_parser("doctor", help="what is installed, what each backend needs, what is missing (and the pip "
                   "command)").set_defaults(func=doctor_cli)

    tuning.add_subcommands(sub)
    parallel.add_subcommands(sub)
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
    except (ValueError, StoreError) as exc:
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
