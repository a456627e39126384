"""Waiting in tests without a timing assertion: poll a condition until it holds or a generous limit passes."""

from __future__ import annotations

import time


def wait_for(predicate, within: float, what: str):
    """``predicate()``'s first truthy value within ``within`` seconds; else an AssertionError naming ``what``."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what} did not happen within {within:.0f} s")
