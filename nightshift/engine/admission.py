"""Admission to submit: a stagger between submissions and per-backend caps, in priority order."""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

__all__ = ["Admission", "Deadline"]


class Deadline(Exception):
    """The wait ran past the given deadline."""


class Admission:
    """Lets jobs submit in priority order, ``stagger`` seconds apart, at most ``caps[b]`` at once.

    Lower priority numbers go first. A job holds its backend slot from admission until the
    ``slot`` context exits (its external job is final), so caps bound jobs in flight.
    """

    def __init__(
        self,
        stagger: float,
        caps: dict[str, int] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stagger = stagger
        self._caps = dict(caps or {})
        self._clock = clock
        self._cond = threading.Condition()
        self._in_use: dict[str, int] = {}
        self._waiting: dict[str, list[tuple[float, int]]] = {}
        self._next_submit = 0.0
        self._ticket = 0
        # priorities of jobs announced but not arrived yet: later ones must not overtake them
        self._expected: dict[str, list[float]] = {}

    def expect(self, backend: str, priorities: Sequence[float]) -> None:
        """Announce jobs that will ask for ``backend`` so a cap is granted strictly in order."""
        with self._cond:
            self._expected.setdefault(backend, []).extend(priorities)

    def withdraw(self, backend: str, priority: float) -> None:
        """An announced job will not ask after all (it already succeeded, or it crashed)."""
        with self._cond:
            expected = self._expected.get(backend, [])
            if priority in expected:
                expected.remove(priority)
                self._cond.notify_all()

    @contextmanager
    def slot(
        self,
        backend: str,
        priority: float,
        deadline: float | None = None,
        *,
        stagger: bool = True,
    ) -> Iterator[None]:
        """Wait for a slot of ``backend`` (if capped) and the stagger; hold the slot inside.

        ``stagger=False`` for a job that is re-attached rather than submitted: it still takes
        a slot (it is in flight) but needs no gap before a submission it will not make.
        """
        capped = backend in self._caps
        with self._cond:
            if capped:
                self._acquire(backend, priority, deadline)
            at = max(self._clock(), self._next_submit) if stagger else self._clock()
            # the stagger turn is reserved in the same breath, so submissions keep grant order
            if deadline is not None and at > deadline:
                if capped:
                    self._release(backend)
                raise Deadline()
            if stagger:
                self._next_submit = at + self._stagger
            while self._clock() < at:
                self._cond.wait(timeout=at - self._clock())
        try:
            yield
        finally:
            if capped:
                with self._cond:
                    self._release(backend)

    def _release(self, backend: str) -> None:
        self._in_use[backend] -= 1
        self._cond.notify_all()

    def _acquire(self, backend: str, priority: float, deadline: float | None) -> None:
        self._ticket += 1
        me = (priority, self._ticket)
        queue = self._waiting.setdefault(backend, [])
        heapq.heappush(queue, me)
        expected = self._expected.get(backend, [])
        if priority in expected:
            expected.remove(priority)
        try:
            while not (
                queue[0] == me
                and self._in_use.get(backend, 0) < self._caps[backend]
                and all(p >= priority for p in expected)
            ):
                self._wait(deadline)
        except Deadline:
            queue.remove(me)
            heapq.heapify(queue)
            self._cond.notify_all()
            raise
        heapq.heappop(queue)
        self._in_use[backend] = self._in_use.get(backend, 0) + 1
        self._cond.notify_all()

    def _wait(self, deadline: float | None) -> None:
        if deadline is None:
            self._cond.wait()
            return
        left = deadline - self._clock()
        if left <= 0:
            raise Deadline()
        self._cond.wait(timeout=left)
