"""Submits held while a backend's incident lasts: nothing more sent into an outage the night knows.

An incident of a backend (engine/incidents.py) holds its submits: every job's when
``incident.hold_submits`` says so, a paid job's always. A job waiting for its turn waits here
first, as a coroutine on the night's loop (no thread). The incident's end releases them when its
jobs moved on; when none did (they all ended where they stalled) the backend is refused for the
rest of the night, and the jobs held end ``skipped`` with the reason, as they do when the night's
deadline comes first.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable

__all__ = ["SubmitHolds"]

_Waiter = tuple[asyncio.AbstractEventLoop, "asyncio.Future[None]"]


class SubmitHolds:
    """Backends whose submits wait (or are refused) because of an incident. Thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._held: dict[str, tuple[str, bool]] = {}  # backend -> (why, every job or paid only)
        self._refused: dict[str, tuple[str, bool]] = {}
        self._waiters: list[_Waiter] = []
        self._interrupted = False

    def hold(self, backend: str, why: str, *, everything: bool) -> None:
        """Hold ``backend``'s submits (``everything``: every job's, else paid jobs' only)."""
        with self._lock:
            self._held[backend] = (why, everything)

    def release(self, backend: str) -> None:
        """The incident is over and its jobs moved on: the jobs held submit now."""
        with self._lock:
            self._held.pop(backend, None)
            self._wake()

    def refuse(self, backend: str, why: str) -> None:
        """The incident ended with none of its jobs moving on: the jobs it held (every job, or
        paid ones) are not submitted tonight."""
        with self._lock:
            held = self._held.pop(backend, None)
            if held is not None:
                self._refused[backend] = (why, held[1])
            self._wake()

    def interrupt(self) -> None:
        """The night stops: every job waiting here stops waiting now."""
        with self._lock:
            self._interrupted = True
            self._wake()

    def why(self, backend: str, paid: bool) -> str | None:
        """Why a submit to ``backend`` must wait now (None: it may go)."""
        with self._lock:
            return self._why(backend, paid)

    async def clear(self, backend: str, paid: bool, deadline: float | None) -> str | None:
        """Wait while ``backend``'s submits are held: None once they may go; the reason when
        the backend is refused tonight, or ``deadline`` (on the clock) passes first, or the
        night is interrupted."""
        while True:
            with self._lock:
                why = self._why(backend, paid)
                if why is None or why.startswith("not submitted") or self._interrupted:
                    return why
                left = None if deadline is None else deadline - self._clock()
                if left is not None and left <= 0:
                    return why
                loop = asyncio.get_running_loop()
                waiter: asyncio.Future[None] = loop.create_future()
                self._waiters.append((loop, waiter))
            try:
                await asyncio.wait_for(asyncio.shield(waiter), left)
            except TimeoutError:
                waiter.cancel()

    def _why(self, backend: str, paid: bool) -> str | None:
        refused = self._refused.get(backend)
        if refused is not None and (refused[1] or paid):
            return f"not submitted: {refused[0]}"
        held = self._held.get(backend)
        if held is not None and (held[1] or paid):
            return f"held: {held[0]}"
        return None

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for loop, waiter in waiters:
            with contextlib.suppress(RuntimeError):  # its loop is closed: nobody waits there
                loop.call_soon_threadsafe(_set, waiter)


def _set(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
