"""The largest batch that fits, per backend: grow by doubling until a probe fails, then bisect.

Each probe is a short real job (``tc.run``, its own process) at one batch size under the
profile's memory budget; a probe fits when it ends ``ok``. A probe that ends any other way (an
out-of-memory, the budget exceeded, a crash, the kernel's OOM killer) is recorded with its reason
and counts as "does not fit", so the search goes on. The search itself (:func:`search_max_batch`)
only needs a ``probe(batch) -> (fits, info)`` callable and is tested against a fake one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import pandas as pd

from tcbench.core.events import BatchProbed, Observer
from tcbench.runner.preflight import check as preflight, check_fits
from tcbench.runner.session import comparison_session
from tcbench.core.results import JobResult
from tcbench.core.spec import BACKENDS, JobSpec, SpecError
from tcbench.store.api import Store
from tcbench.core.profiles import profile as get_profile
from tcbench.tuning.storage import check_study_name, open_storage
from tcbench.runner.process import backend_status

Probe = Callable[[int], "tuple[bool, dict]"]
PROBE_COLUMNS = ["backend", "batch_size", "status", "fits", "peak_mem_mb", "samples_s", "wall_s", "run_id", "reason",
                 "reused"]


def search_max_batch(probe: Probe, start: int = 1, max_batch: int = 4096, stop: threading.Event | None = None,
                     multiple_of: int = 1) -> tuple[int, list[tuple[int, bool, dict]]]:
    """Largest batch in 1..max_batch for which ``probe`` fits (0: none fits), and every probe made.

    Doubles from ``start`` while probes fit (capped at ``max_batch``), then bisects between the
    last fit and the first failure; when ``start`` itself fails it bisects between 0 and ``start``.
    Only multiples of ``multiple_of`` are probed (8: tensor-core friendly sizes, and fewer probes).
    Assumes memory grows with the batch (a fit below a failure). Stops early when ``stop`` is set.
    """
    for name, value in (("start", start), ("max_batch", max_batch), ("multiple_of", multiple_of)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} is not allowed; it must be a whole number >= 1")
    if start > max_batch:
        raise ValueError(f"start={start} is not allowed; it must be <= max_batch={max_batch}")
    if start % multiple_of or max_batch < multiple_of:
        raise ValueError(f"start={start} and max_batch={max_batch} are not allowed with multiple_of={multiple_of}; "
                         "start must be a multiple of it and max_batch at least it")
    probes: list[tuple[int, bool, dict]] = []

    def attempt(units: int) -> bool | None:
        if stop is not None and stop.is_set():
            return None
        fits, info = probe(units * multiple_of)
        probes.append((units * multiple_of, bool(fits), info))
        return bool(fits)

    best = _search_units(attempt, start // multiple_of, max_batch // multiple_of)
    return best * multiple_of, probes


def _search_units(attempt: Callable[[int], "bool | None"], start: int, top: int) -> int:
    """Doubling then bisection over whole units; ``attempt`` returns None when the search must stop."""

    lo, hi, batch = 0, None, start
    while hi is None:
        fits = attempt(batch)
        if fits is None:
            return lo
        if not fits:
            hi = batch
        elif batch >= top:
            return batch
        else:
            lo, batch = batch, min(batch * 2, top)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        fits = attempt(mid)
        if fits is None:
            break
        lo, hi = (mid, hi) if fits else (lo, mid)
    return lo


@dataclass
class MaxBatchResult:
    """What :func:`find_max_batch` found: the largest fitting batch per backend and every probe."""

    spec: JobSpec
    profile: str
    budget_gb: float | None
    backends: list[str]
    max_batch: dict[str, int | None] = field(default_factory=dict)
    capped: dict[str, bool] = field(default_factory=dict)
    search_s: dict[str, float] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    probe_rows: list[dict] = field(default_factory=list)
    comparison_id: int | None = None
    study_name: str | None = None   # with a storage: the Optuna study holding every probe
    storage: str | None = None      # how that storage is shown (password masked)

    def probes(self) -> pd.DataFrame:
        """Every probe: backend, batch_size, status, fits, peak_mem_mb, samples_s, wall_s, run_id, reason, and
        reused (answered by the study's earlier probe, no job run)."""
        return pd.DataFrame(self.probe_rows, columns=PROBE_COLUMNS)

    def _at_max(self, backend: str) -> dict:
        best = self.max_batch.get(backend, 0)
        rows = [r for r in self.probe_rows if r["backend"] == backend and r["batch_size"] == best and r["fits"]]
        return rows[-1] if rows else {}

    def table(self) -> pd.DataFrame:
        """One row per backend, like SageMaker's tested-model table (native first, then compiled)."""
        rows = []
        native = self.max_batch.get(self.backends[0]) if self.backends else None
        for b in self.backends:
            at = self._at_max(b)
            mb = self.max_batch.get(b)
            rows.append(dict(backend=b, max_batch=mb, capped=self.capped.get(b, False),
                             vs_native=(mb / native) if native and mb is not None else None,
                             samples_s=at.get("samples_s"), peak_mem_mb=at.get("peak_mem_mb"),
                             budget_gb=self.budget_gb, probes=sum(r["backend"] == b for r in self.probe_rows),
                             search_s=self.search_s.get(b), note=self.notes.get(b, "")))
        return pd.DataFrame(rows)

    def plot(self):
        """Peak memory of every probe against its batch size, the budget as a line, failures marked."""
        from tcbench.tuning.plots import collect_probes, plot_probes

        return plot_probes(collect_probes(self), self.budget_gb)

    def __repr__(self) -> str:
        return f"MaxBatchResult(profile={self.profile!r}, budget_gb={self.budget_gb}, max_batch={self.max_batch})"


def _probe_spec(spec: JobSpec, backend: str, batch: int, probe_steps: int, budget: float | None) -> JobSpec:
    return dataclasses.replace(spec, backend=backend, batch_size=batch, steps=probe_steps, warmup_steps=1,
                               loss_every=probe_steps, memory_budget_gb=budget, eval_batches=0)


def _probe_row(backend: str, batch: int, res: Any) -> dict:
    fits = res.status == "ok"
    reason = "" if fits else f"{res.status}: {res.error}".strip()[:500]
    return dict(backend=backend, batch_size=batch, status=res.status, fits=fits,
                peak_mem_mb=None if res.peak_mem_bytes is None else res.peak_mem_bytes / 2**20,
                samples_s=res.samples_s, wall_s=res.wall_s, run_id=res.run_id, reason=reason, reused=False)


class _ProbeStudy:
    """The probes of a search kept as trials of an Optuna study: params backend and batch_size, value the batch
    when it fits (0 when not: the study's best is the largest fitting batch), the probe's row in user
    attributes. Only answers are kept (fits, or out of memory / over the budget): a probe that crashed or was
    stopped is run again. A probe the study holds is answered from it; the settings that decide the answer (the spec
    without its batch and backend, the budget, probe steps) are the study's, and another search is refused."""

    def __init__(self, storage: Any, name: str, settings: dict) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.study = optuna.create_study(storage=storage, study_name=name, direction="maximize", load_if_exists=True)
        self.name = name
        have = self.study.user_attrs.get("settings")
        if have is None:
            self.study.set_user_attr("settings", settings)
        elif have != settings:
            differ = {k: (have.get(k), settings.get(k)) for k in sorted(set(have) | set(settings))
                      if have.get(k) != settings.get(k)}
            raise ValueError(f"study {name!r} holds a max-batch search with other settings {differ} (stored, "
                             "given); use another study_name or the same settings to resume it")

    def known(self, backend: str, batch: int) -> dict | None:
        from optuna.trial import TrialState

        for t in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            if t.params.get("backend") == backend and t.params.get("batch_size") == batch and "row" in t.user_attrs:
                return {**t.user_attrs["row"], "reused": True}
        return None

    def add(self, row: dict) -> None:
        import socket

        import optuna
        from optuna.distributions import CategoricalDistribution, IntDistribution

        self.study.add_trial(optuna.trial.create_trial(
            params={"backend": row["backend"], "batch_size": row["batch_size"]},
            distributions={"backend": CategoricalDistribution(list(BACKENDS)),
                           "batch_size": IntDistribution(1, 1 << 24)},
            value=row["batch_size"] if row["fits"] else 0,
            user_attrs={"row": {k: v for k, v in row.items() if k != "reused"}, "host": socket.gethostname()}))


# what a probe's answer does not depend on: set per probe (_probe_spec), or how long the runner waits
_NOT_SETTINGS = ("backend", "batch_size", "steps", "warmup_steps", "loss_every", "memory_budget_gb", "eval_batches",
                 "stall_s", "timeout_s", "debug")


def _study_settings(spec: JobSpec, profile: str, budget: float | None, probe_steps: int) -> dict:
    fields = {k: v for k, v in spec.to_dict().items() if k not in _NOT_SETTINGS}
    return {"spec": json.loads(json.dumps(fields, default=str)), "profile": profile, "budget_gb": budget,
            "probe_steps": probe_steps}


def _study_name(spec: JobSpec, profile: str, budget: float | None, settings: dict) -> str:
    key = hashlib.sha1(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:8]
    return f"maxbatch-{spec.model}-{spec.size}-s{spec.seq_len}-{profile}-{budget:g}GiB-{key}"


def _check_args(backends: Sequence[str], probe_steps: int, budget: float | None) -> list[str]:
    names = list(backends)
    bad = [b for b in names if b not in BACKENDS]
    if bad or not names:
        raise ValueError(f"backends={list(backends)!r} is not allowed; use one or more of {', '.join(BACKENDS)}")
    if isinstance(probe_steps, bool) or not isinstance(probe_steps, int) or probe_steps < 2:
        raise ValueError(f"probe_steps={probe_steps!r} is not allowed; it must be a whole number >= 2 "
                         "(one warmup step, then at least one measured step)")
    if budget is not None and not (budget > 0):
        raise ValueError(f"memory_budget_gb={budget!r} is not allowed; use None (the profile's budget) or a number > 0")
    return names


def find_max_batch(spec: JobSpec, profile: str = "this-machine", backends: Sequence[str] = ("eager", "inductor"),
                   start: int | None = None, max_batch: int = 4096, probe_steps: int = 4,
                   observer: Callable[[dict], None] | None = None, stop: threading.Event | None = None,
                   store: Store | None = None, memory_budget_gb: float | None = None,
                   multiple_of: int = 1, storage: Any = None, study_name: str | None = None) -> MaxBatchResult:
    """The largest batch that fits under ``profile``'s memory budget, per backend.

    ``memory_budget_gb`` overrides the profile's budget (for teaching and tests on a big host).
    ``start`` defaults to ``spec.batch_size``; ``multiple_of`` limits probes to multiples of it
    (the answer is then exact to that step). Observers get the runner's events plus
    ``tc.events.BatchProbed`` after each probe. The session is stored as kind ``max_batch``.

    ``storage``: None (the probes are kept in tcbench's store only), ``"store"`` (tcbench's database) or any
    Optuna RDB URL (``postgresql://…``, ``sqlite:///…``): every probe is then also a trial of the study
    ``study_name`` (default: named from the model, sequence length, profile, budget and a key of the settings),
    and a probe that study already holds is answered from it without a job (``reused`` in ``probes()``) — a
    stopped search resumes where it stopped, and a teammate's search on the same settings answers at once.
    ``optuna-dashboard URL`` shows it (best value: the largest batch that fitted).
    """
    from tcbench.runner.process import run

    prof = get_profile(profile)
    budget = float(memory_budget_gb) if memory_budget_gb is not None else prof.memory_budget_gb
    names = _check_args(backends, probe_steps, memory_budget_gb)

    check_study_name(study_name)
    spec = preflight(spec)   # once, before the search is stored or any probe starts
    start = spec.batch_size if start is None else start
    search_max_batch(lambda b: (True, {}), start, max_batch, threading.Event(), multiple_of)  # validates only
    store = store or Store()

    backend_storage, shown = open_storage(storage, store.url())   # a bad URL is a named error before any probe
    study = None
    if backend_storage is not None:
        settings = _study_settings(spec, prof.name, budget, probe_steps)
        study = _ProbeStudy(backend_storage, study_name or _study_name(spec, prof.name, budget, settings), settings)
    notify = observer or (lambda event: None)
    out = MaxBatchResult(spec=spec, profile=prof.name, budget_gb=budget, backends=names,
                         study_name=study and study.name, storage=shown)
    info = {"profile": prof.name, "budget_gb": budget, "study_name": out.study_name, "storage": shown}

    def job(backend: str, batch: int) -> Any:   # one probe job, a run of the search's comparison
        probe = _probe_spec(spec, backend, batch, probe_steps, budget)
        try:
            check_fits(probe, budget)
        except SpecError as exc:   # above the memory floor (runner.preflight): it cannot fit, no job needed
            if exc.field != "batch_size":
                raise
            return JobResult(spec=probe, status="oom", error=f"refused before a job: {exc}")
        return run(probe, observer, stop, store, out.comparison_id, len(out.probe_rows), f"{backend}@{batch}")

    with comparison_session(store, "max_batch", spec, names, 1, info, stop) as session:
        out.comparison_id = session.comparison_id
        session.info_at_finish = lambda: {**info, "table": out.table().to_dict(orient="records")}
        for backend in names:
            _search_backend(out, backend, job, study, notify, start, max_batch, multiple_of, stop)
    return out


def _search_backend(out: MaxBatchResult, backend: str, job: Callable[[str, int], Any], study: _ProbeStudy | None,
                    notify: Observer, start: int, max_batch: int, multiple_of: int,
                    stop: threading.Event | None) -> None:
    """One backend's search: its probes (answered by ``study`` when it holds them) and figures, into ``out``."""

    t0 = time.monotonic()
    ok, why = backend_status(backend)
    if not ok:
        out.max_batch[backend], out.search_s[backend] = None, 0.0
        out.notes[backend] = f"backend {backend!r} is unavailable: {why}"
        return

    def probe(batch: int) -> tuple[bool, dict]:
        row = study.known(backend, batch) if study is not None else None
        if row is None:
            row = _probe_row(backend, batch, job(backend, batch))
            if study is not None and row["status"] in ("ok", "oom"):   # a crash or a stop is tried again
                study.add(row)
        out.probe_rows.append(row)
        notify(BatchProbed(**row))
        return row["fits"], row

    best, made = search_max_batch(probe, start, max_batch, stop, multiple_of)
    out.max_batch[backend], out.search_s[backend] = (best if made else None), time.monotonic() - t0
    out.capped[backend] = best >= max_batch // multiple_of * multiple_of
    if stop is not None and stop.is_set():
        out.notes[backend] = "search stopped by the user: the figure is a lower bound"
    elif out.capped[backend]:
        out.notes[backend] = f"every probe fitted up to max_batch={max_batch}: the true limit is higher"
