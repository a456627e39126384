"""What every command group shares: the job options (derived from ``JobSpec``'s fields and defaults, grouped as the
help shows them), the help formatter, the backend list, the table printer and the translation of API words into the
command line's. Command modules import this one, never each other."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shutil
import sys
import typing
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from tcbench.core.spec import BACKENDS, CACHE_MODES, COMPILE_SCOPES, INDUCTOR_MODES, PADDINGS, PRECISIONS, JobSpec
from tcbench.job.backends import backend_class
from tcbench.host.paths import check_output

# the JobSpec fields a command never takes as an option: the backend is the command's own, the rest are API-only
NOT_OPTIONS = ("backend", "memory_budget_gb", "eval_batches", "eval_every", "stop_at_loss", "script", "script_args",
               "noise_micro_batches")
# the option whose name is not the field's
FLAGS = {"warmup_steps": "--warmup"}
CHOICES = {"precision": PRECISIONS, "padding": PADDINGS, "cache": CACHE_MODES, "compile_mode": INDUCTOR_MODES,
           "compile_scope": COMPILE_SCOPES}
# the help's option groups, in the order it shows them; every job option is in one (tests check it)
MODEL, TRAINING, COMPILER, MEASUREMENT, PARALLEL, OUTPUT = ("model", "training", "compiler", "measurement",
                                                           "data parallel", "storage and output")
GROUPS: dict[str, tuple[str, ...]] = {
    MODEL: ("model", "size", "dataset", "padding", "dropout"),
    TRAINING: ("batch_size", "seq_len", "steps", "warmup_steps", "lr", "seed", "precision", "loss_every"),
    COMPILER: ("compile_mode", "compile_scope", "compile_optimizer", "cpp_wrapper", "cache", "debug"),
    MEASUREMENT: ("threads", "profile", "stall_s", "timeout_s"),
    PARALLEL: ("nproc", "nnodes", "node_rank", "rdzv_endpoint"),
}
MULTI_NODE = ("nnodes", "node_rank", "rdzv_endpoint")
HELP = {
    "model": "catalog name (tcbench models), a local folder, or a factory package.module:function",
    "size": "tiny, small or base (a factory's own word for it)",
    "batch_size": "samples per step (per process with --nproc)",
    "seq_len": "tokens per sample",
    "steps": "optimizer steps per job, warmup included",
    "warmup_steps": "warmup steps, reported apart",
    "lr": "learning rate (AdamW)",
    "seed": "seed of the weights and the data order (0..2**32-1)",
    "precision": "fp32, or bf16/fp16 autocast",
    "padding": "max_length: every batch padded to --seq-len (one shape); longest/bucket: shapes change",
    "dataset": "'builtin', a .csv/.jsonl file with text,label columns, or a batch factory package.module:function",
    "compile_mode": "torch.compile's mode (inductor only)",
    "loss_every": "read the loss on the host every k steps only (each read is a device sync)",
    "dropout": "dropout probability; 0 for a tight loss-parity check",
    "threads": "CPU threads per job (1 measures most steadily)",
    "compile_scope": "Inductor: model compiles the whole model; blocks compiles its repeated transformer block once "
                     "(regional compilation); step compiles the whole training step",
    "compile_optimizer": "Inductor: compile optimizer.step too (foreach AdamW); without it the optimizer stays eager "
                         "(fused AdamW, as HF Trainer runs it), the model alone compiled",
    "cpp_wrapper": "Inductor: C++ instead of Python around the generated kernels (longer compile, less per-step "
                   "overhead)",
    "cache": "shared: reuse the compile cache; cold: compile from scratch each job; artifacts: a fresh cache with "
             "the stored compile artifacts of this job's key loaded first",
    "profile": "instance profile (tcbench profiles) whose memory budget applies",
    "debug": "keep the compiler's own report in the run's artifacts",
    "stall_s": "stop a job that reports nothing for max(this, 20 x its median step) seconds",
    "timeout_s": "cap on one job's wall-clock seconds",
    "nproc": "data-parallel processes on this machine (torchrun + DDP; --batch-size is per process)",
    "nnodes": "machines of the job: run the same command on each, with its own --node-rank",
    "node_rank": "this machine's place among --nnodes (0 … nnodes-1)",
    "rdzv_endpoint": "host:port of node 0's rendezvous (with --nnodes > 1)",
}
# what a field's None default means, said in the help instead of "None"
NONE_MEANS = {"dropout": "the architecture's own", "threads": "every core this process may use",
              "timeout_s": "no cap", "rdzv_endpoint": "none, one machine"}


class Formatter(argparse.RawDescriptionHelpFormatter):
    """The description and example keep their lines; every option's help ends with its default (an option whose
    help already says it, a flag that is off, or one without a default value is left as it is)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if ("default" in text or not action.option_strings or action.default in (None, False, argparse.SUPPRESS)
                or action.required):
            return text
        return f"{text} (default: %(default)s)"


def command(sub: "argparse._SubParsersAction", name: str, help: str, example: str, about: str = "",
            **kwargs: Any) -> argparse.ArgumentParser:
    """A subcommand with its one-line ``help``, a description (``help`` then ``about``) and an example."""
    text = help[0].upper() + help[1:] + "." + (f"\n\n{about}" if about else "")
    p = sub.add_parser(name, help=help, description=text, epilog=f"example:\n  {example}",
                       formatter_class=Formatter, **kwargs)
    for title in (*GROUPS, OUTPUT):   # in this order; the help leaves out the ones a command does not use
        p.add_argument_group(title)
    return p


def group(p: argparse.ArgumentParser, title: str) -> Any:
    """The option group ``title`` of ``p``, made the first time it is asked for (the help shows it in that order)."""
    for g in p._action_groups:
        if g.title == title:
            return g
    return p.add_argument_group(title)


def job_fields() -> list[dataclasses.Field]:
    """The JobSpec fields that are command-line options, in JobSpec's order."""
    return [f for f in dataclasses.fields(JobSpec) if f.name not in NOT_OPTIONS]


def flag(name: str) -> str:
    """The option of a JobSpec field: ``--batch-size`` for ``batch_size``."""
    return FLAGS.get(name, "--" + name.replace("_", "-"))


def _dest(name: str) -> str:
    return flag(name)[2:].replace("-", "_")


def _default_text(name: str, default: Any) -> str:
    if default is None:
        return f"default: {NONE_MEANS[name]}"
    return "" if default is False else f"default: {default}"


def add_job_options(p: argparse.ArgumentParser, only: Sequence[str] | None = None,
                    help: dict[str, str] | None = None, leave_out: Sequence[str] = ()) -> None:
    """One option per JobSpec field (``only``: those fields; ``leave_out``: not these), its type and default taken
    from JobSpec, in the help's groups (``GROUPS``)."""
    hints = typing.get_type_hints(JobSpec)
    where = {name: title for title, names in GROUPS.items() for name in names}
    for f in job_fields():
        if (only is not None and f.name not in only) or f.name in leave_out:
            continue
        g = group(p, where[f.name])
        kind = hints[f.name]
        default = _default_text(f.name, f.default)
        text = (help or {}).get(f.name, HELP.get(f.name, "")) + (f" ({default})" if default else "")
        if kind is bool:   # a default of True is turned off with --no-<flag>
            g.add_argument(flag(f.name), action=argparse.BooleanOptionalAction if f.default else "store_true",
                           default=f.default, help=text)
            continue
        base = next((t for t in typing.get_args(kind) if t is not type(None)), kind)   # int | None -> int
        g.add_argument(flag(f.name), type=base, default=f.default, choices=CHOICES.get(f.name),
                       help=text.replace("%", "%%"))


def job_fields_of(a: argparse.Namespace) -> dict[str, Any]:
    """The JobSpec fields the parsed options name (those the command took)."""
    return {f.name: getattr(a, _dest(f.name)) for f in job_fields() if hasattr(a, _dest(f.name))}


def job_spec(a: argparse.Namespace, backend: str = "eager") -> JobSpec:
    """The JobSpec of the parsed job options, with ``backend``."""
    return JobSpec(backend=backend, **job_fields_of(a))


INDUCTOR_ONLY = ("compile_mode", "compile_scope", "compile_optimizer", "cpp_wrapper")


def check_compiler_options(a: argparse.Namespace, backends: Sequence[str]) -> None:
    """An Inductor setting given where no job runs Inductor (``run --backend eager --cpp-wrapper``) would be silently
    ignored: it is a named error instead, before any job starts."""
    if any(backend_class(b).inductor_settings for b in backends):
        return
    defaults = {f.name: f.default for f in dataclasses.fields(JobSpec)}
    fields = job_fields_of(a)
    given = [name for name in INDUCTOR_ONLY if name in fields and fields[name] != defaults[name]]
    if fields.get("cache") == "artifacts":
        given.append("cache")
    if given:
        words = option_words_of(a)

        def shown(name: str) -> str:
            flag, value = words.get(name, "--" + name.replace("_", "-")), fields[name]
            base = flag[5:] if flag.startswith("--no-") else flag[2:]
            return f"--{base}" if value is True else f"--no-{base}" if value is False else f"{flag} {value}"
        what = "an Inductor setting" if len(given) == 1 else "Inductor settings"
        raise ValueError(f"{', '.join(map(shown, given))}: {what}, and no job here runs Inductor (backends: "
                         f"{', '.join(backends)}); allowed: the inductor backend, or leave them out")


def option_words_of(a: argparse.Namespace) -> dict[str, str]:
    return getattr(a, "cli_words", {}) or {}


def add_report_options(p: argparse.ArgumentParser, title: str = OUTPUT) -> None:
    """``--cdn`` / ``--self-contained``: where the HTML report's plotly.js comes from (``plotlyjs_of``); ``--force``:
    an output file may replace an existing file that tcbench did not write."""
    group(p, title).add_argument("--force", action="store_true",
                                 help="replace an output file that exists and was not written by tcbench (default: "
                                      "refused; a report or export tcbench wrote is replaced without it)")
    g = group(p, title).add_mutually_exclusive_group()
    g.add_argument("--cdn", action="store_true", help="load plotly.js from its CDN (a small file that needs the "
                                                      "internet to draw; default: plotly.min.js written beside it)")
    g.add_argument("--self-contained", action="store_true", help="inline plotly.js: one file that opens anywhere "
                                                                 "(about 5 MB)")


def plotlyjs_of(a: argparse.Namespace) -> str:
    """``Comparison.to_html``'s ``plotlyjs``: "directory" (the default), "cdn" or "inline"."""
    return "cdn" if a.cdn else "inline" if a.self_contained else "directory"


def check_writable(*outputs: tuple[str, str | None], force: bool = False) -> None:
    """Fail before a long run, not after it: each ``(flag, path)`` given must name a file tcbench can write (its
    folder exists and is a folder, it is not a folder itself, the folder takes a new file or the file takes writing),
    no two flags may name the same file (the second would overwrite the first), none may name the store or another
    SQLite database however it is written, and none an existing file tcbench did not write unless ``force``
    (``--force``; ``tcbench.host.paths.check_output``, which the API's writers share)."""
    seen: dict[Path, str] = {}
    for flag, path in outputs:
        if path is None:
            continue
        p = Path(path).expanduser()
        if not str(path).strip():
            raise ValueError(f"{flag} {path!r}: cannot write it (an empty path)")
        if p.is_dir():
            raise ValueError(f"{flag} {path}: cannot write it (it is a folder)")
        for parent in p.parents:
            if parent.exists() and not parent.is_dir():
                raise ValueError(f"{flag} {path}: cannot write it ({parent} is a file, not a folder)")
        if not p.parent.is_dir():
            raise ValueError(f"{flag} {path}: cannot write it (the folder {p.parent} does not exist)")
        key = p.resolve()
        if key in seen:
            raise ValueError(f"{flag} {path}: cannot write it ({seen[key]} names the same file; give each its own)")
        seen[key] = flag
        check_output(p, flag, force=force)
        why = _unwritable(p)
        if why:
            raise ValueError(f"{flag} {path}: cannot write it ({why})")


def _unwritable(p: Path) -> str | None:
    """Why ``p`` cannot be written, tried without changing anything of the user's: an existing file is opened for
    appending (and left as it was), a new one is tried as a temporary file beside it (and removed)."""
    import tempfile

    try:
        if p.exists():
            with open(p, "ab"):
                pass
        else:
            fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".tcbench-write-check-")
            os.close(fd)
            os.unlink(tmp)
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def write_file(path: str, flag: str, text: str | None = None, report: Any = None, plotlyjs: str = "directory") -> None:
    """Write ``text``, or the HTML report of the comparison ``report`` (``Comparison.to_html``), to ``path``; a path
    that cannot be written is a one-line error naming it and why."""
    target = Path(path).expanduser()
    try:
        if report is not None:
            report.to_html(str(target), plotlyjs=plotlyjs)
        else:
            target.write_text(text or "", encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"{flag} {path}: cannot write it ({exc.strerror or exc})") from None


def backend_list(text: str) -> list[str]:
    """The comma-separated backend names, in order, duplicates kept (``eager,eager`` is an A/A run)."""
    names = [b.strip() for b in text.split(",") if b.strip()]
    bad = [b for b in names if b not in BACKENDS]
    if bad or not names:
        raise ValueError(f"--backends {text!r}: unknown {bad}; allowed: {', '.join(BACKENDS)} (comma-separated)")
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


# -- API words to CLI words -------------------------------------------------------------------------------------
API_NAMES = {"tcbench.profiles()": "tcbench profiles", "tcbench.models()": "tcbench models",
             "tc.profiles()": "tcbench profiles"}


def option_words(p: argparse.ArgumentParser) -> dict[str, str]:
    """The API words of ``p``'s options and the options themselves: ``{"warmup_steps": "--warmup",
    "budget_s": "--budget-s", ...}`` (a JobSpec field by its field name, every other option by its dest)."""
    options = {a.dest: a.option_strings[-1] for a in p._actions if a.option_strings and a.dest != "help"}
    words = {f.name: flag(f.name) for f in job_fields() if options.get(_dest(f.name)) == flag(f.name)}
    return {**options, **words}


def cli_words(text: str, words: Mapping[str, str]) -> str:
    """An API message in the command line's words: ``threads=0 … it must be None or a whole number`` becomes
    ``--threads 0 … it must be omitted or a whole number``; ``tcbench.profiles()`` becomes ``tcbench profiles``. Only
    the options the command has are renamed (an API-only field keeps its name)."""
    for api, cli in API_NAMES.items():
        text = text.replace(api, cli)
    for name in sorted(words, key=len, reverse=True):
        text = re.sub(rf"(?<![\w.-]){re.escape(name)}=", f"{words[name]} ", text)
    return re.sub(r"\bNone or ", "omitted or ", text)


# -- tables -----------------------------------------------------------------------------------------------------
def _float(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"


def print_table(df: pd.DataFrame) -> None:
    """A table on stdout, floats to 4 significant digits; wrapped to the terminal's width when stdout is
    one, whole lines in pipes."""
    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else None
    with pd.option_context("display.max_columns", 60, "display.max_colwidth", 60):
        print(df.to_string(index=False, line_width=width, float_format=_float, na_rep="–") if len(df) else "(none)")
