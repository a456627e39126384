"""Long work off the kernel's main thread: one piece at a time on a daemon thread, with the stop event it is
given, so a Stop button is heard while it runs (the main thread stays idle for the widgets' messages)."""

from __future__ import annotations

import threading
from typing import Any, Callable


class Background:
    """The running work of one tab: ``start`` it, ``stop`` it (the work sees ``stop_event`` set), ``wait`` for it.

    ``busy`` is True from ``start`` until the work has returned; ``finish(result)`` (given to ``start``) runs after
    that on the same thread with what the work returned (None when it raised), so a tab can release the panel, sync
    its buttons and show how the work ended there.
    """

    def __init__(self) -> None:
        self.stop_event = threading.Event()
        self.thread: threading.Thread | None = None
        self.busy = False

    def start(self, name: str, work: Callable[[threading.Event], Any], finish: Callable[[Any], None] = lambda _: None,
              claim: Callable[[], bool] = lambda: True) -> threading.Thread | None:
        """Run ``work(stop_event)`` on a new daemon thread named ``tcbench-<name>`` with a fresh stop event.

        ``claim`` runs first, already ``busy`` (a tab's own buttons then show Stop): when it returns False the work
        does not start (None is returned)."""
        self.stop_event = threading.Event()
        self.busy = True
        if not claim():
            self.busy = False
            return None

        def run() -> None:
            result = None
            try:
                result = work(self.stop_event)
            finally:
                self.busy = False
                finish(result)

        self.thread = threading.Thread(target=run, name=f"tcbench-{name.replace(' ', '-')}", daemon=True)
        self.thread.start()
        return self.thread

    @property
    def stopping(self) -> bool:
        """Whether a stop was asked of the current (or last) work."""
        return self.stop_event.is_set()

    def stop(self) -> bool:
        """Ask the running work to stop; False when nothing runs."""
        if not self.busy:
            return False
        self.stop_event.set()
        return True

    def wait(self, timeout: float | None = None) -> None:
        """Block until the work ends (or ``timeout`` seconds pass)."""
        if self.thread is not None:
            self.thread.join(timeout)
