"""The default candidates of ``time_to_quality``: the question SageMaker Training Compiler existed for, each part a
JobSpec of its own so that the effects of the compiler and of the batch can be told apart.

- ``inductor``: compiled at the same batch and learning rate (the compiler alone);
- ``inductor@B1``: compiled at a bigger batch B1 with the learning rate predicted for it (``predict_lr``, the noise
  scale, with its premise checked first: ``check_premise``);
- ``inductor@B1 retuned``: the same with ``retune_lr``'s learning rate (``retune=True``);
- ``native@B1``: native at B1 with the predicted learning rate, where it fits (the batch alone).

**B1** is ``big_batch`` when given (refused when its memory floor exceeds the profile's budget); else, under a profile
with a memory budget, the largest batch ``find_max_batch`` fits for the compiled job, rounded down to the batch times
a power of two that divides the samples between evaluations, or the reference's samples when those are not given
(every candidate then evaluates after the same samples)
and at most ``max_batch``; a profile without a budget (this machine) takes ``max_batch`` (4× the batch by default),
so rounded, and says so.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from tcbench.core.events import Observer
from tcbench.core.profiles import profile as get_profile
from tcbench.core.spec import JobSpec, SpecError
from tcbench.store.api import Store

COMPILED = "inductor"
NATIVE = "eager"


@dataclass(frozen=True)
class Candidate:
    """One way to train the model: a ``label`` and the JobSpec it runs (its backend, batch, learning rate)."""

    label: str
    spec: JobSpec


@dataclass
class DefaultCandidates:
    """What the default candidates came from: the candidates, the big batch (None: none bigger), the learning-rate
    prediction for it and its premise check, the retune, and notes on what was left out and why."""

    candidates: list[Candidate]
    big_batch: int | None = None
    prediction: Any = None
    retune: Any = None
    notes: list[str] = field(default_factory=list)

    @property
    def premise(self) -> Any:
        return getattr(self.prediction, "premise", None)


def power_of_two_multiple(batch: int, top: int, grain: int) -> int:
    """The largest ``batch × 2^k`` at most ``top`` that divides ``grain`` (the samples between evaluations when they
    are given, else the reference's samples): every candidate then evaluates after the same samples (``batch``
    itself when no bigger one does)."""
    out = batch
    while out * 2 <= top and grain % (out * 2) == 0:
        out *= 2
    return out


def big_batch_for(spec: JobSpec, o: Any, observer: Observer | None, stop: threading.Event | None,
                  store: Store, grain: int) -> tuple[int | None, bool, list[str]]:
    """B1, whether the native job fits it too, and notes (module docstring); a given ``big_batch`` whose memory
    floor exceeds the profile's budget is a SpecError before any job."""
    from tcbench.runner.preflight import check_fits
    from tcbench.tuning.batch.search import find_max_batch

    prof = get_profile(spec.profile)
    budget = None if prof.is_local else prof.memory_budget_gb
    top = o.max_batch or 4 * spec.batch_size
    if o.big_batch is not None:
        try:
            check_fits(spec.replace(backend=COMPILED, batch_size=o.big_batch), budget)
        except SpecError as exc:   # named as the user gave it: big_batch, not the batch_size of its job
            raise SpecError("big_batch", o.big_batch, exc.allowed,
                            str(exc).replace(f"batch_size={o.big_batch!r}", f"big_batch={o.big_batch!r}", 1)) from None
        try:
            check_fits(spec.replace(backend=NATIVE, batch_size=o.big_batch), budget)
            return o.big_batch, True, [f"B1 = {o.big_batch}: given"]
        except SpecError as exc:
            return o.big_batch, False, [f"B1 = {o.big_batch}: given; no native@{o.big_batch}: {exc}"]
    if budget is None:
        b1 = power_of_two_multiple(spec.batch_size, top, grain)
        return b1, True, [f"B1 = {b1}: {prof.name} has no memory budget to search under, so the cap "
                          f"max_batch = {top} (give big_batch= or a profile= with a budget to search)"]
    found = find_max_batch(spec, prof.name, backends=(COMPILED, NATIVE), max_batch=top, multiple_of=spec.batch_size,
                           observer=observer, stop=stop, store=store, storage="store")
    biggest = found.max_batch.get(COMPILED)
    where = f"under {prof.name}'s {budget:.3g} GiB (find_max_batch, comparison {found.comparison_id})"
    if not biggest or biggest <= spec.batch_size:
        return None, False, [f"no bigger batch: the compiled job fits {biggest or 'nothing'} {where}"]
    b1 = power_of_two_multiple(spec.batch_size, biggest, grain)
    native = found.max_batch.get(NATIVE) or 0
    notes = [f"B1 = {b1}: the largest batch × 2^k within the {biggest} the compiled job fits {where}"]
    if native < b1:
        notes.append(f"no native@{b1}: the native job fits {native or 'nothing'} {where}")
    return b1, native >= b1, notes


def default_candidates(spec: JobSpec, o: Any, observer: Observer | None, stop: threading.Event | None,
                       store: Store, grain: int) -> DefaultCandidates:
    """The default candidates as planned before any of the study's jobs: the compiled candidate at the same batch,
    and — at B1 (``big_batch_for``) — compiled, retuned (``o.retune``) and native where it fits, each still at the
    reference's learning rate until ``learning_rates`` sets B1's (module docstring)."""
    out = DefaultCandidates([Candidate(COMPILED, spec.replace(backend=COMPILED))])
    b1, native_fits, out.notes = big_batch_for(spec, o, observer, stop, store, grain)
    if b1 is not None and b1 <= spec.batch_size:
        out.notes.append(f"no bigger batch than {b1} divides the {grain} samples between evaluations")
        return out
    if b1 is None or (stop is not None and stop.is_set()):
        return out
    out.big_batch = b1
    out.candidates.append(Candidate(f"{COMPILED}@{b1}", spec.replace(backend=COMPILED, batch_size=b1)))
    if o.retune:
        out.candidates.append(Candidate(f"{COMPILED}@{b1} retuned", spec.replace(backend=COMPILED, batch_size=b1)))
    if native_fits:
        out.candidates.append(Candidate(f"native@{b1}", spec.replace(backend=NATIVE, batch_size=b1)))
    return out


def learning_rates(out: DefaultCandidates, spec: JobSpec, o: Any, observer: Observer | None,
                   stop: threading.Event | None, store: Store) -> None:
    """B1's learning rate in the planned candidates: predicted (``predict_lr``, its premise checked unless
    ``o.check_premise`` is False) and, with ``o.retune``, retuned (``retune_lr``; without a rate found the retuned
    candidate is left out, with a note). Run once the reference's runs have given the target, so that a target
    they cannot reach is refused before these jobs."""
    from tcbench.tuning.lr.prediction import predict_lr
    from tcbench.tuning.lr.retune import retune_lr

    b1 = out.big_batch
    if b1 is None:
        return
    native = spec.replace(backend=NATIVE)
    out.prediction = predict_lr(native, new_batch_size=b1, store=store, observer=observer, stop=stop,
                                check_premise=o.check_premise)
    if not o.check_premise:
        out.notes.append(f"the learning rate at B1 = {b1} was predicted from lr0 = {spec.lr:g} unchecked "
                         "(check_premise=False)")
    retuned = None
    if o.retune and not (stop is not None and stop.is_set()):
        out.retune = retune_lr(native, b1, store=store, observer=observer, stop=stop, check_premise=o.check_premise)
        retuned = out.retune.best_lr
        if retuned is None:
            out.notes.append(f"retune_lr found no learning rate at batch {b1}: no retuned candidate")
    label = f"{COMPILED}@{b1} retuned"
    out.candidates = [c if c.spec.batch_size != b1 else
                      Candidate(c.label, c.spec.replace(lr=retuned if c.label == label else out.prediction.lr))
                      for c in out.candidates if c.label != label or retuned is not None]
