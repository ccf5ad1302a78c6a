"""A night asked to stop before its end (Ctrl-C, SIGTERM): who must hear it, and why.

Stopping is not cancelling: an interrupted night stops submitting and watching, and leaves its
jobs in flight running out there (they stay in flight in the ledger, with their ids, so a rerun
of the night re-attaches to them). Cancelling stops the work itself (``engine/cancelling.py``).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable

__all__ = ["INTERRUPTED", "LEFT_RUNNING_DETAIL", "NOT_SUBMITTED_DETAIL", "NightStop"]

INTERRUPTED = "interrupted"
LEFT_RUNNING_DETAIL = "left running when the night was interrupted; a rerun re-attaches"
NOT_SUBMITTED_DETAIL = "not submitted: the night was interrupted"


class NightStop:
    """Asked at most once, from any thread (not from a signal handler: its listeners take
    locks); each listener hears it once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requested = False
        self._listeners: list[Callable[[], None]] = []
        self.reason: str | None = None
        self.exit_code: int | None = None
        self._over = False
        self._said = False
        self.requested_at: float | None = None  # ``time.monotonic()`` when it was asked

    @property
    def requested(self) -> bool:
        """Whether the night was asked to stop."""
        return self._requested

    @property
    def over(self) -> bool:
        """Whether the night said it is over (``end``)."""
        return self._over

    def end(self) -> None:
        """The night's summary is written and its lease given back: what is left is Prefect's
        bookkeeping, which a caller may bound when the API is gone."""
        self._over = True

    @property
    def end_said(self) -> bool:
        """Whether Prefect has the night's final state (``said``): nothing is left to wait for."""
        return self._said

    def said(self) -> None:
        """The night's flow run has its final state in Prefect (the flow's state hook)."""
        self._said = True

    def request(self, reason: str = INTERRUPTED, exit_code: int = 130) -> bool:
        """Ask the night to stop; False if it already was (the first reason stays)."""
        with self._lock:
            if self._requested:
                return False
            self.reason, self.exit_code = reason, exit_code
            self.requested_at = time.monotonic()
            self._requested = True
            listeners = list(self._listeners)
        for listener in listeners:
            self._tell(listener)
        return True

    def on_request(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener`` when the stop comes (now, if it came); returns its removal."""
        with self._lock:
            told = self._requested
            if not told:
                self._listeners.append(listener)
        if told:
            self._tell(listener)

        def remove() -> None:
            with self._lock, contextlib.suppress(ValueError):
                self._listeners.remove(listener)

        return remove

    @staticmethod
    def _tell(listener: Callable[[], None]) -> None:
        # one listener failing (a closed pool) must not keep the others from stopping
        with contextlib.suppress(Exception):
            listener()
