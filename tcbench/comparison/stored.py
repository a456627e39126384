"""What the store says about earlier comparisons: ``load_comparison`` rebuilds one (figures, steps and environment,
no rerun), ``earlier_spreads`` reads how far a speedup moved between earlier comparisons of the same spec on this
host when they disagree beyond their own rounds (a warning), and ``latest_noise_floor`` finds the newest stored
noise floor of a spec."""

from __future__ import annotations

import dataclasses
import json
import math
import socket
import time
from dataclasses import dataclass
from typing import Any

from tcbench.comparison.result import Comparison, cold_round, without_cold_round
from tcbench.core.results import aa_label
from tcbench.core.spec import JobSpec
from tcbench.measure.interval import RoundsRule, heterogeneity
from tcbench.measure.metrics import voided
from tcbench.store.api import Store, StoreMissing
from tcbench.store.history import result_from_row


def load_comparison(comparison_id: int, store: Store | None = None) -> Comparison:
    """Rebuild a stored comparison (figures, steps and environment from the store, no rerun)."""

    store = store or Store(create=False)   # reading never creates a store
    row = store.comparison_row(comparison_id)
    info = json.loads(row.get("info_json") or "{}")
    rule = RoundsRule(**info["rule"]) if isinstance(info.get("rule"), dict) else None
    cmp = Comparison(spec=JobSpec.from_stored(row["spec_json"]), backends=store.comparison_labels(comparison_id),
                     rounds=int(row["rounds"]), comparison_id=int(comparison_id), kind=row["kind"] or "compare",
                     rule=rule, stop_reason=str(info.get("stop_reason") or ""),
                     stop_kind=str(info.get("stop_kind") or ""), pairing=str(info.get("pairing") or "sequential"),
                     between={k: (float(v[0]), int(v[1])) for k, v in (info.get("between") or {}).items()},
                     created=None if row.get("created") is None else float(row["created"]))
    for _, r in store.comparison_runs(comparison_id).iterrows():
        cmp.results.append(result_from_row(r.to_dict(), store))
    cmp.variants = {r.label: r.spec for r in cmp.results if r.label and r.label != aa_label(r.spec.backend)}
    return cmp


def earlier_spreads(store: Store, cmp: Comparison, days: float = 30.0,
                    limit: int = 20) -> dict[str, tuple[float, int]]:
    """Per compared label whose speedup moved between earlier comparisons beyond their own rounds (the machine
    drifts): (τ, k), the spread between the ``limit`` newest earlier comparisons of the same kind and spec on this
    host in the last ``days`` (k of them, ``MIN_EARLIER`` at least), from their stored per-round steps (``fast_step_s``)
    (``interval.heterogeneity``). A round with a job whose disturbance voided its verdict is left out, so a loaded
    comparison never counts; one that both jobs of a lock-step round shared counts, as in that comparison's own
    interval (``measure.metrics.voided``: on a quiet 2-core VM most lock-step jobs carry one). Empty where there are
    too few, or where they agree. A warning, never part of an interval."""
    want = cmp.spec.to_dict()   # matched by the spec's fields, not its stored text
    pairing = {c.comparison_id: c.info.get("pairing", "sequential")
               for c in store.done_comparisons(cmp.kind, cmp.spec.model, cmp.spec.size,
                                               since=time.time() - days * 86400)
               if c.spec.to_dict() == want}
    same = list(pairing)[:limit]
    stored = [s for s in store.round_steps(same, socket.gethostname())
              if not voided(s.figures, pairing[s.comparison_id])]
    steps = {(s.comparison_id, s.round, s.name): s.step_s for s in stored}
    states: dict[tuple[int, str], dict[int, str]] = {}
    for s in stored:
        states.setdefault((s.comparison_id, s.name), {})[s.round] = s.cache_state
    out = {}
    for label in cmp.backends[1:]:
        earlier: dict[int, dict[int, float]] = {}
        for (cid, rnd, name), step in steps.items():
            native = steps.get((cid, rnd, cmp.backends[0]))
            if name == label and native:
                earlier.setdefault(cid, {})[rnd] = math.log(native / step)
        shared = cmp.spec_for(label).cache == "shared"
        found = heterogeneity([without_cold_round(logs, cold_round(states[cid, label], shared))   # as ratio_pairs
                               for cid, logs in earlier.items()])
        if found is not None and found.drifting:
            out[label] = (found.tau, found.k)
    return out


@dataclass(frozen=True)
class StoredNoiseFloor:
    """A stored noise floor (``tc.latest_noise_floor``): ``NoiseFloor.summary()``'s fields and when it was measured
    (``created``, seconds since the epoch; None for one not stored yet)."""

    comparison_id: int | None = None
    backend: str | None = None
    rounds: int | None = None
    speedup: float | None = None
    speedup_ci_low: float | None = None
    speedup_ci_high: float | None = None
    resolvable: float | None = None
    verdict_kind: str | None = None
    verdict: str | None = None
    created: float | None = None

    @classmethod
    def from_summary(cls, summary: dict[str, Any], created: float | None) -> "StoredNoiseFloor":
        """From ``NoiseFloor.summary()`` (as measured, or as stored; a key this version does not know is left out)."""
        names = {f.name for f in dataclasses.fields(cls)} - {"created"}
        return cls(**{k: v for k, v in summary.items() if k in names}, created=created)


def latest_noise_floor(spec: JobSpec, store: Store | None = None) -> StoredNoiseFloor | None:
    """The newest stored noise floor for the same model, size, backend, batch, sequence, precision and threads (or
    None)."""
    try:
        store = store or Store(create=False)   # reading never creates a store
    except StoreMissing:
        return None   # nothing measured yet
    keys = ("backend", "batch_size", "seq_len", "precision", "threads")
    for found in store.done_comparisons("noise-floor", spec.model, spec.size):
        if all(getattr(found.spec, k) == getattr(spec, k) for k in keys):
            info = found.info.get("noise_floor")
            if info:
                return StoredNoiseFloor.from_summary(info, found.created)
    return None
