"""One comparison row from start to finish: :func:`comparison_session` stores it ``running`` and always finishes it.

Every measurement that keeps a comparison row (``compare``, ``noise_floor``, ``scaling``, ``retune_lr`` and its
workers, ``find_max_batch``, ``time_to_quality``) runs inside one, so nothing leaves its row ``running``:

- the block ends normally: the status the caller set (``session.status``), else ``"interrupted"`` when the
  ``stop`` event is set, else ``"done"``;
- a KeyboardInterrupt: ``"interrupted"``;
- any other exception: ``error_status`` (``"failed"`` unless the caller says otherwise), with the exception's
  type and words kept as the info's ``error``.

The exception is always raised again. The info written is what ``session.info_at_finish()`` returns (when set),
updated with ``session.finish_info``: computed at the finish, so a row ended by an error holds what was measured
until then.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

if TYPE_CHECKING:
    from tcbench.store.api import Store


@dataclass
class ComparisonSession:
    """The open comparison row: its id, and what the finish writes (see the module docstring)."""

    comparison_id: int
    stop: Any = None                                    # a threading.Event-like object, or None
    status: str | None = None                           # None: "interrupted" when stop is set, else "done"
    finish_info: dict = field(default_factory=dict)     # written as the row's info (over info_at_finish's)
    info_at_finish: Callable[[], dict] | None = None    # called at the finish, whatever ended the block
    rounds: int | None = None                           # the rounds that ran, when not the number inserted

    @property
    def stopped(self) -> bool:
        return self.stop is not None and self.stop.is_set()

    def info(self) -> dict:
        """The info the finish writes now."""
        return {**(self.info_at_finish() if self.info_at_finish is not None else {}), **self.finish_info}


@contextmanager
def comparison_session(store: "Store", kind: str, spec: Any, backends: Sequence[str], rounds: int, info: dict,
                       stop: Any = None, error_status: str = "failed") -> Iterator[ComparisonSession]:
    """Insert a ``running`` comparison row of ``kind`` and finish it however the block ends (module docstring)."""
    session = ComparisonSession(store.insert_comparison(kind, spec, list(backends), rounds, info), stop)
    try:
        yield session
    except KeyboardInterrupt:
        _finish(store, session, "interrupted")
        raise
    except BaseException as exc:   # why it ended is kept with what it measured (``show`` says it)
        session.finish_info.setdefault("error", f"{type(exc).__name__}: {exc}"[:500])
        _finish(store, session, error_status)
        raise
    _finish(store, session, session.status or ("interrupted" if session.stopped else "done"))


def _finish(store: "Store", session: ComparisonSession, status: str) -> None:
    try:
        info = session.info()
    except Exception as exc:   # the row is finished all the same, then the error is raised
        store.finish_comparison(session.comparison_id, status,
                                {**session.finish_info, "info_error": f"{type(exc).__name__}: {exc}"[:300]},
                                session.rounds)
        raise
    store.finish_comparison(session.comparison_id, status, info, session.rounds)


class Either:
    """A stop flag for one job of a study: set when the job's own event (its trial was pruned) or the user's is;
    setting it sets the job's own."""

    def __init__(self, own: threading.Event, user: threading.Event | None) -> None:
        self.own, self.user = own, user

    def is_set(self) -> bool:
        return self.own.is_set() or (self.user is not None and self.user.is_set())

    def set(self) -> None:
        self.own.set()
