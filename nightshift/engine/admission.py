"""Admission to submit: a pace per backend and per-backend caps, in priority order.

Each backend keeps its own pace: its submissions go ``1 / rate`` seconds apart (the catalogue's
``limits: {cli: {rate: 2/s}}``), or ``stagger`` apart when it has no rate, so a thousand jobs on
four backends don't queue behind one gap. A capped backend's slot is held until the job's end is
seen; ``free`` hands it on at once (the watcher calls it), before the job is recorded.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager

__all__ = ["Admission", "Deadline", "Pace"]


class Deadline(Exception):
    """The wait ran past the given deadline."""


class Pace:
    """Submission turns per backend, ``gap(backend)`` seconds apart (pure: times are given).

    ``rates`` (submissions a second) set a backend's gap; the others use ``default_gap``.
    """

    def __init__(self, default_gap: float, rates: Mapping[str, float] | None = None) -> None:
        self._default = max(0.0, default_gap)
        self._gaps = {b: 1.0 / r for b, r in (rates or {}).items() if r > 0}
        self._next: dict[str, float] = {}

    def gap(self, backend: str) -> float:
        """Seconds between two submissions to ``backend``."""
        return self._gaps.get(backend, self._default)

    def turn(self, backend: str, now: float) -> float:
        """When a submission to ``backend`` asked for at ``now`` may go (nothing reserved)."""
        return max(now, self._next.get(backend, now))

    def reserve(self, backend: str, now: float) -> float:
        """Take the next turn of ``backend``: its time; the one after comes a gap later."""
        at = self.turn(backend, now)
        self._next[backend] = at + self.gap(backend)
        return at


class _Held:
    """One admitted job's slot of a capped backend, released once (early, or on exit)."""

    __slots__ = ("backend", "priority", "released")

    def __init__(self, backend: str, priority: float) -> None:
        self.backend, self.priority, self.released = backend, priority, False


class Admission:
    """Lets jobs submit in priority order, paced per backend, at most ``caps[b]`` at once.

    Lower priority numbers go first. A job holds its backend slot from admission until the
    ``slot`` context exits or ``free`` is called for it (its external job is final), so caps
    bound jobs in flight. ``stagger`` is the default gap between two submissions to a backend;
    ``rates`` (submissions a second) override it per backend.
    """

    def __init__(
        self,
        stagger: float,
        caps: dict[str, int] | None = None,
        clock: Callable[[], float] = time.monotonic,
        rates: Mapping[str, float] | None = None,
    ) -> None:
        self._pace = Pace(stagger, rates)
        self._caps = dict(caps or {})
        self._clock = clock
        self._cond = threading.Condition()
        self._in_use: dict[str, int] = {}
        self._held: list[_Held] = []
        self._waiting: dict[str, list[tuple[float, int]]] = {}
        self._ticket = 0
        # priorities of jobs announced but not arrived yet: later ones must not overtake them
        self._expected: dict[str, list[float]] = {}
        self._interrupted = False

    @property
    def caps(self) -> dict[str, int]:
        """The capped backends and their caps."""
        return dict(self._caps)

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

    def interrupt(self) -> None:
        """The night stops: every job waiting for its turn or a slot gets ``Deadline`` now."""
        with self._cond:
            self._interrupted = True
            self._cond.notify_all()

    def holds(self, backend: str, priority: float) -> bool:
        """Whether the job of ``priority`` holds a slot of ``backend`` (not freed yet)."""
        with self._cond:
            return any(h.backend == backend and h.priority == priority for h in self._held)

    def free(self, backend: str, priority: float) -> bool:
        """The job of ``priority`` is over out there: its slot goes to the next job now.

        Its ``slot`` context then releases nothing more. False if it holds no slot.
        """
        with self._cond:
            for held in self._held:
                if held.backend == backend and held.priority == priority and not held.released:
                    self._release(held)
                    return True
        return False

    @contextmanager
    def slot(
        self,
        backend: str,
        priority: float,
        deadline: float | None = None,
        *,
        stagger: bool = True,
    ) -> Iterator[None]:
        """Wait for a slot of ``backend`` (if capped) and its pace; hold the slot inside.

        ``stagger=False`` for a job that is re-attached rather than submitted: it still takes
        a slot (it is in flight) but needs no turn for a submission it will not make.
        """
        held: _Held | None = None
        with self._cond:
            if backend in self._caps:
                held = self._acquire(backend, priority, deadline)
            now = self._clock()
            at = self._pace.turn(backend, now) if stagger else now
            # the turn is reserved in the same breath, so submissions keep grant order
            if deadline is not None and at > deadline:
                if held is not None:
                    self._release(held)
                raise Deadline()
            if stagger:
                self._pace.reserve(backend, now)
            while self._clock() < at and not self._interrupted:
                self._cond.wait(timeout=at - self._clock())
            if self._interrupted:
                if held is not None:
                    self._release(held)
                raise Deadline()
        try:
            yield
        finally:
            if held is not None:
                with self._cond:
                    if not held.released:
                        self._release(held)

    def _release(self, held: _Held) -> None:
        held.released = True
        self._held.remove(held)
        self._in_use[held.backend] -= 1
        self._cond.notify_all()

    def _acquire(self, backend: str, priority: float, deadline: float | None) -> _Held:
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
        held = _Held(backend, priority)
        self._held.append(held)
        self._cond.notify_all()
        return held

    def _wait(self, deadline: float | None) -> None:
        if self._interrupted:
            raise Deadline()
        if deadline is None:
            self._cond.wait()
            return
        left = deadline - self._clock()
        if left <= 0:
            raise Deadline()
        self._cond.wait(timeout=left)
