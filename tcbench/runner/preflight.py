"""Preflight: what a JobSpec needs from the disk and the machine, checked in the parent before any process starts.

``JobSpec`` checks values only. This checks the rest while the caller can still fix it, so a bad input
is a named ``SpecError`` instead of a failed job (or a traceback) minutes later:

- relative paths are resolved against the caller's working directory (a job runs in its run folder);
- ``threads`` fits the cores this process may use;
- a dataset file is read and checked as a job reads it (encoding, columns, labels, the held-out split);
- a local model folder has a config, a supported head, weights, a vocabulary that covers the tokenizer
  jobs use (its own when it has one, else the shipped one) and positions for ``seq_len``;
- a model or batch factory ``"package.module:function"`` can be found from the caller's ``sys.path`` and
  its module defines the function (read, not run: the job imports it);
- a training script (``script``) exists and is a readable ``.py`` file;
- a profile's memory budget applies when the spec sets none (the same in the API, the CLI and the panel).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from tcbench.job import data as _data, factory as _factory
from tcbench.job.backends import backend_class
from tcbench.core.spec import JobSpec, SpecError, allowed_text, is_local_folder, is_factory
from tcbench.runner.zygote_client import LAUNCHER_ENV, LAUNCHER_MODES
from tcbench.core.catalog import MODELS, training_bytes_floor
from tcbench.core.profiles import LOCAL, local_profile, profile


def _resolved(path: str) -> str:
    return os.path.abspath(os.path.expanduser(path))


def _script(path: str) -> str:
    """A training script's absolute path (resolved against the caller's working directory, where it runs)."""
    full = _resolved(path)
    allowed = "the path of an existing Python script (.py), absolute or relative to the working directory"
    what = ("is a folder" if os.path.isdir(full) else "is not a .py file" if not full.endswith(".py")
            else "does not exist" if not os.path.isfile(full) else "cannot be read" if not os.access(full, os.R_OK)
            else "")
    if what:
        raise SpecError("script", path, allowed, f"script={path!r} {what} (resolved: {full}); allowed: {allowed}")
    stem = os.path.basename(full)[:-3]
    if stem in sys.stdlib_module_names:   # its folder comes first on the job's path (profile.py: cProfile's import)
        raise SpecError("script", path, "a script not named like a standard-library module",
                        f"script={path!r} is named like Python's standard module {stem!r}: its folder comes first on "
                        f"the job's import path, so any `import {stem}` in the job (torch and transformers import "
                        f"many standard modules) would load your script instead; allowed: a script not named like "
                        f"a standard-library module (rename it, e.g. train_{stem}.py)")
    return full


def check_fits(spec: JobSpec, budget_gb: float | None) -> None:
    """A catalog model's batch whose memory floor (``catalog.training_bytes_floor``) exceeds the memory it may use
    (its budget, else this machine's: per device on a GPU, the host's on a CPU, shared by ``nproc`` processes) is a
    SpecError naming the largest batch that might fit, before a process starts (a job would stall or fail minutes
    later)."""

    if spec.script is not None or spec.model not in MODELS:
        return
    local = local_profile()
    gib = budget_gb if budget_gb is not None else local.memory_budget_gb
    share = spec.nproc if local.accelerator == "CPU" and budget_gb is None else 1
    fixed, per_sample = training_bytes_floor(spec.model, spec.size, spec.seq_len, spec.precision)
    need = fixed + per_sample * spec.batch_size
    have = gib * 2**30 / share
    if need <= have:
        return
    largest = max(int((have - fixed) // per_sample), 0)
    where = (f"the memory budget of {gib:g} GiB" if budget_gb is not None else
             f"this machine's {gib:g} GiB" + (f" shared by nproc={spec.nproc} processes" if share > 1 else ""))
    allowed = (f"1..{largest} (the largest that might fit; tcbench max-batch finds the real one)" if largest else
               "none: the model's weights and optimizer states alone do not fit")
    raise SpecError("batch_size", spec.batch_size, allowed,
                    f"batch_size={spec.batch_size} cannot fit {spec.model} ({spec.size}) at seq_len={spec.seq_len} in "
                    f"{where}: one step needs at least {need / 2**30:,.1f} GiB; allowed: {allowed}")


def check_blocks(spec: JobSpec, model: str) -> None:
    """``compile_scope="blocks"`` on a model without a repeated block (ALBERT shares one layer across its depth: one
    group of one layer, unless its configuration says ``num_hidden_groups`` or ``inner_group_num`` ≥ 2) is a
    SpecError here, from the model's configuration, not from the job that would fail to find the block."""
    if spec.compile_scope != "blocks" or not backend_class(spec.backend).inductor_settings or spec.script is not None:
        return
    if model in MODELS:
        family, config = MODELS[model].family, {}
    elif spec.model_kind == "folder" and os.path.isfile(os.path.join(model, "config.json")):
        import json

        try:
            with open(os.path.join(model, "config.json"), encoding="utf-8") as f:
                config = json.load(f)
        except (OSError, ValueError):
            return   # check_local_model has said what is wrong with it
        family = config.get("model_type")
    else:
        return   # a factory's model is known only when it is built, in the job
    shared = family == "albert" and max(int(config.get("num_hidden_groups") or 1),
                                        int(config.get("inner_group_num") or 1)) < 2
    if shared:
        raise SpecError("compile_scope", spec.compile_scope, "'model' or 'step'",
                        f"compile_scope='blocks' is not allowed for {spec.model}: ALBERT shares one layer across its "
                        "depth, so it has no repeated block to compile once; allowed: 'model' or 'step'")


def check(spec: JobSpec) -> JobSpec:
    """``spec`` as a job will run it (``tc.preflight``): paths absolute, the profile's memory budget applied.

    ``run``, ``compare``, ``find_max_batch`` and ``retune_lr`` call it before anything starts; call it
    yourself to check a spec (and its files) without running anything.

    Raises a SpecError naming the field, the value and what is allowed. Idempotent: checking the
    returned spec again returns it unchanged.
    """

    if not isinstance(spec, JobSpec):
        raise TypeError(f"spec={spec!r} is not a tcbench.JobSpec")
    launcher = os.environ.get(LAUNCHER_ENV, "fork")
    if launcher not in LAUNCHER_MODES:   # else every job would start as a new process, said only in its own log
        raise SpecError(LAUNCHER_ENV, launcher, allowed_text(LAUNCHER_MODES),
                        f"the environment variable {LAUNCHER_ENV}={launcher!r} is not allowed; allowed: "
                        f"{allowed_text(LAUNCHER_MODES)} (unset: 'fork')")
    changes: dict[str, Any] = {}
    cores = len(os.sched_getaffinity(0))
    if spec.threads is not None and spec.threads > cores:
        raise SpecError("threads", spec.threads, f"1..{cores} (the cores this process may use)",
                        f"threads={spec.threads} is more than the {cores} core(s) this process may use; "
                        f"allowed: None or 1..{cores}")
    if spec.nproc > 1 and (spec.threads or 1) * spec.nproc > cores:
        raise SpecError("nproc", spec.nproc, f"1..{cores // (spec.threads or 1)} with threads={spec.threads or 1}",
                        f"nproc={spec.nproc} processes × threads={spec.threads or 1} is more than the {cores} core(s) "
                        f"this process may use; allowed: nproc × threads <= {cores}")
    backend_class(spec.backend).preflight(spec)   # the machine's settings the backend needs (XLA's devices)
    factory_data = is_factory(spec.dataset)
    if factory_data:
        _factory.check(spec.dataset, "dataset")
    elif spec.dataset != "builtin":
        changes["dataset"] = _resolved(spec.dataset)
        _data.check_dataset(changes["dataset"])
    if spec.model_kind == "factory":
        _factory.check(spec.model, "model")
    elif spec.model_kind == "folder" and is_local_folder(spec.model):
        from tcbench.job.models import check_local_model

        changes["model"] = _resolved(spec.model)
        check_local_model(changes["model"], spec.seq_len,
                          None if factory_data else _data.load_tokenizer().get_vocab_size())
    if spec.script is not None:
        changes["script"] = _script(spec.script)
    check_blocks(spec, changes.get("model", spec.model))
    if spec.memory_budget_gb is None and spec.profile != LOCAL:
        changes["memory_budget_gb"] = float(profile(spec.profile).memory_budget_gb)
    check_fits(spec, changes.get("memory_budget_gb", spec.memory_budget_gb))
    changes = {k: v for k, v in changes.items() if getattr(spec, k) != v}
    return spec.replace(**changes) if changes else spec
