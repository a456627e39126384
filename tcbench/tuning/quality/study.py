"""``time_to_quality``: run candidates (each a JobSpec: native, compiled, at a bigger batch with its learning rate)
over several seeds toward one held-out target loss, and score each as MLPerf Training scores a benchmark
(``scoring``).

- **Every candidate sees the same samples between evaluations**: the held-out batches are evaluated every
  ``eval_every_samples`` samples (each candidate's ``eval_every`` is that over its batch), and every run may train
  ``budget`` times the reference's samples.
- **The target** is ``target_loss``, or by default what the reference reaches at its own ``steps``: the median over
  its seeds of its held-out loss there (MLPerf's targets come from reference runs). The reference runs first; a
  target that none of its runs reaches is refused before any other job runs (the default candidates' B1 learning
  rate — premise check, noise scale — is found after the reference: ``candidates.learning_rates``).
- **A seed** sets the initialisation and the data order; the same seed in two candidates is a pair.
- **No steps past the target**: once the target is known, each run ends at its first evaluation at or below it
  (``JobSpec.stop_at_loss``); the reference, whose runs set the default target, trains its whole budget.
- **Cost to target**: the time priced at the profile's hourly rate (``price_basis`` says whether the speed is that
  instance's or this machine's).
- **Nothing is lost**: every job is a stored run of the study's comparison row (kind ``time-to-quality``); a run
  that never reaches the target is kept as "did not converge". A study that was stopped, failed or killed resumes
  (``resume=True``): the newest unfinished study with the same settings lends its candidates and its finished runs
  (ok, diverged or over the memory budget), and only the missing seeds run.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import threading
from dataclasses import dataclass, field
from typing import Any, Sequence

import pandas as pd

from tcbench.core.cost import price_basis
from tcbench.core.events import Observer
from tcbench.core.extras import EvalPoint
from tcbench.core.options import merged
from tcbench.core.profiles import profile as get_profile
from tcbench.core.results import JobResult
from tcbench.core.spec import SEED_MAX, JobSpec, SpecError, check_number, check_same_workload
from tcbench.measure.interval import log_interval
from tcbench.runner.preflight import check as preflight
from tcbench.runner.session import comparison_session
from tcbench.store.api import Store
from tcbench.store.history import get_run
from tcbench.tuning.quality import view
from tcbench.tuning.quality.candidates import Candidate, DefaultCandidates, default_candidates, learning_rates
from tcbench.tuning.quality.projection import project, projection_table
from tcbench.tuning.quality.scoring import MIN_RUNS, PairedRatio, Score, first_at, olympic, paired_ratio

KIND = "time-to-quality"
FINISHED = ("ok", "diverged", "oom")   # a stored run with one of these statuses is not run again on resume
MAX_SEEDS = 100   # runs per candidate: MLPerf asks 5 to 10; a study of 10**20 seeds once filled 22.5 GB planning them


@dataclass(frozen=True)
class QualityOptions:
    """How ``time_to_quality`` measures (every field is also a keyword of ``time_to_quality``)."""

    seeds: int = 5                          # runs per candidate (MLPerf's olympic mean needs 3 at least)
    target_loss: float | None = None        # default: the reference's median held-out loss at its steps
    eval_batches: int = 8                   # held-out batches of each evaluation (the same ones every time)
    eval_every_samples: int | None = None   # default: about a tenth of the reference's samples
    budget: float = 3.0                     # each run's samples, in reference runs: past it, "did not converge"
    profile: str | None = None              # prices the time and bounds B1 (default: the spec's)
    big_batch: int | None = None            # B1 of the default candidates (default: find_max_batch's)
    max_batch: int | None = None            # the most B1 may be (default: 4 × the batch)
    retune: bool = False                    # also a candidate at B1 with retune_lr's learning rate
    check_premise: bool = True              # check lr0 before predicting B1's learning rate (tc.check_lr)
    resume: bool = True                     # lend the newest unfinished study's finished runs (same settings)
    horizon_steps: int | None = None        # the reference steps a user trains for: each time projected there

    def __post_init__(self) -> None:
        _check_options(self)   # a bad setting is refused where it is written, not when a study uses it


@dataclass(frozen=True)
class QualityRun:
    """One run toward the target: its candidate, seed and stored run, whether it reached the target, and when
    (wall seconds from the first step, compile included and evaluations left out; samples; steps)."""

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
    eval_s: float | None = None             # the evaluations' own seconds up to the target (never counted)
    curve: tuple[EvalPoint, ...] = ()       # every held-out evaluation of the run
    reused: bool = False                    # lent by the interrupted study it resumed


@dataclass
class QualityResult:
    """What ``time_to_quality`` measured: the target, the candidates (the first is the reference) and every run;
    the profile whose hourly rate prices the time, the learning-rate premise check (None: none was needed or run),
    and notes on the default candidates and on resuming."""

    target: float
    target_source: str
    candidates: list[Candidate]
    runs: list[QualityRun] = field(default_factory=list)
    comparison_id: int | None = None
    profile: str = "this-machine"
    premise: Any = None
    notes: list[str] = field(default_factory=list)
    resumed_from: int | None = None
    horizon_steps: int | None = None        # the horizon ``describe`` projects to (``projection``)

    @property
    def reference(self) -> Candidate:
        return self.candidates[0]

    @property
    def price_per_hour(self) -> float | None:
        return get_profile(self.profile).price_per_hour

    @property
    def price_basis(self) -> str:
        return price_basis(get_profile(self.profile), measured_on_local=True)

    def _by_seed(self, label: str, what: str) -> dict[int, float | None]:
        return {r.seed: getattr(r, what) for r in self.runs if r.label == label}

    def score(self, label: str, what: str = "time_s") -> Score:
        """The olympic mean of ``label``'s runs (``what``: "time_s" or "samples")."""
        return olympic(list(self._by_seed(label, what).values()))

    def spread(self, label: str, what: str = "time_s") -> tuple[float | None, float | None]:
        """The 95 % interval of the geometric mean over ``label``'s runs that reached the target (log scale)."""
        logs = [math.log(v) for v in self._by_seed(label, what).values() if v]
        _, low, high = log_interval(logs)
        return low, high

    def ratio(self, label: str, what: str = "time_s") -> PairedRatio:
        """reference ÷ ``label`` over the seeds both reached the target (above 1: ``label`` gets there sooner, or
        with fewer samples)."""
        return paired_ratio(self._by_seed(self.reference.label, what), self._by_seed(label, what))

    def _usd(self, seconds: float | None) -> float | None:
        rate = self.price_per_hour
        return None if seconds is None or rate is None else seconds * rate / 3600

    def table(self) -> pd.DataFrame:
        """One row per candidate: its score in time, cost and samples with the seeds' interval, the ratios against
        the reference with their intervals, how many runs did not reach the target, and its compile (the median
        seconds, and in how many runs the cache was cold)."""
        rows = []
        for c in self.candidates:
            mine = [r for r in self.runs if r.label == c.label]
            compiles = [r.compile_s for r in mine if r.compile_s is not None and c.spec.compiled]
            t, s = self.score(c.label), self.score(c.label, "samples")
            low, high = self.spread(c.label)
            tr, sr = self.ratio(c.label), self.ratio(c.label, "samples")
            rows.append(dict(candidate=c.label, backend=c.spec.backend, batch_size=c.spec.batch_size, lr=c.spec.lr,
                             time_to_target_s=t.value, time_low=low, time_high=high,
                             usd_to_target=self._usd(t.value), usd_low=self._usd(low), usd_high=self._usd(high),
                             samples_to_target=s.value,
                             speedup=tr.point, speedup_low=tr.low, speedup_high=tr.high,
                             samples_ratio=sr.point, samples_ratio_low=sr.low, samples_ratio_high=sr.high,
                             runs=len(self._by_seed(c.label, "time_s")), not_converged=t.not_converged,
                             compile_s=statistics.median(compiles) if compiles else None,
                             cold_compiles=sum(r.cache == "cold" for r in mine) if c.spec.compiled else None,
                             note=t.reason))
        return pd.DataFrame(rows)

    def projection(self, horizon_steps: int | None = None) -> pd.DataFrame:
        """Each candidate's time to what the reference reaches at ``horizon_steps`` of its steps (default: the
        study's ``horizon_steps``), projected from the runs' compile, throughput and samples ratio, with the
        seed-paired speedup's 95 % interval and the break-even horizon (``projection`` module)."""
        return projection_table(self, self._horizon(horizon_steps))

    def projection_sentences(self, horizon_steps: int | None = None) -> list[str]:
        """``projection`` in one sentence per candidate: "at 20,000 steps, inductor reaches the reference's quality
        sooner: 1.7× (…); on the medians, native is sooner below 900 steps" (``describe`` leads with them)."""
        horizon = self._horizon(horizon_steps)
        return [view.horizon_sentence(p, self.reference.label) for p in project(self, horizon)]

    def _horizon(self, horizon_steps: int | None) -> int:
        horizon = self.horizon_steps if horizon_steps is None else horizon_steps
        if horizon is None:
            raise ValueError("horizon_steps=None is not allowed here; allowed: a whole number of the reference's "
                             "steps (the study was run without horizon_steps)")
        return horizon

    def runs_table(self) -> pd.DataFrame:
        """One row per run (its curve left out: ``runs[i].curve``)."""
        return pd.DataFrame([{k: v for k, v in dataclasses.asdict(r).items() if k != "curve"} for r in self.runs])

    def plot(self) -> Any:
        """The held-out loss against wall time per candidate (seeds faint, median bold), the target dashed."""
        return view.plot_curves(self)

    def plot_bars(self) -> Any:
        """Time (and cost) to target per candidate with the seeds' 95 % intervals."""
        return view.plot_bars(self)

    def plot_horizon(self, horizon_steps: int | None = None) -> Any:
        """Each candidate's time to the reference's quality against the horizon (default: the study's
        ``horizon_steps``), a line in its seeds' 95 % band, the break-evens marked, the horizon a vertical line."""
        return view.plot_horizon(self, self._horizon(horizon_steps))

    def describe(self) -> str:
        return view.describe(self)

    def to_html(self, path: str, plotlyjs: str = "directory") -> Any:
        """The study as one HTML page (``tcbench report``)."""
        return view.to_html(self, path, plotlyjs)

    def curves(self) -> pd.DataFrame:
        """Every held-out evaluation of every run: label, seed, steps, samples, wall_s, loss, eval_s."""
        return pd.DataFrame([dict(label=r.label, seed=r.seed, **dataclasses.asdict(p))
                             for r in self.runs for p in r.curve],
                            columns=["label", "seed", "steps", "samples", "wall_s", "loss", "eval_s"])


def time_to_quality(spec: JobSpec, candidates: Sequence[Candidate] | None = None, *,
                    options: QualityOptions | None = None, observer: Observer | None = None,
                    stop: threading.Event | None = None, store: Store | None = None,
                    **overrides: Any) -> QualityResult:
    """Does each candidate reach the held-out target loss sooner, cheaper and with how many samples than ``spec``
    run natively? ``candidates``: labelled JobSpecs (default: ``candidates.default_candidates``: compiled at the
    same batch, and at a bigger batch with its predicted learning rate); the reference, ``spec`` on eager, runs
    first. Settings: ``QualityOptions``' fields, as ``options=`` or keywords (module docstring)."""
    from tcbench.runner.process import run

    if not isinstance(spec, JobSpec):
        raise SpecError("spec", spec, "a tcbench.JobSpec (the reference, run natively)")
    o = merged(QualityOptions, options, overrides, "time_to_quality")   # checked as it is made (__post_init__)
    if spec.seed + o.seeds - 1 > SEED_MAX:   # each run takes the next seed: the last must be a seed too
        raise SpecError("seed", spec.seed, f"0..{SEED_MAX - o.seeds + 1} with seeds={o.seeds}",
                        f"seed={spec.seed} is not allowed with seeds={o.seeds}: the study runs seeds {spec.seed} to "
                        f"{spec.seed + o.seeds - 1}, past {SEED_MAX}; allowed: 0..{SEED_MAX - o.seeds + 1}")
    for name in ("big_batch", "max_batch"):   # B1 is a bigger batch than the reference's, or the study has none
        value = getattr(o, name)
        if value is not None and value <= spec.batch_size:
            raise SpecError(name, value, f"a batch above the reference's batch_size={spec.batch_size} (unset: "
                            "found by the max-batch search)")
    if o.profile is not None:
        spec = spec.replace(profile=o.profile)
    reference = Candidate("native", preflight(spec.replace(backend="eager")))
    given = None if candidates is None else _check_candidates(reference, candidates)
    key = _key(reference, given, o)
    _every(o, [reference, *(given or [])])   # the reference's cadence, before any job (B1 is chosen to fit it)
    store = store or Store()   # only once every setting passed: a refusal creates no store
    earlier = _earlier(store, reference.spec, key) if o.resume else None
    if earlier is not None:
        row = store.comparison_row(earlier.comparison_id)
        if row.get("status") == "running":   # the store was reconciled on opening: its process is alive
            raise SpecError("resume", True, "False to run another study beside it",
                            f"study {earlier.comparison_id} with these settings is running now (process "
                            f"{row.get('pid')} on {row.get('host')}): wait for it to end (then this one resumes it), "
                            "stop it, or pass resume=False (--no-resume) to run another study beside it")
    result = QualityResult(target=math.nan, target_source="", candidates=[reference], profile=reference.spec.profile,
                           horizon_steps=o.horizon_steps)
    made: DefaultCandidates | None = None   # default candidates whose B1 learning rate is still to be found
    resumed = earlier is not None and earlier.info.get("rates_known", True)
    if resumed:
        result.candidates += [Candidate(label, JobSpec.from_stored(json.dumps(d)))
                              for label, d in earlier.info["plan"][1:]]
        # what the plan came from (the premise check B1's learning rate rests on, the notes on left-out candidates)
        # is the resumed study's: it is not run again, and not forgotten
        if earlier.info.get("premise") is not None:
            result.premise = StoredPremise(earlier.info["premise"], earlier.info.get("premise_held"))
        result.notes += [n for n in earlier.info.get("notes") or [] if not n.startswith("resumed study ")]
    elif given is not None:
        result.candidates += given
    else:   # planned now (B1); their learning rate once the reference's runs have given the target
        ref = reference.spec
        grain = o.eval_every_samples or ref.steps * ref.global_batch
        made = default_candidates(ref, o, observer, stop, store, grain)
        result.candidates += [Candidate(c.label, preflight(c.spec)) for c in made.candidates]
        result.notes = made.notes
    if earlier is not None:
        result.resumed_from = earlier.comparison_id
        result.notes.append(f"resumed study {earlier.comparison_id}: its " + ("candidates and " if resumed else "")
                            + "finished runs kept")
    rates_known = made is None or made.big_batch is None
    others = result.candidates[1:]
    every = _every(o, result.candidates)
    ref_samples = reference.spec.steps * reference.spec.global_batch
    seeds = [spec.seed + i for i in range(o.seeds)]
    kept = _kept(store, earlier, {c.label for c in result.candidates}, seeds)
    plan = [[c.label, c.spec.to_dict()] for c in result.candidates]
    info = dict(seeds=o.seeds, budget=o.budget, eval_every_samples=every, target_loss=o.target_loss, key=key,
                plan=plan, resumed_from=result.resumed_from, reused_runs=sorted(r.run_id for r in kept.values()),
                notes=result.notes, premise=getattr(result.premise, "verdict", None),
                premise_held=getattr(result.premise, "held", None), rates_known=rates_known,
                horizon_steps=o.horizon_steps)
    with comparison_session(store, KIND, reference.spec, [c.label for c in result.candidates], o.seeds, info,
                            stop) as session:
        result.comparison_id = session.comparison_id
        session.finish_info.update(info)   # kept at the finish however it ends: a later study resumes from it
        done = dict(kept)

        def job(c: Candidate, i: int, seed: int, target: float | None) -> None:
            if (c.label, seed) in done or session.stopped:
                return
            spec_i = _job(c.spec, o, every, ref_samples).replace(seed=seed, stop_at_loss=target)
            done[(c.label, seed)] = run(spec_i, observer, session.stop, store, session.comparison_id, i,
                                        label=c.label)

        for i, seed in enumerate(seeds):   # the reference first: the default target comes from it
            job(reference, i, seed, o.target_loss)
        if session.stopped and o.target_loss is None:   # no target yet: the reference's runs are kept, none scored
            result.target_source = "stopped by the user before the reference's runs ended"
            result.runs = _runs(done, math.nan, kept)
            return result
        result.target, result.target_source = _target(o, reference, done, seeds)
        # stored as soon as it is known: a study interrupted (Ctrl-C, kill -9) among its candidates still scores
        # what they ran
        session.finish_info.update(target=result.target, target_source=result.target_source)
        if not rates_known and not session.stopped:   # B1's learning rate: the premise check and the noise scale
            learning_rates(made, reference.spec, o, observer, session.stop, store)
            result.candidates[1:] = [Candidate(c.label, preflight(c.spec)) for c in made.candidates]
            others, result.premise = result.candidates[1:], made.premise
            session.finish_info.update(plan=[[c.label, c.spec.to_dict()] for c in result.candidates],
                                       rates_known=not session.stopped, notes=result.notes,
                                       premise=getattr(result.premise, "verdict", None),
                                       premise_held=getattr(result.premise, "held", None))
        store.update_comparison_info(session.comparison_id, session.info())
        for i, seed in enumerate(seeds):
            for c in others:
                job(c, i, seed, result.target)
        result.runs = _runs(done, result.target, kept)
        session.finish_info.update(target=result.target, target_source=result.target_source,
                                   scores={c.label: result.score(c.label).value for c in result.candidates})
    return result


@dataclass(frozen=True)
class StoredPremise:
    """A premise check as a stored study keeps it: its verdict, and whether lr0 held (None: inconclusive)."""

    verdict: str
    held: bool | None = None


def load_quality(comparison_id: int, store: Store | None = None) -> QualityResult:
    """A stored time-to-quality study rebuilt (its candidates, target and runs, those it lent from the study it
    resumed included), no rerun; a comparison of another kind is a ValueError naming it."""
    store = store or Store(create=False)
    row = store.comparison_row(comparison_id)
    if row["kind"] != KIND:
        raise ValueError(f"comparison {comparison_id} is a {row['kind']} session; allowed: the id of a {KIND} study "
                         "(tcbench comparisons lists them with their kind)")
    info = json.loads(row.get("info_json") or "{}")
    candidates = [Candidate(label, JobSpec.from_stored(json.dumps(d))) for label, d in info.get("plan") or []]
    if not candidates:
        raise ValueError(f"comparison {comparison_id} holds no plan of candidates: it was stored by an older tcbench")
    target = info.get("target")
    result = QualityResult(target=math.nan if target is None else float(target),
                           target_source=info.get("target_source") or "none: the study ended before its target "
                                                                      "was known",
                           candidates=candidates, comparison_id=int(comparison_id),
                           profile=candidates[0].spec.profile, notes=list(info.get("notes") or []),
                           resumed_from=info.get("resumed_from"), horizon_steps=info.get("horizon_steps"),
                           premise=None if info.get("premise") is None else StoredPremise(info["premise"],
                                                                                          info.get("premise_held")))
    status = str(row.get("status") or "")
    if status not in ("done", ""):   # show and report say so first: its table holds only what finished
        why = f" ({info['error']})" if info.get("error") else ""
        result.notes.insert(0, "this study is still running: the runs below are those finished so far"
                            if status == "running" else f"this study ended {status}{why}, not done: the runs below "
                            "are those that finished (run it again with the same settings to resume it)")
    lent = set(info.get("reused_runs") or [])
    runs = {}
    for run_id in sorted(lent | set(store.comparison_runs(comparison_id)["run_id"].astype(int))):
        res = get_run(int(run_id), store)
        if res.status in FINISHED or run_id not in lent:
            runs[(res.label, res.spec.seed)] = res
    result.runs = [_quality_run(label, seed, res, result.target, res.run_id in lent)
                   for (label, seed), res in runs.items()]
    return result


def _check_options(o: QualityOptions) -> None:
    check_number("seeds", o.seeds, MIN_RUNS, MAX_SEEDS, whole=True)
    check_number("eval_batches", o.eval_batches, 1, whole=True)
    check_number("budget", o.budget, 1)
    check_number("target_loss", o.target_loss, 0, open_low=True, optional=True)
    check_number("eval_every_samples", o.eval_every_samples, 1, whole=True, optional=True)
    check_number("big_batch", o.big_batch, 1, whole=True, optional=True)
    check_number("max_batch", o.max_batch, 1, whole=True, optional=True)
    check_number("horizon_steps", o.horizon_steps, 1, whole=True, optional=True)
    for name in ("retune", "check_premise", "resume"):
        if not isinstance(getattr(o, name), bool):
            raise SpecError(name, getattr(o, name), "True or False")


def _check_candidates(reference: Candidate, candidates: Sequence[Candidate]) -> list[Candidate]:
    """The user's candidates, each preflighted and checked against the reference's workload, before any job."""
    allowed = "a list of tcbench.Candidate(label, spec), or None for the default candidates"
    if isinstance(candidates, (str, bytes, Candidate)) or not isinstance(candidates, Sequence):
        raise SpecError("candidates", candidates, allowed)
    out = list(candidates)
    if not out:
        raise SpecError("candidates", out, "at least one candidate (None: the default candidates)")
    for c in out:
        if not isinstance(c, Candidate) or not isinstance(c.spec, JobSpec):
            raise SpecError("candidates", c, allowed)
        if not isinstance(c.label, str) or not c.label.strip():
            raise SpecError("candidates", c.label, "a non-empty label for each candidate")
    labels = [reference.label, *(c.label for c in out)]
    if len(set(labels)) != len(labels):
        raise SpecError("candidates", labels, "labels that differ from each other and from 'native'")
    checked = [Candidate(c.label, preflight(c.spec)) for c in out]
    for c in checked:
        check_same_workload("candidates", c.label, reference.spec, c.spec)
    return checked


def _every(o: QualityOptions, candidates: list[Candidate]) -> int:
    """The samples between evaluations: ``eval_every_samples``, else the smallest multiple of every candidate's
    batch that divides the reference's samples and is at least a tenth of them."""
    ref = candidates[0].spec
    total = ref.steps * ref.global_batch
    if o.eval_every_samples is None:
        step = math.lcm(*(c.spec.global_batch for c in candidates))
        fits = [m for m in range(step, total + 1, step) if total % m == 0]
        if not fits:
            raise SpecError("steps", ref.steps, f"a number of steps whose {total} samples (× batch {ref.global_batch}) "
                            f"are a multiple of every candidate's batch (their least common multiple: {step})")
        return next((m for m in fits if m * 10 >= total), fits[-1])
    every = o.eval_every_samples
    for c in candidates:
        if every % c.spec.global_batch:
            raise SpecError("eval_every_samples", every, f"a multiple of every candidate's batch ({c.label}: "
                            f"{c.spec.global_batch}), so that each evaluates after the same samples")
    if total % every:
        raise SpecError("eval_every_samples", every, f"a divisor of the reference's {total} samples (its loss at "
                        "its steps is the default target)")
    return every


def _job(spec: JobSpec, o: QualityOptions, every: int, ref_samples: int) -> JobSpec:
    """A candidate's job: trained up to ``budget`` reference runs of samples, evaluated every ``every`` samples."""
    steps = math.ceil(o.budget * ref_samples / spec.global_batch)
    return spec.replace(steps=steps, warmup_steps=min(spec.warmup_steps, steps - 1), eval_batches=o.eval_batches,
                        eval_every=every // spec.global_batch)


def _key(reference: Candidate, given: list[Candidate] | None, o: QualityOptions) -> dict:
    """What makes two studies the same for resuming: the reference, the candidates given (None: the defaults) and
    every setting but ``resume`` and ``horizon_steps`` (neither changes what runs), as the stored JSON reads back."""
    settings = {k: v for k, v in dataclasses.asdict(o).items() if k not in ("resume", "horizon_steps")}
    key = dict(reference=reference.spec.to_dict(), settings=settings,
               candidates=None if given is None else [[c.label, c.spec.to_dict()] for c in given])
    return json.loads(json.dumps(key, default=str))


def _earlier(store: Store, spec: JobSpec, key: dict) -> Any:
    """The newest study with these settings that did not finish (stopped, failed, or its process killed)."""
    return next((c for c in store.unfinished_comparisons(KIND, spec.model, spec.size)
                 if c.info.get("key") == key and c.info.get("plan")), None)


def _kept(store: Store, earlier: Any, labels: set[str], seeds: list[int]) -> dict[tuple[str, int], JobResult]:
    """The earlier study's finished runs (its own and those it had kept), by (label, seed)."""
    if earlier is None:
        return {}
    ids = set(earlier.info.get("reused_runs") or [])
    ids |= set(store.comparison_runs(earlier.comparison_id)["run_id"].astype(int))
    out: dict[tuple[str, int], JobResult] = {}
    for run_id in sorted(ids):
        res = get_run(int(run_id), store)
        if res.status in FINISHED and res.label in labels and res.spec.seed in seeds:
            out[(res.label, res.spec.seed)] = res
    return out


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


def _runs(done: dict[tuple[str, int], JobResult], target: float,
          kept: dict[tuple[str, int], JobResult]) -> list[QualityRun]:
    return [_quality_run(label, seed, res, target, (label, seed) in kept) for (label, seed), res in done.items()]


def _quality_run(label: str, seed: int, res: JobResult, target: float, reused: bool = False) -> QualityRun:
    point = first_at(res.extra.eval_curve, target) if math.isfinite(target) else None
    return QualityRun(label=label, seed=seed, run_id=res.run_id, status=res.status, reached=point is not None,
                      time_s=None if point is None else point.wall_s,
                      samples=None if point is None else point.samples,
                      steps=None if point is None else point.steps,
                      compile_s=res.compile_latency_s, cache=res.cache_state,
                      eval_s=None if point is None else point.eval_s, curve=tuple(res.extra.eval_curve),
                      reused=reused)
