"""Admission to submit: a pace per backend and per-backend caps, in priority order.

Each backend keeps its own pace: its submissions go ``1 / rate`` seconds apart (the catalogue's
``limits: {cli: {rate: 2/s}}``), or ``stagger`` apart when it has no rate, so a thousand jobs on
four backends don't queue behind one gap. A capped backend's slot is held until the job's end is
seen; ``free`` hands it on at once (the watcher calls it), before the job is recorded.

A job waits for its turn as a coroutine (``enter``) on the night's loop: a job waiting holds no
thread. The state is the loop's once the night binds it (``on``): a change asked from another
thread (a slot freed by a status thread, a job withdrawn on a finish thread, the night
interrupted by a signal) is made on the loop, no lock; with the owner check on, touching it from
another thread raises. Unbound (a test on one thread), every call is made where it is asked.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nightshift.loop import NightLoop

__all__ = ["Admission", "Deadline", "Held", "Pace"]


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


class Held:
    """One admitted job's slot of a capped backend, released once (early, or on exit)."""

    __slots__ = ("backend", "priority", "released")

    def __init__(self, backend: str, priority: float) -> None:
        self.backend, self.priority, self.released = backend, priority, False


_Waiter = tuple[asyncio.AbstractEventLoop, "asyncio.Future[None]"]


class Admission:
    """Lets jobs submit in priority order, paced per backend, at most ``caps[b]`` at once.

    Lower priority numbers go first. A job holds its backend slot from admission until it
    ``leave``s or ``free`` is called for it (its external job is final), so caps bound jobs in
    flight. ``stagger`` is the default gap between two submissions to a backend; ``rates``
    (submissions a second) override it per backend.
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
        self._loop: NightLoop | None = None  # the night's, once bound: its state is the loop's
        self._waiters: list[_Waiter] = []  # woken on any change, on their own loops
        self._in_use: dict[str, int] = {}
        self._held: list[Held] = []
        self._waiting: dict[str, list[tuple[float, int]]] = {}
        self._ticket = 0
        # priorities of jobs announced but not arrived yet: later ones must not overtake them
        self._expected: dict[str, list[float]] = {}
        self._interrupted = False

    @property
    def caps(self) -> dict[str, int]:
        """The capped backends and their caps."""
        return dict(self._caps)

    def on(self, loop: NightLoop) -> None:
        """From now on the state is ``loop``'s (the night's): asked from elsewhere, made there."""
        if self._loop is not None and self._loop is not loop:
            raise RuntimeError("an admission serves one night's loop")
        self._loop = loop

    def expect(self, backend: str, priorities: Sequence[float]) -> None:
        """Announce jobs that will ask for ``backend`` so a cap is granted strictly in order."""
        self._on_loop(self._expect, backend, list(priorities))

    def withdraw(self, backend: str, priority: float) -> None:
        """An announced job will not ask after all (it already succeeded, or it crashed)."""
        self._on_loop(self._withdraw, backend, priority)

    def interrupt(self) -> None:
        """The night stops: every job waiting for its turn or a slot gets ``Deadline`` now."""
        self._on_loop(self._interrupt)

    def holds(self, backend: str, priority: float) -> bool:
        """Whether the job of ``priority`` holds a slot of ``backend`` (not freed yet)."""
        self._owned()
        return any(h.backend == backend and h.priority == priority for h in self._held)

    def free(self, backend: str, priority: float) -> bool:
        """The job of ``priority`` is over out there: its slot goes to the next job now (on the
        loop). Its ``leave`` then releases nothing more. False if it holds no slot.
        """
        self._owned()
        for held in self._held:
            if held.backend == backend and held.priority == priority and not held.released:
                self._release(held)
                return True
        return False

    def leave(self, held: Held | None) -> None:
        """The job admitted with ``held`` lets go of its slot (nothing if freed already)."""
        if held is not None:
            self._on_loop(self._leave, held)

    async def enter(
        self,
        backend: str,
        priority: float,
        deadline: float | None = None,
        *,
        stagger: bool = True,
    ) -> Held | None:
        """Wait for a slot of ``backend`` (if capped: the slot, for ``leave``) and its pace.

        ``stagger=False`` for a job that is re-attached rather than submitted: it still takes
        a slot (it is in flight) but needs no turn for a submission it will not make.
        ``Deadline`` when ``deadline`` (on the clock) passes first, or the night is interrupted.
        """
        self._owned()
        me: tuple[float, int] | None = None
        held: Held | None = None
        at: float | None = None
        try:
            while True:
                if at is None and backend in self._caps and held is None:
                    if me is None:
                        me = self._queue_up(backend, priority)
                    if self._may_take(backend, priority, me):
                        held, me = self._take(backend, priority), None
                    else:
                        timeout = self._left(deadline)
                        waiter = self._waiter()
                if at is None and (held is not None or backend not in self._caps):
                    # the turn is reserved in the same step, so submissions keep grant order
                    now = self._clock()
                    at = self._pace.turn(backend, now) if stagger else now
                    if deadline is not None and at > deadline:
                        raise Deadline()
                    if stagger:
                        self._pace.reserve(backend, now)
                if at is not None:
                    if self._interrupted:
                        raise Deadline()
                    if at <= self._clock():
                        return held
                    timeout, waiter = at - self._clock(), self._waiter()
                await _woken(waiter, timeout)
        except BaseException:  # past its deadline, interrupted, or its task cancelled
            if me is not None:
                self._leave_queue(backend, me)
            if held is not None and not held.released:
                self._release(held)
            raise

    # -- on the loop ------------------------------------------------------------------------
    def _on_loop(self, fn: Callable[..., None], *args: Any) -> None:
        if self._loop is None:
            fn(*args)  # unbound: its caller is the only thread
        else:
            self._loop.soon(fn, *args)

    def _owned(self) -> None:
        if self._loop is not None:
            self._loop.owned("the admission")

    def _expect(self, backend: str, priorities: list[float]) -> None:
        self._owned()
        self._expected.setdefault(backend, []).extend(priorities)

    def _withdraw(self, backend: str, priority: float) -> None:
        self._owned()
        expected = self._expected.get(backend, [])
        if priority in expected:
            expected.remove(priority)
            self._wake()

    def _interrupt(self) -> None:
        self._owned()
        self._interrupted = True
        self._wake()

    def _leave(self, held: Held) -> None:
        self._owned()
        if not held.released:
            self._release(held)

    def _waiter(self) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append((loop, waiter))
        return waiter

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for loop, waiter in waiters:
            with contextlib.suppress(RuntimeError):  # its loop is closed: nobody waits there
                loop.call_soon_threadsafe(_set, waiter)

    def _left(self, deadline: float | None) -> float | None:
        if self._interrupted:
            raise Deadline()
        if deadline is None:
            return None
        left = deadline - self._clock()
        if left <= 0:
            raise Deadline()
        return left

    def _queue_up(self, backend: str, priority: float) -> tuple[float, int]:
        self._ticket += 1
        me = (priority, self._ticket)
        heapq.heappush(self._waiting.setdefault(backend, []), me)
        expected = self._expected.get(backend, [])
        if priority in expected:
            expected.remove(priority)
        return me

    def _may_take(self, backend: str, priority: float, me: tuple[float, int]) -> bool:
        queue = self._waiting[backend]
        return (
            queue[0] == me
            and self._in_use.get(backend, 0) < self._caps[backend]
            and all(p >= priority for p in self._expected.get(backend, []))
        )

    def _take(self, backend: str, priority: float) -> Held:
        heapq.heappop(self._waiting[backend])
        self._in_use[backend] = self._in_use.get(backend, 0) + 1
        held = Held(backend, priority)
        self._held.append(held)
        self._wake()
        return held

    def _leave_queue(self, backend: str, me: tuple[float, int]) -> None:
        queue = self._waiting[backend]
        queue.remove(me)
        heapq.heapify(queue)
        self._wake()

    def _release(self, held: Held) -> None:
        held.released = True
        self._held.remove(held)
        self._in_use[held.backend] -= 1
        self._wake()


def _set(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


async def _woken(waiter: asyncio.Future[None], timeout: float | None) -> None:
    """Wait until ``waiter`` is woken, ``timeout`` seconds at most."""
    try:
        await asyncio.wait_for(asyncio.shield(waiter), timeout)
    except TimeoutError:
        waiter.cancel()
