"""What the commands print, shared: every table in people's names and units (``tcbench.view.format.COLUMNS``, the
report's too) and a comparison as ``tcbench compare`` ends and ``tcbench show`` prints it. Not a command: the command
modules import it, never each other."""

from __future__ import annotations

import dataclasses

from typing import Any, Mapping, Sequence

import pandas as pd

from tcbench.cli.common import print_table
from tcbench.job.diagnostics import lines as diagnose_lines
from tcbench.view.format import CLI_COLUMNS, MISSING, compile_phases_text, fmt_interval, is_missing

SINGLE_ROUND = "single round: no run-to-run spread"
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
COMPARISONS_COLUMNS = ["comparison_id", "created", "model", "size", "rounds", "status"]


def people(rows: pd.DataFrame | Sequence[Mapping[str, Any]], columns: Sequence[str]) -> pd.DataFrame:
    """``rows`` as text in people's names and units (``tcbench.view.format.COLUMNS``); absent columns are left out."""
    records = rows.to_dict("records") if isinstance(rows, pd.DataFrame) else list(rows)
    present = [CLI_COLUMNS[c] for c in columns if any(c in r for r in records)]
    return pd.DataFrame({c.heading: [c.cli_text(r) for r in records] for c in present},
                        columns=[c.heading for c in present])


def verdict_cell(rows: Sequence[Mapping[str, Any]]) -> str:
    """Each compared backend's verdict and speedup, short: ``inductor: faster 1.07× (1.02–1.12)``; "–" without any
    (a comparison stopped before its first pair, a tuning session)."""
    parts = []
    for row in rows:
        kind = row.get("verdict_kind")
        if kind == "baseline" or is_missing(kind):
            continue
        ratio = fmt_interval(row.get("speedup"), row.get("speedup_ci_low"), row.get("speedup_ci_high"), False)
        parts.append(f"{row.get('label') or row.get('backend')}: {kind}" + ("" if ratio == "–" else f" {ratio}"))
    return "; ".join(parts) or "–"


def print_comparison(cmp: Any) -> None:
    """The summary table, then per backend its verdict sentence, warnings, loss parity and error; MFU notes last."""
    summary, spec = cmp.summary(), cmp.spec
    job = (f"{spec.model} {spec.size}, batch {spec.batch_size}, seq {spec.seq_len}, {spec.precision}"
           if spec.script is None
           else f"your script {' '.join([spec.script, *spec.script_args])}, {spec.steps} steps "
                f"({spec.warmup_steps} warmup)")
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
        phases = compile_phases_text(dataclasses.asdict(row))
        if phases != MISSING or row.compile_cache:   # where the compile latency went, what each phase found cached
            shown = [phases] if phases != MISSING else []   # none: every job loaded its program (nothing traced)
            print("    compile: " + " ".join(shown + ([f"({row.compile_cache})"] if row.compile_cache else [])))
        for line in diagnose_lines(diagnosis, row.label):   # graph breaks, recompiles, ...: where and why
            print(f"    {line}")
        if row.mfu_note:
            notes.setdefault(row.mfu_note, []).append(row.label)
    for note, labels in notes.items():
        print(f"{', '.join(labels)}: {note}")
