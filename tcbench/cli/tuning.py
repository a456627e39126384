"""CLI subcommands ``tcbench max-batch``, ``noise-scale``, ``predict-lr``, ``retune-lr``, ``tune-worker``,
``tune-compile``, ``time-to-quality`` and ``dashboard`` (added by ``cli.app.build_parser``)."""

from __future__ import annotations

import argparse
import math
import re
import sys

from tcbench.cli.common import (COMPILER, GROUPS, MULTI_NODE, add_job_options, add_report_options, backend_list,
                                check_writable, command, job_spec, plotlyjs_of, print_table, whole_number, write_file)
from tcbench.core.errors import StoreError
from tcbench.core.events import BatchProbed, CompileTrialEnded, Event, LrPredicted, TrialEnded
from tcbench.tuning.batch.search import find_max_batch
from tcbench.tuning.lr.retune import retune_lr
from tcbench.tuning.compile_search.search import FIELDS, PRUNERS, SAMPLERS, tune_compile
from tcbench.tuning.compile_search.space import narrow
from tcbench.core.spec import SEED_MAX, SpecError, check_number
from tcbench.store.api import default_path
from tcbench.store.postgres import mask
from tcbench.tuning.lr.workers import SHARED, tune_worker
from tcbench.tuning.dashboard import DashboardMissing, dashboard
from tcbench.tuning.lr.noise import noise_scale
from tcbench.tuning.lr.prediction import predict_lr

COMPILER_FIELDS = GROUPS[COMPILER]   # an eager job's: not offered where the job is always eager


def _progress(event: Event) -> None:
    if isinstance(event, BatchProbed):
        mark = "fits" if event.fits else f"does not fit ({event.reason[:120]})"
        mem = "" if event.peak_mem_mb is None else f", peak {event.peak_mem_mb:.0f} MiB"
        print(f"[tcbench] {event.backend} batch {event.batch_size}: {mark}{mem}", flush=True)
    elif isinstance(event, TrialEnded):
        tail = "pruned" if event.pruned else event.status
        loss = "" if event.eval_loss is None else f", held-out loss {event.eval_loss:.4f}"
        print(f"[tcbench] trial {event.number} lr={event.lr:.3g}: {tail}{loss}", flush=True)
    elif isinstance(event, LrPredicted):
        print(f"[tcbench] prediction: {event.text}", flush=True)
    elif isinstance(event, CompileTrialEnded):
        print(f"[tcbench] trial {event.number} {event.label}: {event.status}", flush=True)


def _failed(exc: RuntimeError) -> int:
    """A job or worker that failed: its reason on one line, exit 1. A StoreError (a RuntimeError too) is the user's
    to fix: raised again, for ``main``'s one line on stderr and exit 2."""
    if isinstance(exc, StoreError):
        raise exc
    print(f"error: {exc}")
    return 1


def cmd_max_batch(a: argparse.Namespace) -> int:
    names = backend_list(a.backends)
    res = find_max_batch(job_spec(a, names[0]), profile=a.profile, backends=names, start=a.start,
                            max_batch=a.max_batch, probe_steps=a.probe_steps, multiple_of=a.multiple_of,
                            observer=_progress, memory_budget_gb=a.budget_gb, storage=a.storage,
                            study_name=a.study_name)
    print(f"profile {res.profile}, memory budget {res.budget_gb:g} GiB")
    if res.study_name:
        reused = int(res.probes().reused.sum())
        print(f"study {res.study_name!r} in {res.storage}: {reused} of {len(res.probe_rows)} probe(s) answered from it")
    print_table(res.table())
    if a.probes:
        print_table(res.probes())
    return 0 if all(v for v in res.max_batch.values()) else 1


def cmd_retune_lr(a: argparse.Namespace) -> int:
    if a.workers > 1:
        _shared_storage(a.storage, "--workers > 1")
    try:
        res = retune_lr(job_spec(a, a.backend), new_batch_size=a.new_batch_size, nproc=a.new_nproc, n_trials=a.trials,
                        storage=a.storage, study_name=a.study_name, sampler=a.sampler, steps=a.tune_steps,
                        eval_batches=a.eval_batches, search_factor=a.search_factor, seed=a.seed, pruner=a.pruner,
                        observer=_progress, budget=a.budget, noise=not a.no_prediction, optimizer=a.optimizer,
                        seeds=a.seeds, finalists=a.finalists, n_workers=a.workers, check_premise=a.check_premise)
    except RuntimeError as exc:   # its workers failed: why, in one line each
        return _failed(exc)
    if res.prediction is None and not a.no_prediction:
        print(f"note: no noise-scale prediction: {res.prediction_note}")
    print_table(res.summary())
    print(res.describe())
    print(f"trials {len(res.trials)} (pruned {res.n_pruned}, failed {res.n_failed}; sampler {res.sampler}), wall "
          f"{res.wall_s:.0f} s, steps run {res.total_steps} vs a plain grid's {res.grid_steps}")
    if not res.finalists.empty:
        print_table(res.finalists[["number", "lr", "rule", "seeds", "mean", "se"]])
    if a.trials_table:
        print_table(res.trials)
    if a.storage:   # res.storage shows the URL with its password as ***
        hint = "; put the password back in place of ***" if "***" in res.storage else ""
        print(f"study {res.study_name!r} in {res.storage} (tcbench dashboard --storage '{res.storage}' opens it in "
              f"optuna-dashboard{hint})")
    return 0 if res.best_lr is not None else 1


def cmd_tune_compile(a: argparse.Namespace) -> int:
    import json

    # the API calls it seed; here --seed is the job's, so the sampler's is checked under its own flag first
    check_number("sampler_seed", a.sampler_seed, 0, SEED_MAX, whole=True)
    try:
        res = tune_compile(job_spec(a, "eager"), budget_s=a.budget_s, n_trials=a.trials, space=space_of(a.space),
                           storage=a.storage, study_name=a.study_name, sampler=a.sampler, pruner=a.pruner,
                           seed=a.sampler_seed, confirm=not a.no_confirm, confirm_budget_s=a.confirm_budget_s,
                           resolve=a.resolve, parity_rtol=a.parity_rtol, observer=None if a.json else _progress)
    except SpecError as exc:   # space['compile_scope'] contains 'blocks', which … → --space compile_scope contains …
        if exc.field != "space":
            raise
        raise ValueError(_space_words(str(exc))) from None
    if a.json:
        print(json.dumps(res.to_dict(), default=str, indent=1))
        return 0 if res.best is not None else 1
    columns = ["number", "label", "state", "median_step_ms", "step_iqr_ms", "compile_s", "parity", "reason"]
    table = res.table()
    print_table(table[columns] if a.trials_table else table[columns].head(8))
    answer = res.answer()
    if res.stop_reason.removeprefix("budget: ") not in answer:   # a search that measured nothing says why once
        print(f"search: {res.stop_reason}")
    for note in res.notes:
        print(f"note: {note}")
    print(answer)
    if res.confirmation is not None:
        print(f"confirmation: tcbench show {res.confirmation.comparison_id} "
              f"(tcbench report {res.confirmation.comparison_id} for its charts)")
    if a.storage:
        hint = "; put the password back in place of ***" if "***" in (res.storage or "") else ""
        print(f"study {res.study_name!r} in {res.storage}: the same command resumes it (tcbench dashboard --storage "
              f"'{res.storage}' opens it{hint})")
    return 0 if res.best is not None else 1


def space_of(given: list[tuple[str, list]] | None) -> dict[str, list] | None:
    """The ``--space`` options as tune_compile's ``space``; a field given twice is refused (its choices go in one
    option), never silently the last."""

    out: dict[str, list] = {}
    for name, choices in given or []:
        if name in out:
            both = ",".join(map(str, out[name] + choices)).lower()
            raise ValueError(f"--space {name} is given twice ({','.join(map(str, out[name]))} and "
                             f"{','.join(map(str, choices))}); allowed: each field once, its choices together: "
                             f"--space {name}={both}")
        out[name] = choices
    try:
        narrow({}, out)
    except ValueError as exc:   # space['precision'] contains 'fp8' → --space precision contains 'fp8'
        raise ValueError(_space_words(str(exc))) from None
    return out or None


def _space_words(text: str) -> str:
    """tune_compile's ``space['precision']`` in the command line's words: ``--space precision``."""
    return re.sub(r"space\[('?)(\w+)\1\]", r"--space \2", text)


def space_choice(text: str) -> tuple[str, list]:
    """An argparse ``type`` for ``--space FIELD=V1,V2``: (field, choices), booleans read from true/false."""

    name, sep, values = text.partition("=")
    name = name.strip().replace("-", "_")
    if not sep or name not in FIELDS or not values.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed; allowed: FIELD=V1,V2 with FIELD one of "
                                         f"{', '.join(FIELDS)} (e.g. precision=fp32,bf16)")
    choices: list = [v.strip() for v in values.split(",") if v.strip()]
    if name in ("compile_optimizer", "cpp_wrapper"):
        words = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
        if any(c.lower() not in words for c in choices):
            raise argparse.ArgumentTypeError(f"{text!r} is not allowed; allowed for {name}: true, false")
        choices = [words[c.lower()] for c in choices]
    return name, choices


def _shared_storage(storage: str | None, what: str) -> None:
    """Refuse a ``--storage`` that workers cannot share before anything is opened: opening an SQLite URL creates its
    file, so a refused command would leave one behind. Only PostgreSQL is shared (``tuning.workers.check_workers``)."""

    if storage is None:
        raise SpecError("storage", None, SHARED, f"{what} needs a --storage: a study kept in memory is not shared "
                                                 f"between worker processes; allowed: {SHARED}")
    text = str(default_path()) if storage == "store" else storage
    if text.split("://", 1)[0].split("+", 1)[0].lower() not in ("postgresql", "postgres") or "://" not in text:
        shown = mask(text)
        raise SpecError("storage", shown, SHARED, f"--storage {shown!r} is not allowed with {what}: only PostgreSQL "
                                                  f"shares a study between worker processes; allowed: {SHARED}")


def cmd_tune_worker(a: argparse.Namespace) -> int:
    _shared_storage(a.storage, "tune-worker")   # before the storage (and tcbench's store) is opened
    try:
        trials = tune_worker(a.study, a.storage, n_workers=a.workers, observer=_progress)
    except RuntimeError as exc:
        return _failed(exc)
    complete = trials[trials["state"] == "COMPLETE"].sort_values("value")
    best = ("" if complete.empty else
            f"; lowest held-out loss {complete['value'].iloc[0]:.4f} at lr {complete['lr'].iloc[0]:.3g}")
    print(f"study {a.study!r}: {len(trials)} trials ({len(complete)} complete){best}; retune-lr with the same "
          "--study-name and --storage gives the full result")
    return 0


def cmd_dashboard(a: argparse.Namespace) -> int:
    try:
        dashboard(a.storage, host=a.host, port=a.port)   # until Ctrl-C
    except DashboardMissing as exc:   # the extra is not installed: one line, like the other errors a user fixes
        print(f"tcbench: {exc}", file=sys.stderr)
        return 2
    return 0


def cmd_noise_scale(a: argparse.Namespace) -> int:
    try:
        ns = noise_scale(job_spec(a, "eager"), micro_batches=a.micro_batches)
    except RuntimeError as exc:   # the job failed: its reason, in one line (the run is stored)
        return _failed(exc)
    print(ns.describe())
    print(f"run {ns.run_id}: tr(Σ) ≈ {ns.tr_sigma:.4g}, |G|² ≈ {ns.g2:.4g} (tcbench predict-lr uses it for this job)")
    return 0


def cmd_predict_lr(a: argparse.Namespace) -> int:
    try:
        p = predict_lr(job_spec(a, "eager"), a.new_batch_size, optimizer=a.optimizer, micro_batches=a.micro_batches,
                       nproc=a.new_nproc, check_premise=a.check_premise)
    except RuntimeError as exc:
        return _failed(exc)
    print_table(p.table())
    print(p.describe())
    print(p.advice())
    return 0


def cmd_time_to_quality(a: argparse.Namespace) -> int:
    import tcbench as tc

    from tcbench.cli.progress import Progress

    check_writable(("--report", a.report), force=a.force)
    opts = tc.QualityOptions(seeds=a.seeds, target_loss=a.target_loss, eval_batches=a.eval_batches,
                             eval_every_samples=a.eval_every_samples, budget=a.budget, big_batch=a.big_batch,
                             max_batch=a.max_batch, retune=a.retune, check_premise=not a.no_premise_check,
                             resume=not a.no_resume, horizon_steps=a.horizon_steps)
    with Progress(rounds=a.seeds) as progress:
        def observe(event: Event) -> None:
            progress(event)
            _progress(event)
        res = tc.time_to_quality(job_spec(a, "eager"), options=opts, observer=observe)
    print_table(res.table()[[c for c in TTQ_COLUMNS if c in res.table().columns]])
    print(res.describe())
    if a.runs:
        print_table(res.runs_table())
    if a.report:
        write_file(a.report, "--report", report=res, plotlyjs=plotlyjs_of(a))
        print(f"report written to {a.report}")
    print(f"stored as comparison {res.comparison_id} (tcbench show {res.comparison_id})")
    return 0 if math.isfinite(res.target) else 1


TTQ_COLUMNS = ("candidate", "batch_size", "lr", "time_to_target_s", "time_low", "time_high", "usd_to_target",
               "samples_to_target", "speedup", "speedup_low", "speedup_high", "samples_ratio", "samples_ratio_low",
               "samples_ratio_high", "not_converged")


def _add_time_to_quality(sub: "argparse._SubParsersAction") -> None:
    p = command(sub, "time-to-quality", "does compiling reach a held-out target loss sooner and cheaper (seeds)",
                "tcbench time-to-quality --model gpt2 --size tiny --batch-size 8 --steps 40 --seeds 5",
                "The native job (the reference) and the candidates (compiled at the same batch; compiled at a bigger "
                "batch with its predicted learning rate; native at that batch) train over several seeds, evaluated "
                "on the same held-out batches every so many samples; each is scored by MLPerf's rule (time to the "
                "target: drop the fastest and slowest run, average the rest) and against the reference per seed. "
                "The target is the reference's median held-out loss at its --steps unless --target-loss is given.")
    add_job_options(p, leave_out=MULTI_NODE)
    add_report_options(p)
    p.add_argument("--seeds", type=int, default=5, help="runs per candidate (3 at least)")
    p.add_argument("--target-loss", type=float, default=None, help="the held-out loss to reach (default: the "
                   "reference's median at its --steps)")
    p.add_argument("--eval-batches", type=int, default=8, help="held-out batches of each evaluation")
    p.add_argument("--eval-every-samples", type=int, default=None,
                   help="samples between evaluations (default: about a tenth of the reference's)")
    p.add_argument("--budget", type=float, default=3.0, help="each run's most samples, in reference runs")
    p.add_argument("--big-batch", type=int, default=None,
                   help="the bigger batch B1 (default: the largest find-max-batch fits under --profile; on this "
                        "machine, --max-batch)")
    p.add_argument("--max-batch", type=int, default=None, help="the most B1 may be (default: 4 × --batch-size)")
    p.add_argument("--retune", action="store_true", help="also a candidate at B1 with retune-lr's learning rate")
    p.add_argument("--no-premise-check", action="store_true",
                   help="predict B1's learning rate without checking the starting one first")
    p.add_argument("--no-resume", action="store_true",
                   help="run every seed again even where an interrupted study with these settings finished some")
    p.add_argument("--horizon-steps", type=int, default=None,
                   help="the reference steps you train for: each candidate's time projected there from its compile, "
                        "throughput and samples ratio, with the break-even horizon (default: not projected)")
    p.add_argument("--runs", action="store_true", help="also print every run")
    p.add_argument("--report", default=None, help="also write the study's HTML report to this file (default: none)")
    p.set_defaults(func=cmd_time_to_quality)


def _premise_flag(p: argparse.ArgumentParser) -> None:
    """``--check-premise``, for the commands that predict or retune from ``--lr``."""
    p.add_argument("--check-premise", action="store_true", help="check --lr at --batch-size first (tcbench check-lr: "
                   "9-15 jobs) and start from its re-centred rate when it is off")


def _target_args(p: argparse.ArgumentParser) -> None:
    """The new batch: a global batch size, or a process count at the same per-process batch (one of them)."""
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--new-batch-size", type=int, help="the new (global) batch size")
    g.add_argument("--new-nproc", type=int, help="the new number of data-parallel processes at the same --batch-size "
                                                 "each: the new global batch is --batch-size × this")


def add_subcommands(sub: "argparse._SubParsersAction") -> None:
    """Add ``max-batch``, ``retune-lr``, ``tune-worker``, ``noise-scale``, ``predict-lr`` and ``dashboard`` to the
    ``tcbench`` parser's subcommands."""
    _add_max_batch(sub)
    _add_retune_lr(sub)
    _add_lr_tools(sub)
    _add_tune_compile(sub)
    _add_time_to_quality(sub)
    _add_dashboard(sub)


def _add_max_batch(sub: "argparse._SubParsersAction") -> None:
    p = command(sub, "max-batch", "largest batch that fits under a profile's memory, per backend",
                "tcbench max-batch --profile ml.g5.2xlarge --backends eager,inductor --multiple-of 8",
                "Short probe jobs at growing batch sizes, then a bisection; each probe is a job of its own process.")
    add_job_options(p, leave_out=MULTI_NODE)
    p.add_argument("--backends", default="eager,inductor", help="comma-separated; the first is the native one")
    p.add_argument("--start", type=int, default=None, help="first batch probed (default: --batch-size)")
    p.add_argument("--max-batch", type=int, default=4096, help="stop growing here")
    p.add_argument("--multiple-of", type=int, default=1, help="probe only multiples of this (e.g. 8)")
    p.add_argument("--probe-steps", type=int, default=4, help="steps per probe job (1 warmup)")
    p.add_argument("--budget-gb", type=float, default=None,
                   help="override the profile's memory budget (GiB; default: the --profile's memory per device)")
    p.add_argument("--probes", action="store_true", help="also print every probe")
    p.add_argument("--storage", default=None, help="keep the probes as an Optuna study: 'store' or a URL "
                   "(postgresql://…, sqlite:///…); a probe it holds is not run again (default: not kept)")
    p.add_argument("--study-name", default=None, help="the study (default: named from the settings)")
    p.set_defaults(func=cmd_max_batch)


def _add_retune_lr(sub: "argparse._SubParsersAction") -> None:
    p = command(sub, "retune-lr", "retune the learning rate after a batch-size change (Optuna)",
                "tcbench retune-lr --batch-size 8 --new-batch-size 64 --trials 12 --storage store",
                "Trials train the job at the new batch with learning rates around the rules' guesses; the objective "
                "is the held-out loss.")
    add_job_options(p, leave_out=MULTI_NODE)
    p.add_argument("--backend", default="eager", choices=["eager", "inductor", "xla"], help="the trials' backend")
    _target_args(p)
    p.add_argument("--trials", type=int, default=12, help="Optuna trials")
    p.add_argument("--storage", default=None,
                   help="'store' (tcbench's SQLite file) or a database URL; resumes, retries the trials of killed "
                        "workers (heartbeat), never prints the password (default: in memory, not kept)")
    p.add_argument("--study-name", default=None, help="the study (default: named from the settings)")
    p.add_argument("--sampler", default="auto", choices=["auto", "gp", "tpe", "random"],
                   help="auto: Optuna's GPSampler up to 20 trials, else TPE")
    p.add_argument("--pruner", default="halving", choices=["halving", "median", "none"],
                   help="halving: successive halving at a third of each trial's steps; "
                        "at most max(2, ceil(trials/3)) trials train past it")
    p.add_argument("--budget", default="equal_samples", choices=["equal_samples", "equal_steps"],
                   help="equal_samples: each trial trains steps x old/new batch steps "
                        "(as many samples as the baseline)")
    p.add_argument("--no-prediction", action="store_true", help="skip the noise-scale prediction (and its job)")
    p.add_argument("--optimizer", default="adam", choices=["adam", "sgd"], help="the prediction's form")
    p.add_argument("--tune-steps", type=int, default=None, help="the baseline's steps (default: --steps)")
    p.add_argument("--eval-batches", type=int, default=8, help="held-out batches for the objective")
    p.add_argument("--search-factor", type=float, default=4.0, help="search [min(guesses)/f, max(guesses)*f]")
    p.add_argument("--seeds", type=int, default=1,
                   help="train the finalists again with this many seeds in all; the best is then the lowest mean")
    p.add_argument("--finalists", type=int, default=3, help="how many of the best trials --seeds repeats")
    p.add_argument("--trials-table", action="store_true", help="also print every trial")
    p.add_argument("--workers", type=whole_number, default=1,
                   help="worker processes on the study (more than 1 needs a PostgreSQL --storage)")
    _premise_flag(p)
    p.set_defaults(func=cmd_retune_lr)


def _add_tune_compile(sub: "argparse._SubParsersAction") -> None:
    p = command(sub, "tune-compile", "search the fastest compiled configuration that keeps loss parity (Optuna)",
                "tcbench tune-compile --model bert-base-cased --size small --dropout 0 --budget-s 600",
                "Trials compile the job with Inductor's mode, scope (model or repeated blocks), a compiled or eager "
                "optimizer, precision and cpp_wrapper, as far as the device supports them; the objective is the "
                "median steady step, a configuration whose loss leaves the native job's is rejected; the fastest is "
                "then confirmed against the default configuration and native in alternating rounds.")
    add_job_options(p, leave_out=(*MULTI_NODE, "compile_mode", "compile_scope", "compile_optimizer", "cpp_wrapper"))
    p.add_argument("--budget-s", type=float, default=600.0, help="wall-clock seconds for the whole search and its "
                                                                  "confirmation")
    p.add_argument("--trials", type=whole_number, default=None, help="at most this many configurations (default: "
                                                                     "as many as the budget allows)")
    p.add_argument("--space", type=space_choice, action="append", metavar="FIELD=V1,V2",
                   help="search only these choices of a field (repeatable), e.g. --space precision=fp32 "
                        "--space compile_mode=default,max-autotune-no-cudagraphs")
    p.add_argument("--storage", default=None, help="'store' or a database URL: the study is kept and the same "
                                                   "command resumes it (default: in memory)")
    p.add_argument("--study-name", default=None, help="the study (default: named from the job and this host)")
    p.add_argument("--sampler", default="tpe", choices=SAMPLERS, help="tpe (with the parity constraint), random, "
                                                                      "or grid: every configuration once")
    p.add_argument("--pruner", default="median", choices=PRUNERS, help="median: stop a trial slower than the "
                                                                       "others' median after 5 steady steps")
    p.add_argument("--sampler-seed", type=int, default=0, help="the sampler's seed")
    p.add_argument("--no-confirm", action="store_true", help="skip the alternating rounds (no interval)")
    p.add_argument("--confirm-budget-s", type=float, default=None, help="the confirmation's share of --budget-s "
                                                                         "(default: a third)")
    p.add_argument("--resolve", type=float, default=0.05, help="the confirmation's rounds stop at this half-width")
    p.add_argument("--parity-rtol", type=float, default=None, help="relative tolerance of the first losses with "
                                                                   "--dropout 0 (default: per precision)")
    p.add_argument("--trials-table", action="store_true", help="print every trial (default: the 8 fastest)")
    p.add_argument("--json", action="store_true", help="the whole result as JSON")
    p.set_defaults(func=cmd_tune_compile)


def _add_lr_tools(sub: "argparse._SubParsersAction") -> None:
    p = command(sub, "tune-worker", "join a retune-lr study on PostgreSQL and run its trials (another terminal or "
                "machine)", "tcbench tune-worker STUDY --storage postgresql://me@db-host:5432/tcbench --workers 2")
    p.add_argument("study", help="the study's name (retune-lr prints it)")
    p.add_argument("--storage", required=True, help="the study's PostgreSQL URL (postgresql://user@host:port/db); "
                                                    "a password is never printed")
    p.add_argument("--workers", type=whole_number, default=1, help="worker processes on this machine")
    p.set_defaults(func=cmd_tune_worker)
    p = command(sub, "noise-scale", "measure the gradient noise scale of the native job (McCandlish B_simple)",
                "tcbench noise-scale --batch-size 16 --micro-batches 4",
                "One eager fp32 job whose every gradient is also taken over micro-batches; a data-parallel job is "
                "measured as one\nprocess at its global batch.")
    add_job_options(p, leave_out=(*MULTI_NODE, *COMPILER_FIELDS))
    p.add_argument("--micro-batches", type=int, default=2, help="micro-batches per step (divides --batch-size)")
    p.set_defaults(func=cmd_noise_scale)
    p = command(sub, "predict-lr", "the learning rate for a new batch size from the gradient noise scale",
                "tcbench predict-lr --batch-size 8 --lr 2e-3 --new-batch-size 64",
                "Uses the stored noise scale of this job, measuring it first when none is stored "
                "(tcbench noise-scale).")
    add_job_options(p, leave_out=(*MULTI_NODE, *COMPILER_FIELDS))
    _target_args(p)
    p.add_argument("--optimizer", default="adam", choices=["adam", "sgd"],
                   help="adam: the surge form (tcbench trains with AdamW); sgd: McCandlish's form")
    p.add_argument("--micro-batches", type=int, default=2, help="for the noise-scale job when none is stored")
    _premise_flag(p)
    p.set_defaults(func=cmd_predict_lr)


def _add_dashboard(sub: "argparse._SubParsersAction") -> None:
    p = command(sub, "dashboard", "optuna-dashboard on a study's storage until Ctrl-C (pip install "
                "'tcbench-workbench[dashboard]')", "tcbench dashboard --storage store --port 8080")
    p.add_argument("--storage", default="store", help="'store' (tcbench's own, where retune-lr --storage store "
                   "keeps its studies) or the URL retune-lr printed (sqlite:///…, postgresql://…)")
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (it asks for no password)")
    p.add_argument("--port", type=int, default=None, help="the port (default: a free one; the URL to open is printed)")
    p.set_defaults(func=cmd_dashboard)
