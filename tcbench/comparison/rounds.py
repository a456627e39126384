"""How many rounds a comparison runs: the defaults (a fixed count, or rounds added until a resolution or a time
budget is reached) and ``rounds_rule``, which turns compare()'s ``rounds`` / ``resolve`` / ``budget_s`` /
``max_rounds`` into the adaptive rule (``tcbench.measure.interval.RoundsRule``) or None for a fixed count."""

from __future__ import annotations

from typing import Any

from tcbench.core.spec import WEEK_S
from tcbench.measure.interval import PILOT_ROUNDS, RoundsRule

DEFAULT_ROUNDS = 3          # a fixed number of rounds (noise_floor, and compare(rounds=...))
DEFAULT_RESOLVE = 0.05      # compare()'s default: rounds are added until the verdict at ±5 % is decided ...
DEFAULT_BUDGET_S = 60.0     # ... or 60 s of rounds have passed (a first cold compile not counted)
MAX_ROUNDS = 30
ROUNDS_CAP = 1000   # the most rounds any comparison may ask for (fixed or adaptive)


def rounds_rule(rounds: int | None, resolve: float | None, budget_s: float | None,
                max_rounds: int = MAX_ROUNDS) -> RoundsRule | None:
    """The adaptive rounds' rule for compare()'s arguments (None: exactly ``rounds`` rounds); a bad value is a
    ValueError naming it and what is allowed, before anything runs."""
    def number(name: str, value: Any, low: float, high: float) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low < value <= high:
            raise ValueError(f"{name}={value!r} is not allowed; it must be a number above {low:g} and at most {high:g}")
        return float(value)

    if isinstance(max_rounds, bool) or not isinstance(max_rounds, int) or not 2 <= max_rounds <= ROUNDS_CAP:
        raise ValueError(f"max_rounds={max_rounds!r} is not allowed; it must be a whole number in 2..{ROUNDS_CAP}")
    if resolve is None and budget_s is None:
        if rounds is not None:
            if max_rounds != MAX_ROUNDS:
                raise ValueError(f"max_rounds={max_rounds!r} is not allowed with rounds={rounds!r} alone: exactly "
                                 f"{rounds!r} rounds run; allowed: max_rounds with adaptive rounds (resolve= or "
                                 "budget_s=)")
            return None
        resolve, budget_s = DEFAULT_RESOLVE, DEFAULT_BUDGET_S
    whole = isinstance(rounds, int) and not isinstance(rounds, bool)
    if rounds is not None and not (whole and 2 <= rounds <= max_rounds):
        raise ValueError(f"rounds={rounds!r} is not allowed with resolve/budget_s: it is the first stage of adaptive "
                         f"rounds, a whole number from 2 to max_rounds={max_rounds}")
    return RoundsRule(resolve=number("resolve", DEFAULT_RESOLVE if resolve is None else resolve, 0, 1),
                      budget_s=None if budget_s is None else number("budget_s", budget_s, 0, WEEK_S),
                      pilot=min(rounds or PILOT_ROUNDS, max_rounds), max_rounds=max_rounds)
