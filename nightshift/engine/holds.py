"""Submits held while a backend's incident lasts: nothing more sent into an outage the night knows.

An incident of a backend (engine/incidents.py) holds its submits: every job's when
``incident.hold_submits`` says so, a paid job's always. A job waiting for its turn waits here
first, as a coroutine on the night's loop (no thread). The incident's end releases them when its
jobs moved on; when none did (they all ended where they stalled) the backend is refused for the
rest of the night, and the jobs held end ``skipped`` with the reason, as they do when the night's
deadline comes first.

The state is the night's loop's: a change asked from another thread is made on the loop (no
lock; owner-checked); ``why`` may be read from anywhere (one look-up in a dict whose values are
never changed in place).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nightshift.loop import NightLoop

__all__ = ["SubmitHolds"]


class SubmitHolds:
    """Backends whose submits wait (or are refused) because of an incident; the loop's."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, loop: NightLoop | None = None
    ) -> None:
        self._clock = clock
        self._loop = loop  # None: its caller is the only thread (a test)
        self._held: dict[str, tuple[str, bool]] = {}  # backend -> (why, every job or paid only)
        self._refused: dict[str, tuple[str, bool]] = {}
        self._waiters: list[asyncio.Future[None]] = []
        self._interrupted = False

    def hold(self, backend: str, why: str, *, everything: bool) -> None:
        """Hold ``backend``'s submits (``everything``: every job's, else paid jobs' only)."""
        self._on_loop(self._hold, backend, why, everything)

    def release(self, backend: str) -> None:
        """The incident is over and its jobs moved on: the jobs held submit now."""
        self._on_loop(self._release, backend)

    def refuse(self, backend: str, why: str) -> None:
        """The incident ended with none of its jobs moving on: the jobs it held (every job, or
        paid ones) are not submitted tonight."""
        self._on_loop(self._refuse, backend, why)

    def interrupt(self) -> None:
        """The night stops: every job waiting here stops waiting now."""
        self._on_loop(self._interrupt)

    def why(self, backend: str, paid: bool) -> str | None:
        """Why a submit to ``backend`` must wait now (None: it may go)."""
        refused = self._refused.get(backend)
        if refused is not None and (refused[1] or paid):
            return f"not submitted: {refused[0]}"
        held = self._held.get(backend)
        if held is not None and (held[1] or paid):
            return f"held: {held[0]}"
        return None

    async def clear(self, backend: str, paid: bool, deadline: float | None) -> str | None:
        """Wait while ``backend``'s submits are held: None once they may go; the reason when
        the backend is refused tonight, or ``deadline`` (on the clock) passes first, or the
        night is interrupted."""
        self._owned()
        while True:
            why = self.why(backend, paid)
            if why is None or why.startswith("not submitted") or self._interrupted:
                return why
            left = None if deadline is None else deadline - self._clock()
            if left is not None and left <= 0:
                return why
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await asyncio.wait_for(asyncio.shield(waiter), left)
            except TimeoutError:
                waiter.cancel()

    # -- on the loop ------------------------------------------------------------------------
    def _on_loop(self, fn: Callable[..., None], *args: Any) -> None:
        if self._loop is None:
            fn(*args)  # its caller is the only thread
        else:
            self._loop.soon(fn, *args)

    def _owned(self) -> None:
        if self._loop is not None:
            self._loop.owned("the submit holds")

    def _hold(self, backend: str, why: str, everything: bool) -> None:
        self._owned()
        self._held[backend] = (why, everything)

    def _release(self, backend: str) -> None:
        self._owned()
        self._held.pop(backend, None)
        self._wake()

    def _refuse(self, backend: str, why: str) -> None:
        self._owned()
        held = self._held.pop(backend, None)
        if held is not None:
            self._refused[backend] = (why, held[1])
        self._wake()

    def _interrupt(self) -> None:
        self._owned()
        self._interrupted = True
        self._wake()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
