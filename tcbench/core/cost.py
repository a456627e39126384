"""What a measured throughput costs on an instance profile (no torch import).

The arithmetic is deliberately plain: a step takes ``batch_size / samples_s`` seconds, an epoch
``dataset_size / samples_s`` seconds, and an hour costs the profile's on-demand price. A speed
measured on this machine priced at an instance's rate is *not* that instance's cost — the
``basis`` string says so, every time.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any


from tcbench.core.profiles import Profile, profile as _profile

if TYPE_CHECKING:
    import pandas as pd


COST_COLUMNS = ("usd_per_1k_steps", "usd_per_epoch", "usd_per_1m_tokens", "hours_per_1k_steps",
                "hours_per_epoch", "price_per_hour", "profile", "basis")
_ROW_COLUMNS = ("backend", "samples_s", "batch_size", "seq_len")


def _positive(name: str, value: Any, whole: bool = False) -> float:
    kind = "a whole number > 0" if whole else "a finite number > 0"
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < math.inf
    if ok and whole and float(value) != int(value):
        ok = False
    if not ok:
        raise ValueError(f"{name}={value!r} is not allowed; use {kind}")
    return float(value)


def price_basis(p: Profile, measured_on_local: bool) -> str:
    """What a price figure means: the profile's rate, and whether the speed priced is that instance's or this
    machine's."""
    if p.price_per_hour is None:
        why = "this machine is not rented by the hour" if p.is_local else f"{p.name} has no price in the catalog"
        return f"no $ figures: {why}; times are from the measured speed"
    rate = f"${p.price_per_hour:g}/h on demand, {p.price_region or 'region unknown'}, {p.price_date or 'date unknown'}"
    if measured_on_local and not p.is_local:
        return (f"this machine's measured speed priced at {p.name}'s on-demand rate ({rate})"
                " — not that instance's speed")
    return f"speed measured on {p.name}, priced at its on-demand rate ({rate})"


def cost(samples_s: float, profile: Profile | str, batch_size: int, seq_len: int,
         dataset_size: int = 100_000, measured_on_local: bool = True) -> dict:
    """Dollars and hours for a measured throughput priced at ``profile``'s on-demand rate.

    Returns usd_per_1k_steps, usd_per_epoch, usd_per_1m_tokens (None without a price),
    hours_per_1k_steps, hours_per_epoch, price_per_hour, profile (its name) and basis (what the
    numbers mean). ``measured_on_local``: the speed was measured here, not on that instance.
    """
    rate = _positive("samples_s", samples_s)
    batch = _positive("batch_size", batch_size, whole=True)
    tokens = _positive("seq_len", seq_len, whole=True)
    samples = _positive("dataset_size", dataset_size, whole=True)
    p = _profile(profile)
    hours_per_1k_steps = 1000 * batch / rate / 3600
    hours_per_epoch = samples / rate / 3600
    hours_per_1m_tokens = 1e6 / (rate * tokens) / 3600
    price = p.price_per_hour
    usd = (lambda hours: None) if price is None else (lambda hours: hours * price)
    return {
        "usd_per_1k_steps": usd(hours_per_1k_steps),
        "usd_per_epoch": usd(hours_per_epoch),
        "usd_per_1m_tokens": usd(hours_per_1m_tokens),
        "hours_per_1k_steps": hours_per_1k_steps,
        "hours_per_epoch": hours_per_epoch,
        "price_per_hour": price,
        "profile": p.name,
        "basis": price_basis(p, measured_on_local),
    }


def savings_pct(native_usd: float | None, compiled_usd: float | None) -> float | None:
    """Percent of the native cost saved by compiling (negative: compiling costs more); None if unknown."""
    values = (native_usd, compiled_usd)
    if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in values):
        return None
    if native_usd <= 0:
        raise ValueError(f"native_usd={native_usd!r} is not allowed; use a number > 0 (or None)")
    if compiled_usd < 0:
        raise ValueError(f"compiled_usd={compiled_usd!r} is not allowed; use a number >= 0 (or None)")
    return (native_usd - compiled_usd) / native_usd * 100.0


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def cost_table(rows: list[dict] | pd.DataFrame, profile: Profile | str, dataset_size: int = 100_000,
               measured_on_local: bool = True, baseline: str = "eager") -> pd.DataFrame:
    """``rows`` (backend, samples_s, batch_size, seq_len, ...) with the cost columns and ``saved_pct``.

    saved_pct is the % of the first ``baseline`` row's cost per epoch that each row saves (the
    price cancels, so it is defined for this-machine too). A row without a measured samples_s
    (a failed job) gets None costs; a non-positive one is an error.
    """
    import pandas as pd

    frame = pd.DataFrame(rows).reset_index(drop=True)
    missing = [c for c in _ROW_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"rows lack column(s) {missing}; each row needs {', '.join(_ROW_COLUMNS)}")
    p = _profile(profile)
    _positive("dataset_size", dataset_size, whole=True)
    out = []
    for i, row in frame.iterrows():
        if _missing(row["samples_s"]):
            out.append(dict.fromkeys(COST_COLUMNS) | {"profile": p.name, "basis": "no measured samples_s"})
            continue
        try:
            out.append(cost(_plain(row["samples_s"]), p, _plain(row["batch_size"]), _plain(row["seq_len"]),
                            dataset_size, measured_on_local))
        except ValueError as exc:
            raise ValueError(f"rows[{i}] (backend={row['backend']!r}): {exc}") from None
    table = pd.concat([frame, pd.DataFrame(out, columns=list(COST_COLUMNS))], axis=1)
    base = table[table["backend"] == baseline]
    base_hours = None if base.empty else base["hours_per_epoch"].iloc[0]
    table["saved_pct"] = [savings_pct(_plain(base_hours), _plain(h)) for h in table["hours_per_epoch"]]
    return table


def _plain(value: Any) -> Any:
    """numpy scalars -> Python numbers (so type checks see int/float), NaN -> None."""
    if value is None:
        return None
    value = value.item() if hasattr(value, "item") else value
    return None if isinstance(value, float) and math.isnan(value) else value
