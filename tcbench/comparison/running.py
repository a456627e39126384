"""Running a comparison: ``compare`` (the native job and each compiled backend), ``compare_configs`` (labelled
specs that differ in more than their backend), ``compare_script`` (a training script of your own) and
``noise_floor`` (the job against itself, A/A). Each checks its arguments before anything starts, stores the
comparison's row, then plays its rounds — alternating the order, each job in its own process — until the fixed
count or the adaptive rule says stop."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from contextlib import AbstractContextManager
from typing import Any, Mapping, Sequence

from tcbench.comparison.result import Comparison, NoiseFloor, first_launch_s, one_off_compile_s
from tcbench.comparison.rounds import DEFAULT_ROUNDS, MAX_ROUNDS, ROUNDS_CAP, rounds_rule
from tcbench.comparison.stored import earlier_spreads
from tcbench.core.results import AA, aa_label
from tcbench.core.spec import BACKENDS, JobSpec, check_same_workload
from tcbench.measure.interval import RoundsRule
from tcbench.runner.preflight import check as preflight
from tcbench.core.events import Observer
from tcbench.core.profiles import nvidia_gpus
from tcbench.runner.process import run
from tcbench.runner.session import ComparisonSession, Either, comparison_session
from tcbench.runner.turns import Turns
from tcbench.store.api import Store

PAIRINGS = ("auto", "sequential", "lockstep")


def compare(spec: JobSpec, backends: Sequence[str] = ("inductor",), rounds: int | None = None,
            observer: Observer | None = None, stop: threading.Event | None = None,
            store: Store | None = None, kind: str = "compare", resolve: float | None = None,
            budget_s: float | None = None, max_rounds: int = MAX_ROUNDS, pairing: str = "auto") -> Comparison:
    """Run ``spec`` natively and with each backend in ``backends``, in alternating rounds, until the answer is known.

    Rounds alternate the order (A B, then B A, ...) so a drift of the machine does not favour one side, and every
    round forks its jobs from a warm launcher of its own, so no two rounds share a launcher's luck (its memory layout).

    - Default: rounds are added until every speedup's interval is narrow enough to decide the verdict at ±5 %
      (``DEFAULT_RESOLVE``; ``RoundsRule.resolved``: its 95 % and 90 % half-widths together within it) or
      60 s of rounds (``DEFAULT_BUDGET_S``; a backend's first compile into an empty cache is paid once and not
      counted) have passed, at most ``max_rounds``. ``resolve=0.03, budget_s=120`` asks for
      another resolution or budget (``budget_s=None`` with a ``resolve``: no time limit); ``rounds`` is then the
      first stage (default 6: ``PILOT_ROUNDS``). The interval stays valid under this stopping rule (Stein's two-stage
      procedure: ``tcbench.measure.interval``). ``Comparison.stop_reason`` says why the rounds ended. With several
      backends, one that is resolved, or decided beyond doubt (its 99.9 % interval excludes 1), sits out while
      another is neither (``Comparison.next_labels``); its verdict says how many rounds it ran.
    - ``rounds=3`` alone: exactly 3 rounds.

    ``pairing``: "lockstep" starts a round's jobs together and, once each has compiled, lets them take turns of a
    few measured steps on the same CPUs, so that the machine's speed of the moment is common to both sides of every
    turn (``tcbench.runner.turns``; jobs of one process each: tcbench's worker, or a script's ``track()`` or
    ``TcbenchCallback``); "sequential" runs them one after the other; "auto" (default): lock-step where every job
    can take turns and no GPU is present, else sequential (``Comparison.pairing`` says which ran). On this 2-core CPU
    lock-step rounds spread 2-10 times less than sequential ones (docs/concepts/measurement.md, "Lock-step rounds").

    ``spec.backend`` inside ``backends`` runs the job against itself (A/A, labelled ``"eager (A/A)"``); its interval
    excludes 1 in about 5 % of comparisons, as any 95 % interval does when nothing differs.
    """
    cmp = _prepared(spec, backends, rounds, kind, rounds_rule(rounds, resolve, budget_s, max_rounds))
    cmp.pairing = _pairing(pairing, cmp)
    store = store or Store()
    cmp.between = earlier_spreads(store, cmp)
    with _session(cmp, store, stop) as session:
        _play(cmp, session, observer, store)
    return cmp


def compare_configs(native: JobSpec, variants: Mapping[str, JobSpec], rounds: int | None = None,
                    observer: Observer | None = None, stop: threading.Event | None = None, store: Store | None = None,
                    kind: str = "compare", resolve: float | None = None, budget_s: float | None = None,
                    max_rounds: int = MAX_ROUNDS, pairing: str = "auto") -> Comparison:
    """``compare`` for jobs that differ in more than their backend: ``native`` against each labelled spec of
    ``variants`` (``{"inductor: default": spec_a, "inductor: bf16": spec_b}``), in the same alternating rounds, with
    the same rule, intervals and verdicts (and ``pairing``); each variant's jobs are stored under its label."""
    if not isinstance(native, JobSpec) or not variants or not all(isinstance(v, JobSpec) for v in variants.values()):
        raise TypeError("compare_configs takes a JobSpec and a non-empty mapping of labels to JobSpecs")
    rule = rounds_rule(rounds, resolve, budget_s, max_rounds)
    rounds = rule.pilot if rule is not None else rounds
    _check(native, [], rounds)
    spec = preflight(native)
    taken = {spec.backend, *BACKENDS}
    for label in variants:
        if not isinstance(label, str) or not label.strip() or label in taken or label.endswith(AA):
            raise ValueError(f"variants has the label {label!r}; allowed: a non-empty name other than a backend's, "
                             "not ending in ' (A/A)'")
    prepared = {label: preflight(v) for label, v in variants.items()}
    for label, variant in prepared.items():
        check_same_workload("variants", label, spec, variant)
    cmp = Comparison(spec=spec, backends=[spec.backend, *variants], rounds=rounds, kind=kind, rule=rule,
                     variants=prepared)
    cmp.pairing = _pairing(pairing, cmp)
    store = store or Store()
    cmp.between = earlier_spreads(store, cmp)
    with _session(cmp, store, stop) as session:
        _play(cmp, session, observer, store)
    return cmp


def compare_script(script: str, args: Sequence[str] = (), backends: Sequence[str] = ("inductor",),
                   rounds: int | None = DEFAULT_ROUNDS, observer: Observer | None = None,
                   stop: threading.Event | None = None, store: Store | None = None, resolve: float | None = None,
                   budget_s: float | None = None, pairing: str = "auto", **spec_fields: Any) -> Comparison:
    """Run ``python script *args`` natively (eager) and with each backend in ``backends``, ``rounds``
    alternating rounds, each job in its own process; the same ``Comparison`` as ``compare``. A script's rounds are
    fixed (3) unless ``resolve`` / ``budget_s`` ask for adaptive rounds as ``compare`` has them. ``pairing`` as in
    ``compare``: on a CPU a round's scripts run together and take turns of 5 measured steps, each at its tracker's
    ``t.step`` (or the Trainer callback's step), outside the step's clock.

    ``spec_fields`` are JobSpec fields: ``steps`` (the cap the script is measured for), ``warmup_steps``,
    ``loss_every``, ``threads``, ``batch_size`` / ``seq_len`` (only used when the script does not report its
    batch), ``model`` (the name the runs are shown under; default the script's file name), ``stall_s``, ...
    A missing script, one that is not a ``.py`` file or arguments that are not a list of strings are a
    ``SpecError`` naming ``script`` / ``script_args`` before any process starts.
    """
    spec = JobSpec(script=script, script_args=args, **spec_fields)
    if resolve is not None or budget_s is not None:
        rounds = None if rounds == DEFAULT_ROUNDS else rounds
    return compare(spec, backends=backends, rounds=rounds, observer=observer, stop=stop, store=store, resolve=resolve,
                   budget_s=budget_s, pairing=pairing)


def noise_floor(spec: JobSpec, rounds: int = DEFAULT_ROUNDS, observer: Observer | None = None,
                stop: threading.Event | None = None, store: Store | None = None,
                pairing: str = "auto") -> NoiseFloor:
    """Run ``spec`` against itself (A/A, ``rounds`` rounds) and report the smallest speedup resolvable now
    (``pairing`` as in ``compare``)."""
    store = store or Store()
    cmp = _prepared(spec, [spec.backend], rounds, "noise-floor")
    cmp.pairing = _pairing(pairing, cmp)
    with _session(cmp, store, stop) as session:
        _play(cmp, session, observer, store)
        row = cmp.row(cmp.backends[1])
        nf = NoiseFloor(cmp, row.speedup, row.speedup_ci_low, row.speedup_ci_high, row.verdict_kind, row.verdict)
        session.info_at_finish = None   # measured to the end: the row keeps the noise floor, not the summary
        session.finish_info = {"noise_floor": nf.summary()}
    return nf


def _check(spec: JobSpec, backends: Sequence[str], rounds: Any) -> None:
    if not isinstance(spec, JobSpec):
        raise TypeError(f"spec={spec!r} is not a tcbench.JobSpec")
    for b in backends:
        if b not in BACKENDS:
            raise ValueError(f"backends contains {b!r}; allowed: {', '.join(BACKENDS)}")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or not 1 <= rounds <= ROUNDS_CAP:
        raise ValueError(f"rounds={rounds!r} is not allowed; it must be a whole number in 1..{ROUNDS_CAP}")


def _prepared(spec: JobSpec, backends: Sequence[str], rounds: int | None, kind: str,
              rule: RoundsRule | None = None) -> Comparison:
    """The checked comparison, its spec preflighted before the comparison is stored or any job starts (run()
    preflights each job's spec again)."""
    backends = list(backends)
    rounds = rule.pilot if rule is not None else rounds
    _check(spec, backends, rounds)
    spec = preflight(spec)
    for b in dict.fromkeys(backends):   # what only a backend's job would find (a scope the model lacks): before any job
        if b != spec.backend:
            preflight(spec.replace(backend=b))
    labels = [spec.backend, *[aa_label(b) if b == spec.backend else b for b in dict.fromkeys(backends)]]
    return Comparison(spec=spec, backends=labels, rounds=rounds, kind=kind, rule=rule)


def _pairing(pairing: Any, cmp: Comparison) -> str:
    """``pairing`` checked against the comparison's jobs, before anything is stored or started."""
    if pairing not in PAIRINGS:
        raise ValueError(f"pairing={pairing!r} is not allowed; allowed: {', '.join(map(repr, PAIRINGS))}")
    alone = [s for s in map(cmp.spec_for, cmp.backends) if s.world_size > 1]
    if pairing == "auto":
        return "sequential" if alone or nvidia_gpus() else "lockstep"
    if pairing == "lockstep" and alone:
        raise ValueError(f"pairing='lockstep' is not allowed for a data-parallel job (nproc={alone[0].nproc}): only "
                         "a job of one process (tcbench's worker, or a script's tracker) takes turns; allowed: "
                         "pairing='sequential' or 'auto'")
    return pairing


def _session(cmp: Comparison, store: Store,
             stop: threading.Event | None) -> AbstractContextManager[ComparisonSession]:
    """The comparison's row: any error leaves it ``interrupted`` with the summary measured until then."""
    info = {} if cmp.rule is None else {"rule": dataclasses.asdict(cmp.rule)}
    if cmp.pairing != "sequential":
        info["pairing"] = cmp.pairing
    return comparison_session(store, cmp.kind, cmp.spec, cmp.backends, cmp.rounds, info, stop,
                              error_status="interrupted")


def _play(cmp: Comparison, session: ComparisonSession, observer: Observer | None, store: Store) -> None:
    """Every round of the comparison, alternating the order, until its rule says stop; the row's info is its
    summary (and, for adaptive rounds, the rule, the rounds that ran and why they stopped)."""
    cmp.comparison_id, cmp.created = session.comparison_id, time.time()
    session.info_at_finish = lambda: {"summary": json.loads(cmp.summary().to_json(orient="records")),
                                      **({} if cmp.rule is None else {"rule": dataclasses.asdict(cmp.rule),
                                                                      "stop_reason": cmp.stop_reason,
                                                                      "stop_kind": cmp.stop_kind}),
                                      **({"between": cmp.between} if cmp.between else {}),
                                      **({"pairing": cmp.pairing} if cmp.pairing != "sequential" else {})}
    started = time.monotonic()
    took: list[tuple[tuple[str, ...], float]] = []   # per round: its labels, its seconds less its one-off costs
    rnd = 0
    while not session.stopped:
        labels = cmp.next_labels()
        kind, reason = _stop_reason(cmp, rnd, time.monotonic() - started - _one_off_s(cmp),
                                    _next_round_s(took, tuple(labels)))
        if reason:
            cmp.stop_kind, cmp.stop_reason = kind, reason
            break
        draw = object()   # every round its own warm launcher: rounds never share a launcher's luck
        order = labels if rnd % 2 == 0 else labels[::-1]
        round_start, one_off_before = time.monotonic(), _one_off_s(cmp)
        if cmp.pairing == "lockstep":
            cmp.results.extend(_lockstep_round(cmp, order, rnd, observer, session, store, draw))
        else:
            for label in order:
                if session.stopped:
                    break
                cmp.results.append(run(cmp.spec_for(label), observer, session.stop, store, cmp.comparison_id, rnd,
                                       f"{label}#{rnd}", label=label if label != cmp.spec_for(label).backend else "",
                                       draw=draw))
        took.append((tuple(labels), time.monotonic() - round_start - (_one_off_s(cmp) - one_off_before)))
        rnd += 1
        if cmp.rule is not None:
            cmp.rounds = session.rounds = rnd
    if session.stopped:
        cmp.stop_kind, cmp.stop_reason = "stopped", "stopped by the user"


def _lockstep_round(cmp: Comparison, order: list[str], rnd: int, observer: Observer | None,
                    session: ComparisonSession, store: Store, draw: object) -> list:
    """One lock-step round: every job of ``order`` started at once, each waited on by a thread of its own, taking
    turns in that order; their results in that order. An exception here (the caller's KeyboardInterrupt) or in a
    job's thread (the caller's observer failed) stops every job of the round, keeps what they measured and is raised
    again, here."""
    turns = Turns([f"{label}#{rnd}" for label in order])
    halt = Either(threading.Event(), session.stop)
    results: dict[str, Any] = {}
    raised: list[BaseException] = []   # what a job's thread raised (the caller's observer): raised here again

    def one(label: str) -> None:
        spec = cmp.spec_for(label)
        try:
            results[label] = run(spec, observer, halt, store, cmp.comparison_id, rnd, f"{label}#{rnd}",
                                 label=label if label != spec.backend else "", draw=draw, turns=turns)
        except BaseException as exc:  # noqa: BLE001 - stops the round's other jobs, then raised in the caller
            raised.append(exc)
            halt.set()

    threads = [threading.Thread(target=one, args=(label,), daemon=True, name=f"tcbench-{label}#{rnd}")
               for label in order]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(0.25)
        if raised:
            raise raised[0]
    except BaseException:
        halt.set()
        for t in threads:
            t.join()
        cmp.results.extend(results[label] for label in order if label in results)   # what they measured, kept
        raise
    return [results[label] for label in order if label in results]


def _one_off_s(cmp: Comparison) -> float:
    together = cmp.pairing == "lockstep"
    return one_off_compile_s(cmp.results, together) + first_launch_s(cmp.results, together)


def _next_round_s(took: Sequence[tuple[tuple[str, ...], float]], labels: tuple[str, ...]) -> float:
    """What the next round, of ``labels``, will take: the mean of the earlier rounds of the same labels, else of all
    earlier rounds (0 before any)."""
    same = [s for ran, s in took if ran == labels] or [s for _, s in took]
    return sum(same) / len(same) if same else 0.0


def _sitting_out(cmp: Comparison) -> str:
    """The labels that sat out rounds (``Comparison.next_labels``), in words ("" when none did)."""
    out = [f"{label} sat out {cmp.sat_out(label)}" for label in cmp.backends[1:] if cmp.sat_out(label)]
    return f"; {', '.join(out)} of them (decided or resolved early)" if out else ""


def _stop_reason(cmp: Comparison, done: int, elapsed_s: float, next_s: float) -> tuple[str, str]:
    """Why no further round starts, as (kind, words) (``measure.metrics.STOP_KINDS``; ("", "") to run one more): the
    fixed count, or the adaptive rule — the resolution reached, the budget (``elapsed_s``: the rounds' seconds less
    their one-off costs, ``one_off_compile_s`` and ``first_launch_s``; a round is not started when it would end past
    it, ``next_s`` being what the earlier rounds of its labels took; never before two rounds), the maximum, or a job
    that cannot run (failed, out of memory, unavailable: another round would end the same way)."""
    rule = cmp.rule
    if rule is None:
        return ("rounds", "all rounds ran") if done >= cmp.rounds else ("", "")
    broken = [r for r in cmp.results if r.status in ("failed", "oom", "unavailable", "diverged")]
    if broken:
        return "broken", f"{broken[0].name} round {broken[0].round} ended {broken[0].status}"
    if done and cmp.resolved():
        return "resolved", (f"resolution reached: every interval narrow enough to decide at ±{rule.resolve:.0%} "
                            f"after {done} rounds"
                            + _sitting_out(cmp))
    if done >= rule.max_rounds:
        return "max_rounds", f"max_rounds={rule.max_rounds} reached" + _sitting_out(cmp)
    # a single round says nothing about the spread between processes: the budget ends the rounds after two at the
    # earliest (a first round's cold compile would otherwise leave "0.91× (single round)" as the answer)
    if rule.budget_s is not None and done >= 2 and elapsed_s + next_s > rule.budget_s:
        together = cmp.pairing == "lockstep"
        one_offs = ((one_off_compile_s(cmp.results, together), "cold compiles"),
                    (first_launch_s(cmp.results, together), "first launches"))
        left_out = [f"{seconds:.0f} s of {what}" for seconds, what in one_offs if seconds >= 0.5]
        return "budget", (f"budget spent: {elapsed_s:.0f} s of budget_s={rule.budget_s:g} s ran {done} rounds"
                          + (f" (and {' and '.join(left_out)}, not counted)" if left_out else "")
                          + ", and another would end past it" + _sitting_out(cmp))
    return "", ""
