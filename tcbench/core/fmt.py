"""How tcbench writes a number for people, the part the lower layers need: ratios (the verdict sentences in
``tcbench.measure.metrics``), missing values (``MISSING``, ``is_missing``) and stored NULLs (``is_null``, the store's
history). ``tcbench.view.format`` re-exports them beside everything else the CLI and the report show."""

from __future__ import annotations

import math
import sys
from typing import Any

MISSING = "–"   # a value that does not exist, everywhere


# -- missing values ---------------------------------------------------------------------------------------------
def is_missing(value: Any) -> bool:
    """A cell with nothing to show: None, NaN or pd.NA. A string, list, tuple or dict is a value, even empty."""
    if value is None:
        return True
    if isinstance(value, (str, list, tuple, dict)):
        return False
    try:
        return _isna(value)
    except (TypeError, ValueError):
        return False


def is_null(value: Any) -> bool:
    """A stored cell that holds no value: SQL NULL as pandas reads it back (None, NaN or pd.NA)."""
    if value is None:
        return True
    try:
        return _isna(value)
    except (TypeError, ValueError):
        return False


def _isna(value: Any) -> bool:
    """pandas' ``isna`` where pandas is loaded (only then can a value be ``pd.NA`` or ``NaT``); else NaN by ``math``
    (a job's process formats numbers without importing pandas)."""
    pd = sys.modules.get("pandas")
    if pd is not None:
        return bool(pd.isna(value))
    return math.isnan(value)


# -- ratios ----------------------------------------------------------------------------------------------------
def fmt_ratio(x: float | None) -> str:
    """A ratio for people: 2 decimals, 3 when 2 would hide a difference from 1."""
    if x is None or not math.isfinite(x):
        return MISSING
    text = f"{x:.2f}×"
    return f"{x:.3f}×" if text == "1.00×" and x != 1 else text


def fmt_between(speedup: float, low: float, high: float) -> str:
    """An interval that cannot decide, in words: ``between 0.96× and 1.24× (point 1.09×, 95 % interval)``."""
    return f"between {fmt_ratio(low)} and {fmt_ratio(high)} (point {fmt_ratio(speedup)}, 95 % interval)"
