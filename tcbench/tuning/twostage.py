"""The two-stage flow of SageMaker's own tuning example, as one call.

Stage 1 picks the batch size per backend for throughput under the profile's memory
(:func:`find_max_batch`: the fitting probe with the highest samples/s). Stage 2 retunes the
learning rate at the compiled backend's chosen batch (:func:`retune_lr`). Then one paired run:
native (old batch, old lr) against compiled (new batch, retuned lr), the same number of steps:

* **time to reach the same loss**: the cumulative step time (warmup and compile steps included)
  until the exponentially smoothed training loss first reaches the native run's final smoothed
  loss; None when the compiled run never gets there;
* **cost**: that time priced at the profile's on-demand rate, and the per-epoch cost of each
  job's throughput (``tcbench.core.cost.cost``); on this machine the speed is this machine's.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from typing import Any, Sequence

import pandas as pd

from tcbench.core.events import Observer
from tcbench.tuning.batch.search import MaxBatchResult, find_max_batch
from tcbench.core.results import JobResult
from tcbench.core.spec import JobSpec
from tcbench.runner.session import comparison_session
from tcbench.store.api import Store
from tcbench.tuning.lr.retune import RetuneResult, retune_lr
from tcbench.core.cost import cost
from tcbench.tuning import plots as tp


def time_to_loss(result: JobResult, target: float, smoothing: float = 0.1) -> float | None:
    """Seconds of steps until the smoothed training loss first is <= target (None: never)."""
    df = result.steps()
    if df.empty or df["loss"].isna().all():
        return None
    smoothed = df["loss"].ewm(alpha=smoothing, ignore_na=True).mean()
    elapsed = df["step_s"].cumsum()
    hit = elapsed[smoothed <= target + 1e-12]
    return None if hit.empty else float(hit.iloc[0])


def final_smoothed_loss(result: JobResult, smoothing: float = 0.1) -> float | None:
    df = result.steps()
    if df.empty or df["loss"].isna().all():
        return None
    return float(df["loss"].ewm(alpha=smoothing, ignore_na=True).mean().iloc[-1])


def pick_batch(mb: MaxBatchResult, backend: str) -> int | None:
    """The fitting probe of ``backend`` with the highest samples/s (ties: the larger batch)."""
    probes = mb.probes()
    ok = probes[(probes["backend"] == backend) & probes["fits"].astype(bool) & probes["samples_s"].notna()]
    if ok.empty:
        return None
    best = ok.sort_values(["samples_s", "batch_size"], ascending=False).iloc[0]
    return int(best["batch_size"])


@dataclass
class TwoStageResult:
    """Stage 1 (max batch), stage 2 (retune) and the final native-vs-compiled pair."""

    spec: JobSpec
    profile: str
    compiled_backend: str
    max_batch: MaxBatchResult
    chosen_batch: dict[str, int | None]
    retune: RetuneResult | None
    native: JobResult | None
    compiled: JobResult | None
    target_loss: float | None
    time_to_target: dict[str, float | None] = field(default_factory=dict)
    smoothing: float = 0.1
    dataset_size: int = 100_000
    comparison_id: int | None = None

    def summary(self) -> pd.DataFrame:
        """Native and compiled side by side: batch, lr, throughput, time to the target loss, cost."""

        rows = []
        for label, job in (("native", self.native), ("compiled", self.compiled)):
            if job is None:
                continue
            s = job.spec
            row = dict(job=label, backend=s.backend, batch_size=s.batch_size, lr=s.lr, status=job.status,
                       samples_s=job.samples_s, final_loss=job.final_loss,
                       time_to_target_s=self.time_to_target.get(label))
            c = cost(job.samples_s, self.profile, s.batch_size, s.seq_len, self.dataset_size) if job.samples_s else {}
            price = c.get("price_per_hour")
            t = row["time_to_target_s"]
            row.update(usd_to_target=None if price is None or t is None else t / 3600 * price,
                       usd_per_epoch=c.get("usd_per_epoch"), hours_per_epoch=c.get("hours_per_epoch"))
            rows.append(row)
        df = pd.DataFrame(rows)
        if len(df) == 2:
            t_n, t_c = df["time_to_target_s"]
            df["speedup_to_target"] = [1.0, (t_n / t_c) if t_n and t_c else None]
        return df

    def plots(self) -> dict:
        """Figures: ``probes`` (stage 1), the retune figures (stage 2), ``time_to_loss`` (the final pair)."""

        figs = {"probes": self.max_batch.plot()}
        if self.retune is not None:
            figs.update(self.retune.plots())
        figs["time_to_loss"] = tp.plot_time_to_loss(tp.collect_time_to_loss(self), self.target_loss)
        return figs

    def __repr__(self) -> str:
        return (f"TwoStageResult(profile={self.profile!r}, chosen_batch={self.chosen_batch}, "
                f"best_lr={None if self.retune is None else self.retune.best_lr}, "
                f"time_to_target={self.time_to_target})")


def two_stage(spec: JobSpec, profile: str = "this-machine", backends: Sequence[str] = ("eager", "inductor"),
              n_trials: int = 8, memory_budget_gb: float | None = None, max_batch: int = 4096, probe_steps: int = 4,
              start: int | None = None, multiple_of: int = 1,
              tune_backend: str | None = None, tune_steps: int | None = None, eval_batches: int = 8,
              final_steps: int | None = None, storage: Any = None, seed: int = 0, smoothing: float = 0.1,
              dataset_size: int = 100_000, observer: Observer | None = None,
              stop: threading.Event | None = None, store: Store | None = None) -> TwoStageResult:
    """Stage 1: batch per backend; stage 2: retuned lr for the compiled backend; then the paired run.

    ``backends[0]`` is the native backend (``spec``'s own settings), the last one the compiled
    backend. ``tune_backend`` runs the retune trials on another backend (e.g. ``"eager"``: same
    learning dynamics, no compile per trial); by default it is the compiled backend.
    """
    from tcbench.runner.process import run

    names = list(backends)
    if len(names) < 2:
        raise ValueError(f"backends={names!r} is not allowed; give the native backend then a compiled one")
    native_b, compiled_b = names[0], names[-1]
    store = store or Store()
    mb = find_max_batch(spec.replace(backend=native_b), profile, names, start=start, max_batch=max_batch,
                        probe_steps=probe_steps, multiple_of=multiple_of, observer=observer, stop=stop, store=store,
                        memory_budget_gb=memory_budget_gb)
    chosen = {b: pick_batch(mb, b) for b in names}
    out = TwoStageResult(spec=spec, profile=mb.profile, compiled_backend=compiled_b, max_batch=mb,
                         chosen_batch=chosen, retune=None, native=None, compiled=None, target_loss=None,
                         smoothing=smoothing, dataset_size=dataset_size)
    new_batch = chosen[compiled_b]
    if new_batch is None or (stop is not None and stop.is_set()):
        return out
    tune_spec = spec.replace(backend=tune_backend or compiled_b)
    out.retune = retune_lr(tune_spec, new_batch, n_trials=n_trials, storage=storage, steps=tune_steps,
                           eval_batches=eval_batches, observer=observer, stop=stop, store=store, seed=seed)
    if out.retune.best_lr is None or (stop is not None and stop.is_set()):
        return out
    steps = final_steps or spec.steps
    native_spec = spec.replace(backend=native_b, steps=steps, loss_every=1, eval_batches=0)
    compiled_spec = dataclasses.replace(native_spec, backend=compiled_b, batch_size=new_batch, lr=out.retune.best_lr)
    with comparison_session(store, "two_stage", spec, [native_b, compiled_b], 1,
                            {"chosen_batch": chosen, "best_lr": out.retune.best_lr}) as session:
        out.comparison_id = session.comparison_id
        session.status = "done"   # the pair ran to its end: each run says whether a stop cut it short
        session.info_at_finish = lambda: {"summary": out.summary().to_dict(orient="records")}
        out.native = run(native_spec, observer, stop, store, out.comparison_id, 0, f"{native_b}@{spec.batch_size}")
        out.compiled = run(compiled_spec, observer, stop, store, out.comparison_id, 0, f"{compiled_b}@{new_batch}")
        out.target_loss = final_smoothed_loss(out.native, smoothing)
        if out.target_loss is not None:
            out.time_to_target = {"native": time_to_loss(out.native, out.target_loss, smoothing),
                                  "compiled": time_to_loss(out.compiled, out.target_loss, smoothing)}
    return out
