"""``time_to_quality``: run candidates (each a JobSpec: native, compiled, at a bigger batch with its learning rate)
over several seeds toward one held-out target loss, and score each as MLPerf Training scores a benchmark
(``scoring``).

- **Every candidate sees the same samples between evaluations**: the held-out batches are evaluated every
  ``eval_every_samples`` samples (each candidate's ``eval_every`` is that over its batch), and every run may train
  ``budget`` times the reference's samples.
- **The target** is ``target_loss``, or by default what the reference reaches at its own ``steps``: the median over
  its seeds of its held-out loss there (MLPerf's targets come from reference runs). The reference runs first; a
  target that none of its runs reaches is refused before any other candidate runs.
- **A seed** sets the initialisation and the data order; the same seed in two candidates is a pair.
- **Nothing is lost**: every job is a stored run of the study's comparison row (kind ``time-to-quality``); a run
  that never reaches the target is kept as "did not converge".
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import threading
from dataclasses import dataclass, field
from typing import Any, Sequence

import pandas as pd

from tcbench.core.events import Observer
from tcbench.core.options import merged
from tcbench.core.results import JobResult
from tcbench.core.spec import JobSpec, SpecError, check_number
from tcbench.runner.preflight import check as preflight
from tcbench.runner.session import comparison_session
from tcbench.store.api import Store
from tcbench.tuning.quality.scoring import MIN_RUNS, PairedRatio, Score, first_at, olympic, paired_ratio

KIND = "time-to-quality"


@dataclass(frozen=True)
class Candidate:
    """One way to train the model: a ``label`` and the JobSpec it runs (its backend, batch, learning rate)."""

    label: str
    spec: JobSpec


@dataclass(frozen=True)
class QualityOptions:
    """How ``time_to_quality`` measures (every field is also a keyword of ``time_to_quality``)."""

    seeds: int = 5                          # runs per candidate (MLPerf's olympic mean needs 3 at least)
    target_loss: float | None = None        # default: the reference's median held-out loss at its steps
    eval_batches: int = 8                   # held-out batches of each evaluation (the same ones every time)
    eval_every_samples: int | None = None   # default: a tenth of the reference's samples
    budget: float = 3.0                     # each run's samples, in reference runs: past it, "did not converge"


@dataclass(frozen=True)
class QualityRun:
    """One run toward the target: its candidate, seed and stored run, whether it reached the target, and when
    (wall seconds from the job's start, compile included and evaluations left out; samples; steps)."""

    label: str
    seed: int
    run_id: int | None
    status: str
    reached: bool
    time_s: float | None
    samples: int | None
    steps: int | None
    compile_s: float | None
    cache: str


@dataclass
class QualityResult:
    """What ``time_to_quality`` measured: the target, the candidates (the first is the reference) and every run."""

    target: float
    target_source: str
    candidates: list[Candidate]
    runs: list[QualityRun] = field(default_factory=list)
    comparison_id: int | None = None

    @property
    def reference(self) -> Candidate:
        return self.candidates[0]

    def _by_seed(self, label: str, what: str) -> dict[int, float | None]:
        return {r.seed: getattr(r, what) for r in self.runs if r.label == label}

    def score(self, label: str, what: str = "time_s") -> Score:
        """The olympic mean of ``label``'s runs (``what``: "time_s" or "samples")."""
        return olympic(list(self._by_seed(label, what).values()))

    def ratio(self, label: str, what: str = "time_s") -> PairedRatio:
        """reference ÷ ``label`` over the seeds both reached the target (above 1: ``label`` gets there sooner, or
        with fewer samples)."""
        return paired_ratio(self._by_seed(self.reference.label, what), self._by_seed(label, what))

    def table(self) -> pd.DataFrame:
        """One row per candidate: its score in time and samples, the ratios against the reference with their
        intervals, and how many runs did not reach the target."""
        rows = []
        for c in self.candidates:
            t, s = self.score(c.label), self.score(c.label, "samples")
            tr, sr = self.ratio(c.label), self.ratio(c.label, "samples")
            rows.append(dict(candidate=c.label, backend=c.spec.backend, batch_size=c.spec.batch_size, lr=c.spec.lr,
                             time_to_target_s=t.value, samples_to_target=s.value,
                             speedup=tr.point, speedup_low=tr.low, speedup_high=tr.high,
                             samples_ratio=sr.point, samples_ratio_low=sr.low, samples_ratio_high=sr.high,
                             runs=len(self._by_seed(c.label, "time_s")), not_converged=t.not_converged,
                             note=t.reason))
        return pd.DataFrame(rows)

    def runs_table(self) -> pd.DataFrame:
        return pd.DataFrame([dataclasses.asdict(r) for r in self.runs])


def time_to_quality(spec: JobSpec, candidates: Sequence[Candidate] | None = None, *,
                    options: QualityOptions | None = None, observer: Observer | None = None,
                    stop: threading.Event | None = None, store: Store | None = None,
                    **overrides: Any) -> QualityResult:
    """Does each candidate reach the held-out target loss sooner (and with how many samples) than ``spec`` run
    natively? ``candidates``: labelled JobSpecs (default: inductor at the same batch and learning rate); the
    reference, ``spec`` on eager, runs first. Settings: ``QualityOptions``' fields, as ``options=`` or keywords."""
    from tcbench.runner.process import run

    o = merged(QualityOptions, options, overrides, "time_to_quality")
    reference = Candidate("native", preflight(spec.replace(backend="eager")))
    others = list(candidates) if candidates is not None else [
        Candidate("inductor", spec.replace(backend="inductor"))]
    every = _check(o, reference, others)
    store = store or Store()
    ref_samples = reference.spec.steps * reference.spec.global_batch
    labels = [reference.label, *(c.label for c in others)]
    info = dict(seeds=o.seeds, budget=o.budget, eval_every_samples=every, target_loss=o.target_loss)
    result = QualityResult(target=math.nan, target_source="", candidates=[reference, *others])
    with comparison_session(store, KIND, reference.spec, labels, o.seeds, info, stop) as session:
        result.comparison_id = session.comparison_id
        jobs = {c.label: _job(c.spec, o, every, ref_samples) for c in result.candidates}
        seeds = [spec.seed + i for i in range(o.seeds)]
        done: dict[tuple[str, int], JobResult] = {}
        for i, seed in enumerate(seeds):   # the reference first: the target comes from it
            if session.stopped:
                break
            done[(reference.label, seed)] = run(jobs[reference.label].replace(seed=seed), observer, session.stop,
                                                store, session.comparison_id, i, reference.label)
        if session.stopped:   # before the target is known: the reference's runs are kept, nothing is scored
            result.target_source = "stopped by the user before the reference's runs ended"
            result.runs = [_quality_run(label, seed, res, math.nan) for (label, seed), res in done.items()]
            return result
        result.target, result.target_source = _target(o, reference, done, seeds)
        for i, seed in enumerate(seeds):
            for c in others:
                if session.stopped:
                    break
                done[(c.label, seed)] = run(jobs[c.label].replace(seed=seed), observer, session.stop, store,
                                            session.comparison_id, i, c.label)
        result.runs = [_quality_run(label, seed, res, result.target) for (label, seed), res in done.items()]
        session.finish_info.update(target=result.target, target_source=result.target_source,
                                   scores={c.label: result.score(c.label).value for c in result.candidates})
    return result


def _check(o: QualityOptions, reference: Candidate, others: list[Candidate]) -> int:
    """Refuse bad settings before any job starts; returns the samples between evaluations."""
    check_number("seeds", o.seeds, MIN_RUNS, whole=True)
    check_number("eval_batches", o.eval_batches, 1, whole=True)
    check_number("budget", o.budget, 1)
    check_number("target_loss", o.target_loss, 0, open_low=True, optional=True)
    labels = [reference.label, *(c.label for c in others)]
    if len(set(labels)) != len(labels):
        raise SpecError("candidates", labels, "labels that differ from each other and from 'native'")
    for c in others:
        if not isinstance(c, Candidate):
            raise SpecError("candidates", c, "tcbench.Candidate(label, spec) items")
        preflight(c.spec)
    ref = reference.spec
    every = o.eval_every_samples or max(ref.global_batch, ref.steps * ref.global_batch // 10)
    check_number("eval_every_samples", every, 1, whole=True)
    for c in [reference, *others]:
        if every % c.spec.global_batch:
            raise SpecError("eval_every_samples", every, f"a multiple of every candidate's batch ({c.label}: "
                            f"{c.spec.global_batch}), so that each evaluates after the same samples")
    if (ref.steps * ref.global_batch) % every:
        raise SpecError("eval_every_samples", every, f"a divisor of the reference's {ref.steps * ref.global_batch} "
                        "samples (its loss at its steps is the default target)")
    return every


def _job(spec: JobSpec, o: QualityOptions, every: int, ref_samples: int) -> JobSpec:
    """A candidate's job: trained up to ``budget`` reference runs of samples, evaluated every ``every`` samples."""
    steps = math.ceil(o.budget * ref_samples / spec.global_batch)
    return spec.replace(steps=steps, warmup_steps=min(spec.warmup_steps, steps - 1), eval_batches=o.eval_batches,
                        eval_every=every // spec.global_batch)


def _target(o: QualityOptions, reference: Candidate, done: dict, seeds: list[int]) -> tuple[float, str]:
    """The target loss and where it came from; a SpecError when no reference run reaches it (or none ran)."""
    at = reference.spec.steps
    losses = [next((p.loss for p in done[(reference.label, s)].extra.eval_curve if p.steps == at), None)
              for s in seeds if (reference.label, s) in done]
    if o.target_loss is None:
        known = [x for x in losses if x is not None and math.isfinite(x)]
        if not known:
            raise RuntimeError(f"no reference run evaluated its held-out loss at its {at} steps: "
                               + "; ".join(f"run {r.run_id} {r.status} {r.error[:200]}" for r in done.values()))
        return statistics.median(known), f"the reference's median held-out loss at its {at} steps"
    reached = [s for s in seeds if (reference.label, s) in done
               and first_at(done[(reference.label, s)].extra.eval_curve, o.target_loss) is not None]
    if not reached:
        raise SpecError("target_loss", o.target_loss, "a loss the reference reaches within its budget "
                        f"(its runs ended at {', '.join(f'{x:.4g}' for x in losses if x is not None) or 'none'})")
    return o.target_loss, "given"


def _quality_run(label: str, seed: int, res: JobResult, target: float) -> QualityRun:
    point = first_at(res.extra.eval_curve, target) if math.isfinite(target) else None
    return QualityRun(label=label, seed=seed, run_id=res.run_id, status=res.status, reached=point is not None,
                      time_s=None if point is None else point.wall_s,
                      samples=None if point is None else point.samples,
                      steps=None if point is None else point.steps,
                      compile_s=res.compile_latency_s, cache=res.cache_state)
