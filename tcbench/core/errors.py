"""Errors every layer may raise and every caller may catch (the message names the field or path and why)."""

from __future__ import annotations


class StoreError(RuntimeError):
    """The store cannot be used as asked (a newer schema, an unusable path, read-only); the message names why."""


def first_line(exc: BaseException, with_type: bool = True) -> str:
    """An exception in one line for a message: ``"Type: first line"`` (``with_type=False``: the line alone, or the
    type's name when the message is empty), at most 300 characters."""
    lines = str(exc).strip().splitlines()
    if with_type:
        return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]
    return (lines[0] if lines else type(exc).__name__)[:300]
