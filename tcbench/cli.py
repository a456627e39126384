"""The ``tcbench`` command line: compare, run, history, catalogs, max batch and learning-rate retuning."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

import pandas as pd

from ._spec import BACKENDS, PADDINGS, PRECISIONS, JobSpec


def _spec_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="bert-base-cased", help="catalog name (tcbench models) or a local folder")
    p.add_argument("--size", default="tiny", help="tiny, small or base")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5, help="warmup steps, reported apart")
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--precision", default="fp32", choices=PRECISIONS)
    p.add_argument("--padding", default="max_length", choices=PADDINGS)
    p.add_argument("--dataset", default="builtin", help="'builtin' or a .csv/.jsonl file with text,label columns")
    p.add_argument("--profile", default="this-machine", help="instance profile (tcbench profiles)")
    p.add_argument("--compile-mode", default="default")
    p.add_argument("--loss-every", type=int, default=1)
    p.add_argument("--dropout", type=float, default=None)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--cache", default="shared", choices=["shared", "cold"])
    p.add_argument("--debug", action="store_true", help="keep the compiler's own report in the run's artifacts")


def _spec(a: argparse.Namespace, backend: str = "eager") -> JobSpec:
    return JobSpec(model=a.model, size=a.size, backend=backend, batch_size=a.batch_size, seq_len=a.seq_len,
                   steps=a.steps, warmup_steps=a.warmup, lr=a.lr, seed=a.seed, precision=a.precision,
                   padding=a.padding, dataset=a.dataset, profile=a.profile, compile_mode=a.compile_mode,
                   loss_every=a.loss_every, dropout=a.dropout, threads=a.threads, cache=a.cache, debug=a.debug)


def _backends(text: str) -> list[str]:
    names = [b.strip() for b in text.split(",") if b.strip()]
    bad = [b for b in names if b not in BACKENDS]
    if bad or not names:
        raise SystemExit(f"--backends={text!r}: unknown {bad}; allowed: {', '.join(BACKENDS)} (comma-separated)")
    return names


def _print(df: pd.DataFrame) -> None:
    with pd.option_context("display.max_columns", 40, "display.width", 200, "display.max_colwidth", 60):
        print(df.to_string(index=False))


def _log(event: dict) -> None:
    if event["type"] == "log":
        print(event["line"], flush=True)
    elif event["type"] == "start":
        print(f"[tcbench] job {event['job']} (run {event['run_id']}) started", flush=True)
    elif event["type"] == "end":
        r = event["result"]
        fig = "" if r.median_step_s is None else f", median step {r.median_step_s * 1e3:.1f} ms"
        print(f"[tcbench] job {event['job']} ended: {r.status}{fig} {r.error[:200]}", flush=True)


def cmd_compare(a: argparse.Namespace) -> int:
    import tcbench as tc

    names = _backends(a.backends)
    native = names[0] if names[0] == "eager" else "eager"
    cmp = tc.compare(_spec(a, native), backends=[b for b in names if b != native], rounds=a.rounds, observer=_log)
    summary = cmp.summary()
    _print(summary.drop(columns=["warnings", "error"]))
    for _, row in summary.iterrows():
        print(f"- {row['backend']}: {row['verdict']}")
        for w in row["warnings"]:
            print(f"    warning: {w}")
    if a.report:
        cmp.to_html(a.report)
        print(f"report written to {a.report}")
    if a.json:
        with open(a.json, "w") as f:
            f.write(cmp.to_json())
        print(f"JSON written to {a.json}")
    return 0 if all(r.ok for r in cmp.results) else 1


def cmd_run(a: argparse.Namespace) -> int:
    import tcbench as tc

    r = tc.run(_spec(a, a.backend), observer=_log)
    _print(pd.DataFrame([r.summary_row()]))
    return 0 if r.ok else 1


def cmd_table(a: argparse.Namespace) -> int:
    import tcbench as tc

    if a.command == "runs":
        _print(tc.runs().tail(a.last))
    elif a.command == "steps":
        _print(tc.steps(a.run_id))
    elif a.command == "comparisons":
        _print(tc.comparisons().tail(a.last))
    elif a.command == "models":
        _print(tc.models())
    elif a.command == "backends":
        _print(tc.backends())
    elif a.command == "profiles":
        _print(tc.profiles().drop(columns=["label"], errors="ignore"))
    return 0


def cmd_report(a: argparse.Namespace) -> int:
    import tcbench as tc

    tc.load_comparison(a.comparison_id).to_html(a.out)
    print(f"report written to {a.out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="tcbench", description="native vs compiled training jobs, measured honestly")
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("compare", help="run native and compiled jobs and print the summary")
    _spec_args(p)
    p.add_argument("--backends", default="eager,inductor", help="comma-separated, e.g. eager,inductor,xla")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--report", help="write a self-contained HTML report here")
    p.add_argument("--json", help="write the summary and steps as JSON here")
    p.set_defaults(func=cmd_compare)
    p = sub.add_parser("run", help="run one job")
    _spec_args(p)
    p.add_argument("--backend", default="eager", choices=BACKENDS)
    p.set_defaults(func=cmd_run)
    for name in ("runs", "comparisons"):
        p = sub.add_parser(name, help=f"list stored {name}")
        p.add_argument("--last", type=int, default=20)
        p.set_defaults(func=cmd_table)
    p = sub.add_parser("steps", help="one stored run's step records")
    p.add_argument("run_id", type=int)
    p.set_defaults(func=cmd_table)
    for name in ("models", "backends", "profiles"):
        sub.add_parser(name, help=f"list {name}").set_defaults(func=cmd_table)
    p = sub.add_parser("report", help="write the HTML report of a stored comparison")
    p.add_argument("comparison_id", type=int)
    p.add_argument("--out", default="report.html")
    p.set_defaults(func=cmd_report)
    from ._cli_tuning import add_subcommands

    add_subcommands(sub)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    try:
        return a.func(a)
    except ValueError as exc:
        print(f"tcbench: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
