"""CLI subcommands that read (added by ``cli.app.build_parser``): ``runs``, ``comparisons``, ``steps``, ``show``,
``report`` (what is stored; they never create a store) and the catalogs ``models``, ``backends``, ``profiles``."""

from __future__ import annotations

import argparse
import json
from typing import Any

import pandas as pd

from tcbench.cli.common import (add_report_options, check_writable, command, plotlyjs_of, print_table, whole_number,
                                write_file)
from tcbench.cli.tables import (COMPARISONS_COLUMNS, RUNS_COLUMNS, STEPS_COLUMNS, people, print_comparison,
                                verdict_cell)
from tcbench.view.format import fmt_number, is_missing
from tcbench.store.api import Store

WIDTH = 120   # what `tcbench profiles` fits without --wide
# the comparisons `show` and `report` print (not tuning sessions): tune-compile's confirmation is one
SHOWN_KINDS = ("compare", "noise-floor", "tune-compile-confirm")
QUALITY_KIND = "time-to-quality"   # shown by its own study's table (tc.load_quality)
PROFILE_COLUMNS = {"name": "profile", "accelerator": "accelerator", "count": "count",
                   "memory_per_device_gib": "GiB/device", "vcpus": "vCPUs", "host_memory_gib": "host GiB",
                   "network_gbps": "net Gbps", "efa": "EFA", "peak_fp32_tflops": "fp32 TFLOP/s",
                   "peak_bf16_tflops": "bf16 TFLOP/s", "price_per_hour": "$/hour"}


def _reading_store() -> Any:
    return Store(create=False)   # a missing store is a named error (StoreMissing), nothing is made


def _runs_table(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    df["backend"] = [lab or b for lab, b in zip(df["label"].fillna(""), df["backend"])]

    def first(v: Any) -> str:
        return "?" if is_missing(v) or not v else str(v).split()[0]

    df["load"] = [f"{first(s)}→{first(e)}" for s, e in zip(df["load_start"], df["load_end"])]
    return people(df, RUNS_COLUMNS)


def cmd_runs(a: argparse.Namespace) -> int:
    import tcbench as tc

    print_table(_runs_table(tc.runs().tail(a.last)))
    return 0


def cmd_steps(a: argparse.Namespace) -> int:
    import tcbench as tc

    store = _reading_store()
    try:
        store.run_row(a.run_id)
    except KeyError:
        raise ValueError(f"run {a.run_id} is not in the store {store.path}; tcbench runs lists the stored "
                         "ones") from None
    df = tc.steps(a.run_id)
    df["step_ms"], df["cpu_ms"], df["peak_mem_mb"] = df["step_s"] * 1e3, df["cpu_s"] * 1e3, df["mem_bytes"] / 2**20
    print_table(people(df, STEPS_COLUMNS))
    return 0


def _verdicts(info_json: Any) -> str:
    """The verdict cell of a stored comparison, from the summary its row keeps (a noise floor: its A/A verdict)."""
    info = json.loads(info_json) if isinstance(info_json, str) and info_json else {}
    nf = info.get("noise_floor")
    if isinstance(nf, dict):
        return verdict_cell([{**nf, "label": f"{nf.get('backend')} A/A"}])
    return verdict_cell(info.get("summary") or [])


def cmd_comparisons(a: argparse.Namespace) -> int:
    df = _reading_store().comparisons().tail(a.last)
    df["created"] = pd.to_datetime(df["created"], unit="s")   # as `tcbench runs` shows it
    table = people(df, COMPARISONS_COLUMNS)
    if len(df):
        table.insert(2, "kind", list(df["kind"]))
        table["verdicts: speedup (95% CI)"] = [_verdicts(v) for v in df["info_json"]]
    print_table(table)
    return 0


def _load(comparison_id: int) -> Any:
    """The stored comparison, or a one-line error naming the id and how to list them."""
    import tcbench as tc

    store = _reading_store()
    try:
        cmp = tc.load_comparison(comparison_id, store)
    except KeyError:
        raise ValueError(f"comparison {comparison_id} is not in the store {store.path}; tcbench comparisons lists "
                         "the stored ones") from None
    if cmp.kind not in SHOWN_KINDS:
        raise ValueError(f"comparison {comparison_id} is a {cmp.kind} session, not a comparison; allowed: the id of a "
                         "compare, compare-script, noise-floor, tune-compile-confirm or time-to-quality (tcbench "
                         "comparisons lists them with their kind)")
    return cmp


def _quality(comparison_id: int) -> Any:
    """The stored time-to-quality study of this id, or None when the id is another kind's."""
    import tcbench as tc

    store = _reading_store()
    try:
        kind = store.comparison_row(comparison_id)["kind"]
    except KeyError:
        return None   # _load names the missing id
    return tc.load_quality(comparison_id, store) if kind == QUALITY_KIND else None


def cmd_show(a: argparse.Namespace) -> int:
    study = _quality(a.comparison_id)
    if study is not None:
        if a.json:
            print(json.dumps(dict(target=study.target, target_source=study.target_source,
                                  table=study.table().to_dict(orient="records"),
                                  runs=study.runs_table().to_dict(orient="records"), notes=study.notes),
                             indent=1, default=str))
        else:
            print_table(study.table())
            print(study.describe())
        return 0
    cmp = _load(a.comparison_id)
    if a.json:
        print(json.dumps(cmp.to_dict(), indent=1))
    else:
        print_comparison(cmp)
    return 0


def cmd_report(a: argparse.Namespace) -> int:
    check_writable(("--out", a.out), force=a.force)
    write_file(a.out, "--out", report=_quality(a.comparison_id) or _load(a.comparison_id), plotlyjs=plotlyjs_of(a))
    print(f"report written to {a.out}")
    return 0


def cmd_catalog(a: argparse.Namespace) -> int:
    import tcbench as tc

    table = {"models": tc.models, "backends": tc.backends}[a.command]()
    # the catalog's count is estimated from the dimensions (within 15 % of the built model: tc.build_model)
    print_table(table.rename(columns={"params": "≈ params"}))
    return 0


def _listed(dates: pd.Series) -> str:
    """``on 2024-05-01`` / ``in 2024`` (a year alone), or the dates joined when the prices were read on several."""
    found = sorted({str(d) for d in dates if not is_missing(d) and str(d)})
    return ", ".join(("on " if len(d) > 4 else "in ") + d for d in found) or "on an unrecorded date"


def _fit(df: pd.DataFrame, column: str, width: int = WIDTH) -> pd.DataFrame:
    """``df`` with ``column``'s text cut (…) so that a line of the table fits ``width`` characters."""
    df = df.astype(str)
    used = sum(max(len(c), int(df[c].str.len().max())) + 1 for c in df.columns if c != column)
    room = max(len(column), width - used - 1)
    df[column] = [s if len(s) <= room else s[:room - 1] + "…" for s in df[column]]
    return df


def cmd_profiles(a: argparse.Namespace) -> int:
    import tcbench as tc

    table = tc.profiles()
    if a.sources:
        rows = tc.profiles(sources=True)
        rows["value"] = [fmt_number(v) if isinstance(v, float) else ("–" if is_missing(v) else str(v))
                         for v in rows["value"]]
        print_table(rows if a.wide else _fit(rows, "source"))
    elif a.wide:
        print_table(table.drop(columns=["label"], errors="ignore"))
    else:
        short = table[list(PROFILE_COLUMNS)].rename(columns=PROFILE_COLUMNS)
        short["EFA"] = short["EFA"].map({True: "yes", False: "no"})
        print_table(short)
        print("more columns: --wide; where each figure comes from: --sources")
    regions = ", ".join(sorted({str(r) for r in table["region"] if not is_missing(r)}))
    print(f"prices: on-demand USD per instance-hour ({regions}), as listed {_listed(table['price_date'])}, verify "
          "before budgeting")
    return 0


def add_subcommands(sub: "argparse._SubParsersAction") -> None:
    """Add the reading commands to the ``tcbench`` parser's subcommands."""
    for name, func, what in (("runs", cmd_runs, "runs, newest last"),
                             ("comparisons", cmd_comparisons, "comparisons, their verdicts and speedups, newest last")):
        p = command(sub, name, f"list stored {what}", f"tcbench {name} --last 5",
                    "Reads the store ($TCBENCH_DB); never creates one.")
        p.add_argument("--last", type=whole_number, default=20, help="how many of the newest to show")
        p.set_defaults(func=func)
    p = command(sub, "steps", "one stored run's step records", "tcbench steps 12",
                "RUN_ID: the run column of tcbench runs.")
    p.add_argument("run_id", type=whole_number, help="the run's id")
    p.set_defaults(func=cmd_steps)
    p = command(sub, "show", "print a stored comparison as tcbench compare ended it: verdicts with their intervals, "
                "the summary table, what the compiler did", "tcbench show 3 --json > comparison.json")
    p.add_argument("comparison_id", type=whole_number, help="the comparison's id (tcbench comparisons lists them)")
    p.add_argument("--json", action="store_true", help="print it as JSON: verdicts with intervals, the summary rows, "
                                                       "spec, rounds and why they stopped")
    p.set_defaults(func=cmd_show)
    p = command(sub, "report", "write the HTML report of a stored comparison", "tcbench report 3 --out report.html",
                "By default plotly.min.js is written once beside the report (a small HTML file per comparison).")
    p.add_argument("comparison_id", type=whole_number, help="the comparison's id (tcbench comparisons lists them)")
    p.add_argument("--out", default="report.html", help="the HTML file to write")
    add_report_options(p, "report")
    p.set_defaults(func=cmd_report)
    for name in ("models", "backends"):
        command(sub, name, f"list {name}", f"tcbench {name}").set_defaults(func=cmd_catalog)
    p = command(sub, "profiles", "list instance profiles: accelerators, memory, peak TFLOP/s, prices",
                "tcbench profiles --sources --wide | grep ml.g5.2xlarge",
                f"Fits {WIDTH} columns; --wide shows every column.")
    p.add_argument("--sources", action="store_true", help="one row per figure: its value, source and date")
    p.add_argument("--wide", action="store_true", help=f"every column, whole sources (wider than {WIDTH})")
    p.set_defaults(func=cmd_profiles)
