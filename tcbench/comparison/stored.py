"""What the store says about earlier comparisons: ``load_comparison`` rebuilds one (figures, steps and environment,
no rerun), ``earlier_spreads`` reads how far a speedup moved between earlier comparisons of the same spec on this
host when they disagree beyond their own rounds (a warning), and ``latest_noise_floor`` finds the newest stored
noise floor of a spec."""

from __future__ import annotations

import json
import math
import socket
import time
from typing import Any

from tcbench.comparison.result import Comparison
from tcbench.core.results import aa_label
from tcbench.core.spec import JobSpec
from tcbench.measure.interval import RoundsRule, heterogeneity
from tcbench.store.api import Store, StoreMissing


def load_comparison(comparison_id: int, store: Store | None = None) -> Comparison:
    """Rebuild a stored comparison (figures, steps and environment from the store, no rerun)."""
    from tcbench.store.history import result_from_row

    store = store or Store(create=False)   # reading never creates a store
    row = store.comparison_row(comparison_id)
    info = json.loads(row.get("info_json") or "{}")
    rule = RoundsRule(**info["rule"]) if isinstance(info.get("rule"), dict) else None
    cmp = Comparison(spec=JobSpec.from_stored(row["spec_json"]), backends=row["backends"].split(","),
                     rounds=int(row["rounds"]), comparison_id=int(comparison_id), kind=row["kind"] or "compare",
                     rule=rule, stop_reason=str(info.get("stop_reason") or ""),
                     stop_kind=str(info.get("stop_kind") or ""),
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
    host in the last ``days`` (k of them, ``MIN_EARLIER`` at least), from their stored per-round median steps
    (``interval.heterogeneity``; rounds with a disturbed job left out, so a loaded comparison never counts). Empty
    where there are too few, or where they agree. A warning, never part of an interval."""
    rows = store.query(
        "SELECT r.comparison_id, r.round, r.backend, r.label, r.median_step_s FROM runs r JOIN comparisons c "
        "ON r.comparison_id = c.comparison_id WHERE c.comparison_id IN (SELECT comparison_id FROM comparisons "
        "WHERE kind = :kind AND status = 'done' AND spec_json = :spec AND created > :since "
        "ORDER BY comparison_id DESC LIMIT :limit) AND r.status = 'ok' AND r.host = :host AND r.median_step_s > 0 "
        "AND (r.noisy IS NULL OR r.noisy = 0)",
        {"kind": cmp.kind, "spec": cmp.spec.to_json(), "since": time.time() - days * 86400, "limit": limit,
         "host": socket.gethostname()})
    steps: dict[tuple[int, int, str], float] = {}
    for r in rows.itertuples():
        name = r.label or r.backend   # a job's label is stored only for an A/A twin
        steps[(int(r.comparison_id), int(r.round), name)] = float(r.median_step_s)
    out = {}
    for label in cmp.backends[1:]:
        earlier: dict[int, list[float]] = {}
        for (cid, rnd, name), step in steps.items():
            native = steps.get((cid, rnd, cmp.backends[0]))
            if name == label and native:
                earlier.setdefault(cid, []).append(math.log(native / step))
        found = heterogeneity(list(earlier.values()))
        if found is not None and found.drifting:
            out[label] = (found.tau, found.k)
    return out


def latest_noise_floor(spec: JobSpec, store: Store | None = None) -> dict[str, Any] | None:
    """The newest stored noise floor for the same model, size, batch, sequence, precision and threads (or None)."""
    try:
        store = store or Store(create=False)   # reading never creates a store
    except StoreMissing:
        return None   # nothing measured yet
    df = store.query("SELECT spec_json, info_json, created FROM comparisons WHERE kind='noise-floor' "
                     "AND status='done' ORDER BY comparison_id DESC")
    keys = ("model", "size", "backend", "batch_size", "seq_len", "precision", "threads")
    for row in df.itertuples():
        other = json.loads(row.spec_json)
        if all(other.get(k) == getattr(spec, k) for k in keys):
            info = json.loads(row.info_json or "{}").get("noise_floor")
            if info:
                return {**info, "created": row.created}
    return None
