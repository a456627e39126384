"""What tcbench needs, what is installed, and whether each backend can run — read from package metadata.

Nothing here imports torch, torch_xla or any Jupyter package: versions come from ``importlib.metadata``
and the C++ compiler from ``PATH``, so ``tc.backends()`` and ``tcbench doctor`` answer at once, and they
answer even where a package is missing or broken.

``REQUIREMENTS`` is pyproject.toml's ranges as the installed distribution's metadata lists them
(``importlib.metadata.requires``); ``TESTED`` repeats constraints.txt's exact versions (a wheel does not ship the
file); tests/test_packaging.py checks both against the files.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import sys
from dataclasses import dataclass
from typing import Callable, Mapping
from tcbench.core.profiles import nvidia_gpus

# the distribution's name (pyproject.toml's [project] name): "tcbench" on PyPI is another project
DIST = "tcbench-workbench"
CORE, LAB, XLA, HF, POSTGRES, DASHBOARD = "core", "lab", "xla", "hf", "postgres", "dashboard"
EXTRAS = (LAB, XLA, HF, POSTGRES, DASHBOARD)   # the optional parts the docs name; `all` installs every one


def pip_install(extra: str = CORE) -> str:
    """The pip command that installs tcbench's core or one extra (``pip install 'tcbench-workbench[lab]'``)."""
    return f"pip install {DIST}" if extra == CORE else f"pip install '{DIST}[{extra}]'"


INSTALL = {group: pip_install(group) for group in (CORE, *EXTRAS)}


@dataclass(frozen=True)
class Requirement:
    name: str    # the distribution name, as in pyproject.toml
    spec: str    # the supported range, as in pyproject.toml ("" = any)
    group: str   # core, lab or xla
    why: str     # what tcbench uses it for (and why the lower bound)
    extras: str = ""   # the package's own extras, as in pyproject.toml ("[binary]")

    @property
    def line(self) -> str:
        return f"{self.name}{self.extras}{self.spec}"


# what tcbench uses each requirement for (and why its lower bound); the ranges come from the installed metadata
WHY: dict[str, str] = {
    "torch": "training; fused AdamW on CPU since 2.4",
    "transformers": "the models (5.x loading defaults)",
    "tokenizers": "the shipped tokenizer",
    "optuna": "retune_lr; the heartbeat retry API of 4.9",
    "scipy": "Optuna's GPSampler (retune_lr's default up to 20 trials)",
    "sqlalchemy": "study storage URLs (optuna's floor)",
    "numpy": "data order and statistics",
    "pandas": "every table",
    "plotly": "charts and the HTML report",
    "tqdm": "CLI progress bars",
    "psutil": "whether a recorded job's process still runs; ending its leftovers",
    "jupyterlab": "make lab: the panel in JupyterLab",
    "ipywidgets": "the panel's widgets",
    "anywidget": "plotly's live FigureWidget",
    "voila": "make app: the panel as a page",
    "nbconvert": "the gallery's HTML copies",
    "nbclient": "the gallery executes notebooks",
    "nbformat": "the gallery reads notebooks",
    "torch_xla": "the xla backend; its major.minor must equal torch's",
    "accelerate": "a Hugging Face Trainer script (tcbench.hf.TcbenchCallback)",
    "psycopg": "the store and studies on PostgreSQL (postgresql:// URLs)",
    "optuna-dashboard": "tcbench dashboard: a study's trials in the browser",
}


def _ordered(spec: str) -> str:
    """A range as pyproject.toml writes it, lower bound first (metadata may list ``<3,>=2.4``)."""
    return ",".join(sorted((c.strip() for c in spec.split(",") if c.strip()), key=lambda c: not c.startswith(">")))


def _from_metadata() -> tuple[Requirement, ...]:
    """The core requirements and the extras (``EXTRAS``), as the installed tcbench's metadata lists them
    (``importlib.metadata.requires``: pyproject.toml's ranges, in its order)."""
    try:
        lines = importlib.metadata.requires(DIST) or []
    except importlib.metadata.PackageNotFoundError:   # run from a source tree that was never installed
        return ()
    out = []
    for line in lines:
        m = re.match(r"\s*([A-Za-z0-9_.\-]+)\s*(\[[^\]]*\])?\s*([^;]*?)"
                     r"\s*(?:;\s*extra\s*==\s*[\"']([\w-]+)[\"'])?\s*$", line)
        if not m or m.group(1) in (DIST, "tcbench"):
            continue
        group = m.group(4) or CORE
        if group in (CORE, *EXTRAS):
            out.append(Requirement(m.group(1), _ordered(m.group(3)), group, WHY.get(m.group(1), ""), m.group(2) or ""))
    return tuple(out)


# pyproject.toml's [project] dependencies and the extras the docs name, in its order, read from the installed metadata
REQUIREMENTS: tuple[Requirement, ...] = _from_metadata()

# constraints.txt: the exact versions `make` and CI install (a test checks this copy equals the file)
TESTED: dict[str, str] = {
    "torch": "2.9.0", "transformers": "5.23.0", "tokenizers": "0.23.3", "optuna": "5.0.0", "scipy": "1.17.1",
    "sqlalchemy": "2.1.9", "numpy": "2.4.6", "pandas": "3.1.1", "plotly": "7.1.0", "tqdm": "4.70.1",
    "jupyterlab": "4.6.6", "ipywidgets": "8.1.9", "anywidget": "0.11.0", "voila": "0.5.13",
    "nbconvert": "7.17.2", "nbclient": "0.11.0", "nbformat": "5.11.1", "torch_xla": "2.9.0",
    "accelerate": "1.15.0", "psycopg": "3.3.9", "optuna-dashboard": "0.21.0", "psycopg2-binary": "2.9.13",
    "pytest": "9.2.0", "pytest-timeout": "2.4.0", "pytest-xdist": "3.8.0", "pytest-playwright": "0.10.0",
    "playwright": "1.65.2", "ipykernel": "7.4.0", "readme-renderer": "46.0", "tlparse": "0.4.3", "psutil": "7.2.2",
    "ruff": "0.17.6", "pytest-cov": "7.1.0",
    "sphinx": "9.0.4", "myst-parser": "5.2.0", "myst-nb": "1.4.0", "furo": "2025.12.19", "sphinx-argparse": "0.6.1",
}

# The second tested set: what CI's leg on the newest torch (`make test-latest`) last passed with. It installs the
# newest torch, transformers and tokenizers pip resolves, no torch_xla (its last release, 2.9, needs torch 2.9), every
# other package at TESTED's pin. Recorded here after a passing run; tests/test_packaging.py checks these names against
# the Makefile's, the versions against pyproject's ranges and, in that leg, against what is installed.
LATEST: dict[str, str] = {"torch": "2.14.1", "transformers": "5.24.0", "tokenizers": "0.23.3"}

Versions = Mapping[str, "str | None"]


def installed_version(name: str) -> str | None:
    """The installed distribution's version from its metadata, or None when it is not installed."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def installed_versions() -> dict[str, str | None]:
    """Every requirement's installed version (None: missing)."""
    return {r.name: installed_version(r.name) for r in REQUIREMENTS}


def release(version: str) -> tuple[int, ...]:
    """The leading numeric release of a version: ``2.9.0+cu128`` -> (2, 9, 0), ``2.10.0.dev2025`` -> (2, 10, 0)."""
    parts = []
    for piece in version.split("+")[0].split("."):
        m = re.match(r"\d+", piece)
        if not m:
            break
        parts.append(int(m.group()))
        if m.group() != piece:   # 0rc1, 1a2: the release ends here
            break
    return tuple(parts)


def in_range(version: str, spec: str) -> bool:
    """Whether ``version`` satisfies a ``>=a,<b`` range (the only form REQUIREMENTS uses); pre-releases count
    as their release."""
    v = release(version)
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        op, bound = re.match(r"(>=|<)\s*(.+)", clause).groups()
        b = release(bound)
        width = max(len(v), len(b))
        pv, pb = v + (0,) * (width - len(v)), b + (0,) * (width - len(b))
        if (op == ">=" and pv < pb) or (op == "<" and pv >= pb):
            return False
    return True


def package_problem(req: Requirement, version: str | None) -> str | None:
    """Why ``req`` at ``version`` is a problem (missing, outside the supported range), or None."""
    if version is None:
        return "not installed"
    if not in_range(version, req.spec):
        return f"{version} is outside the supported range {req.spec}"
    return None


def fix_for(req: Requirement) -> str:
    """The pip command that installs a supported version of ``req``."""
    return f"pip install '{req.line}'"


def xla_match_command(torch_version: str) -> str:
    """The pip command for the torch_xla release line that matches ``torch_version``."""
    major, minor = (release(torch_version) + (0, 0))[:2]
    return f"pip install 'torch_xla=={major}.{minor}.*'"


def tested_set(versions: Versions | None = None) -> str:
    """Which tested set the installed torch, torch_xla and transformers are (read from metadata unless given), in one
    line: ``tested set: pinned (torch 2.9.0 + torch_xla 2.9.0, transformers 5.23.0)``, ``tested set: latest (torch
    2.14.1, transformers 5.24.0; no torch_xla)`` or ``untested combination: ...`` naming both sets. A local label
    (``+cu128``) does not count; each other package's row says its own tested version."""
    names = ("torch", "torch_xla", "transformers")
    given = versions if versions is not None else {n: installed_version(n) for n in names}
    v = {n: given.get(n) if isinstance(given.get(n), str) else None for n in names}   # a table's NaN: missing
    torch_v, xla_v, tf_v = (v[n] for n in names)

    def same(name: str, pins: Mapping[str, str]) -> bool:
        return v.get(name) is not None and release(v[name]) == release(pins[name])

    if same("torch", TESTED) and same("transformers", TESTED) and (xla_v is None or same("torch_xla", TESTED)):
        if xla_v is None:
            return (f"tested set: pinned (torch {torch_v}, transformers {tf_v}; torch_xla {TESTED['torch_xla']} is not "
                    "installed: no xla backend)")
        return f"tested set: pinned (torch {torch_v} + torch_xla {xla_v}, transformers {tf_v})"
    if same("torch", LATEST) and same("transformers", LATEST) and xla_v is None:
        return f"tested set: latest (torch {torch_v}, transformers {tf_v}; no torch_xla)"
    have = ", ".join(f"{n} {v.get(n) or 'missing'}" for n in names if n != "torch_xla" or xla_v)
    return (f"untested combination: {have} (tested: torch {TESTED['torch']} + torch_xla {TESTED['torch_xla']} with "
            f"transformers {TESTED['transformers']}; torch {LATEST['torch']} with transformers "
            f"{LATEST['transformers']}, no torch_xla)")


def xla_mismatch(torch_version: str, xla_version: str) -> str | None:
    """Why torch_xla ``xla_version`` cannot run with torch ``torch_version`` (their major.minor differ), or None."""
    if release(torch_version)[:2] == release(xla_version)[:2]:
        return None
    return (f"torch_xla {xla_version} does not match torch {torch_version} (their major.minor must be equal): "
            f"{xla_match_command(torch_version)}")


def cpp_compiler(which: Callable[[str], str | None] = shutil.which) -> tuple[str, str | None]:
    """(name, path or None) of the C++ compiler Inductor calls on CPU: $CXX, else g++ (clang++ on macOS)."""
    name = os.environ.get("CXX") or ("clang++" if sys.platform == "darwin" else "g++")
    return name, which(name)


BACKEND_NEEDS = {
    "eager": "torch",
    "inductor": "torch and, on CPU, a C++ compiler",
    "xla": "torch and torch_xla of the same major.minor",
}


XLA_LAST = (2, 9)   # torch_xla's last release line (2.9.x, for torch 2.9); it no longer builds for CUDA


def _has_gpu() -> bool:
    return bool(nvidia_gpus())


def xla_missing(torch_version: str, gpu: bool) -> tuple[str, str | None]:
    """Why the xla backend is unavailable when torch_xla is not installed, and the command that installs it (None
    where no release can run here)."""
    major_minor = (release(torch_version) + (0, 0))[:2]
    last = ".".join(map(str, XLA_LAST))
    if gpu:
        return (f"torch_xla is not installed, and PyTorch/XLA no longer runs on NVIDIA GPUs (its CUDA device was "
                f"dropped in 2.8/2.9; its last release, {last}, needs torch {last}): on this GPU compare eager with "
                "inductor"), None
    if major_minor > XLA_LAST:
        fix = f"pip install 'torch=={last}.*' 'torch_xla=={last}.*' (in another environment)"
        return (f"torch_xla is not installed, and no release matches torch {torch_version} (its last release, "
                f"{last}, needs torch {last}): {fix} for the xla backend"), fix
    match = xla_match_command(torch_version)
    return f"torch_xla is not installed: {match} (the release that matches torch {torch_version}; " \
           f"{INSTALL[XLA]} installs the newest)", match


def backend_check(name: str, versions: Versions | None = None, compiler: tuple[str, str | None] | None = None,
                  gpu: bool | None = None) -> tuple[bool, str, str | None]:
    """(available, reason, the command that fixes it or None) of a backend, from installed versions (read
    from metadata unless given), for inductor the C++ compiler and for xla whether an NVIDIA GPU answers (both
    looked up unless given) — without importing torch. Pure when ``versions``, ``compiler`` and ``gpu`` are given."""
    if name not in BACKEND_NEEDS:
        raise ValueError(f"backend={name!r} is not allowed; allowed: {', '.join(BACKEND_NEEDS)}")
    v = dict(versions) if versions is not None else {n: installed_version(n) for n in ("torch", "torch_xla")}
    torch_v, xla_v = v.get("torch"), v.get("torch_xla")
    if torch_v is None:
        return False, f"torch is not installed: {INSTALL[CORE]} (or {fix_for(_req('torch'))})", INSTALL[CORE]
    return _BACKEND_CHECKS[name](torch_v, xla_v, compiler, gpu)


def _eager_check(torch_v: str, xla_v: str | None, compiler: tuple[str, str | None] | None,
                 gpu: bool | None) -> tuple[bool, str, str | None]:
    return True, f"native PyTorch (torch {torch_v})", None


def _inductor_check(torch_v: str, xla_v: str | None, compiler: tuple[str, str | None] | None,
                    gpu: bool | None) -> tuple[bool, str, str | None]:
    cxx, path = compiler if compiler is not None else cpp_compiler()
    if path is None:
        fix = "apt-get install g++ (or conda install gxx), or set CXX"
        return False, f"Inductor on CPU needs a C++ compiler and {cxx} is not on PATH: {fix}", fix
    return True, f"torch.compile (Inductor, torch {torch_v}, C++ compiler {path})", None


def _xla_check(torch_v: str, xla_v: str | None, compiler: tuple[str, str | None] | None,
               gpu: bool | None) -> tuple[bool, str, str | None]:
    match = xla_match_command(torch_v)
    if xla_v is None:
        return (False, *xla_missing(torch_v, _has_gpu() if gpu is None else gpu))
    mismatch = xla_mismatch(torch_v, xla_v)
    if mismatch:
        return False, mismatch, match
    return True, f"PyTorch/XLA {xla_v} on PJRT_DEVICE={os.environ.get('PJRT_DEVICE', 'CPU')}", None


# each backend's installation check, by name like BACKEND_NEEDS: this layer sits below tcbench.job, so it cannot ask
# the backend class (tcbench.job.backends) the way the runner does
_BACKEND_CHECKS = {"eager": _eager_check, "inductor": _inductor_check, "xla": _xla_check}


def backend_status(name: str, versions: Versions | None = None,
                   compiler: tuple[str, str | None] | None = None) -> tuple[bool, str]:
    """(available, reason) of a backend, checked without importing torch (see ``backend_check``)."""
    ok, reason, _ = backend_check(name, versions, compiler)
    return ok, reason


def _req(name: str) -> Requirement:
    return next(r for r in REQUIREMENTS if r.name == name)
