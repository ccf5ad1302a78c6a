"""A night's slots of Prefect concurrency limits, held as leases the night hands on itself.

Each job of a capped backend holds one lease of the backend's limit while it is in flight, so
the limit shows (and, across nights, enforces) the jobs in flight. When the watcher sees a job
end, its lease goes straight to the next job the night's gate lets in: no release and acquire
round trip, no wait on Prefect's retry timer. A lease nobody takes within ``grace`` seconds is
released; all are released when the night ends. A limit that is full is asked again on a short
poll of our own. A job's wait for a slot is a coroutine on the night's loop (``take``): it holds
no thread while it waits; each request to the server is a blocking call on a small pool of the
loop's, one at a time. Slot leases are renewed by one task on the night's loop for the whole night,
and a spare lease's grace is a timer on it (each renewal and release off the loop, among the
night's chores: ``nightshift/loop.py``).

With a ``book`` (``store/slot_holders.py``) each lease taken and given back is written down with
the night that holds it; ``heal_orphans`` gives back, when a night starts, the slots of nights
that died holding them (kill -9): by lease id, and on Prefect's temporary server, whose leases
died with it, by decrementing the limit's ``active_slots``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from prefect.client.orchestration import SyncPrefectClient

from nightshift.backoff import Backoff
from nightshift.config.settings import temporary_prefect_api
from nightshift.loop import CHORE_THREADS, CHORES, NightLoop

__all__ = [
    "FULL",
    "LEASE_S",
    "MIN_LEASE_S",
    "SLOT_POLL",
    "PrefectLeaseApi",
    "SlotBook",
    "SlotLeaseApi",
    "SlotLeases",
    "heal_orphans",
    "slot_lease_s",
]

log = logging.getLogger("nightshift.limits")
T = TypeVar("T")

# how often a job waiting for a full limit asks again: soon at first, then every half second
SLOT_POLL = Backoff(initial=0.05, factor=2.0, max=0.5)
_ASK_WAIT_S = 0.1  # a job waiting behind another's slot request looks at its stop this often
# the slot requests' blocking calls (one out at a time) and their book's writes
_SLOTS, _SLOT_THREADS = "nightshift-slots", 2
FULL = "full"  # the limit has no free slot (HTTP 423)
LEASE_S = 300.0  # a lease lives this long unless renewed (at three quarters of it)
MIN_LEASE_S = 60.0  # the shortest lease the Prefect API grants


def slot_lease_s(night_lease_ttl: float) -> float:
    """How long a night's slot leases live: as long as its own lease (NIGHTSHIFT_LEASE_TTL),
    so a night killed with -9 frees its slots when the next night may start, not minutes after."""
    return max(MIN_LEASE_S, night_lease_ttl)


class SlotLeaseApi(Protocol):
    """The server side: take one slot of a limit, renew its lease, give it back."""

    def open(self) -> None:
        """Connect now, before the first acquire (which then costs what every other does)."""
        ...

    def acquire(self, name: str) -> str | None:
        """A lease id; ``FULL`` if every slot is taken; None if the limit does not exist."""
        ...

    def renew(self, lease: str) -> None: ...

    def release(self, lease: str) -> None: ...

    def close(self) -> None:
        """No more calls will come."""
        ...


class SlotBook(Protocol):
    """Where a night writes down the slot leases it holds (``store/slot_holders.SlotHolders``)."""

    def taken(self, limit_name: str, lease_id: str) -> None: ...

    def given_back(self, lease_id: str) -> None: ...


class SlotLeases:
    """Per limit name: leases in use by jobs, and spare ones waiting for the next job."""

    def __init__(
        self,
        api: SlotLeaseApi,
        *,
        grace: float = 1.0,
        poll: Backoff = SLOT_POLL,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] | None = None,
        renew_every: float = LEASE_S * 0.75,
        book: SlotBook | None = None,
        loop: NightLoop,
    ) -> None:
        self._api = api
        self._book = book
        self._renew_every = renew_every
        self._grace = grace
        self._poll = poll
        self._clock = clock
        self._sleep = sleep  # None: the loop's own (a test's fake clock moves instead)
        self._lock = threading.Lock()
        # the night's slot requests, one at a time (a few milliseconds each): two meeting at a
        # SQLite server were answered 503 and one taken again on the client's retry, 2 s later
        self._asking: asyncio.Lock | None = None  # made on the loop, at its first request
        # a release of spare leases (a grace timer's chore) and the night's close, one at a time:
        # the client is closed after the last release, never under one
        self._releasing = threading.Lock()
        self._spare: dict[str, list[tuple[str, float]]] = {}  # name -> (lease, spare since)
        self._in_use: dict[str, list[str]] = {}
        self._early: dict[str, int] = {}  # leases handed on before their holder let go
        self._closed = False
        self._interrupted = False
        self._loop = loop  # the night's: renewals, grace timers and waits run on it
        self._renewing: Future[None] | None = None

    def open(self) -> None:
        """Connect to the server before the night's first job asks for a slot."""
        self._api.open()

    def hold(self, name: str, timeout_s: float) -> AbstractContextManager[object]:
        """One slot of ``name`` while inside (TimeoutError if none comes by ``timeout_s``)."""
        return self._held(name, self._clock() + timeout_s)

    @contextmanager
    def _held(self, name: str, end: float) -> Iterator[None]:
        lease = self._night().run(self._take(name, end))  # a thread waits here, not the loop
        try:
            yield
        finally:
            if lease is not None:
                self._give_back(name)

    async def take(self, name: str, timeout_s: float) -> AbstractContextManager[object]:
        """On the night's loop: one slot of ``name``, what gives it back (TimeoutError if none
        comes by ``timeout_s``, or the night stops first)."""
        lease = await self._take(name, self._clock() + timeout_s)
        held = ExitStack()
        if lease is not None:
            held.callback(self._give_back, name)
        return held

    def hand_on(self, name: str) -> None:
        """A job of ``name`` was seen to end: its lease is spare for the next job now."""
        with self._lock:
            if not self._in_use.get(name):
                return
            self._early[name] = self._early.get(name, 0) + 1
        self._give_back(name, early=True)

    def interrupt(self) -> None:
        """The night stops: a job waiting for a slot gives up now (``TimeoutError``)."""
        self._interrupted = True

    async def blocking(self, call: Callable[[], T]) -> T:
        """``call()`` on the slots' pool of the night's loop (a wait of Prefect's own)."""
        pool = self._night().blocking(_SLOTS, _SLOT_THREADS)
        return await asyncio.get_running_loop().run_in_executor(pool, call)

    async def _take(self, name: str, end: float) -> str | None:
        loop = asyncio.get_running_loop()
        if self._asking is None:
            self._asking = asyncio.Lock()
        asking, pool = self._asking, self._night().blocking(_SLOTS, _SLOT_THREADS)
        waits = 0
        while True:
            if self._interrupted:
                raise TimeoutError(f"the night stopped before a slot of {name} came")
            with self._lock:
                spare = self._spare.get(name)
                if spare:
                    lease = spare.pop()[0]
                    self._in_use.setdefault(name, []).append(lease)
                    return lease
            try:  # another job's request is out: look at the stop and the spares again soon
                wait = min(_ASK_WAIT_S, max(0.0, end - self._clock()))
                await asyncio.wait_for(asking.acquire(), wait)
            except TimeoutError:
                if end - self._clock() <= 0:
                    raise TimeoutError(
                        f"no slot of the Prefect limit {name} before the deadline"
                    ) from None
                continue
            try:
                got = await loop.run_in_executor(pool, self._api.acquire, name)
            finally:
                asking.release()
            if got is None:
                return None  # no such limit (deleted under us): the night's gate still caps
            if got != FULL:
                with self._lock:
                    self._in_use.setdefault(name, []).append(got)
                await loop.run_in_executor(pool, self._write_down, "taken", name, got)
                self._start_renewing()
                return got
            left = end - self._clock()
            if left <= 0:
                raise TimeoutError(f"no slot of the Prefect limit {name} before the deadline")
            pause = min(self._poll.delay(waits), left)
            if self._sleep is not None:  # a test's fake clock: moved at once
                self._sleep(pause)
                await asyncio.sleep(0)
            else:
                await asyncio.sleep(pause)
            waits += 1

    def _give_back(self, name: str, *, early: bool = False) -> None:
        with self._lock:
            if not early and self._early.get(name, 0) > 0:
                self._early[name] -= 1  # this one's lease was handed on when its end was seen
                return
            in_use = self._in_use.get(name, [])
            if not in_use:
                return
            lease = in_use.pop()
            self._spare.setdefault(name, []).append((lease, self._clock()))
        night = self._night()
        night.call(night.loop.call_later, self._grace, self._chore, self.release_spare)

    def release_spare(self, older_than: float | None = None) -> int:
        """Release the spare leases nobody took for ``grace`` (or ``older_than``) seconds."""
        age = self._grace if older_than is None else older_than
        stale: list[str] = []
        # a renewal (or the close) in flight: this chore does not queue behind it, holding one
        # of the night's two chore threads; the next grace timer (or the close) releases them
        if not self._releasing.acquire(blocking=False):
            return 0
        try:
            now = self._clock()
            with self._lock:
                if self._closed:  # the close released them all
                    return 0
                for spare in self._spare.values():
                    stale += [lease for lease, since in spare if now - since >= age]
                    spare[:] = [(lease, since) for lease, since in spare if now - since < age]
            for lease in stale:
                self._release(lease)
        finally:
            self._releasing.release()
        return len(stale)

    def close(self) -> None:
        """The night is over: release every lease it still has."""
        with self._lock:
            self._closed = True
            renewing, self._renewing = self._renewing, None
        if renewing is not None:
            renewing.cancel()
        with self._releasing:
            with self._lock:
                leases = [lease for spare in self._spare.values() for lease, _ in spare]
                leases += [lease for in_use in self._in_use.values() for lease in in_use]
                self._spare.clear()
                self._in_use.clear()
            for lease in leases:
                self._release(lease)
            self._api.close()

    def _release(self, lease: str) -> None:
        try:
            self._api.release(lease)
        except Exception as exc:  # it expires on its own
            log.warning("could not release a Prefect concurrency lease: %s", exc)
            return
        self._write_down("given_back", lease)

    def _write_down(self, what: str, *args: str) -> None:
        """Keep the book; a failure (the database is down) costs only the healing of a crash."""
        if self._book is None:
            return
        try:
            getattr(self._book, what)(*args)
        except Exception as exc:
            log.warning("could not write down a Prefect slot lease: %s", exc)

    def _night(self) -> NightLoop:
        return self._loop

    def _chore(self, work: Callable[[], object]) -> None:
        """On the loop: ``work`` off it, among the night's chores (none once the night ended)."""
        with contextlib.suppress(RuntimeError):
            self._night().blocking(CHORES, CHORE_THREADS).submit(work)

    def _start_renewing(self) -> None:
        night = self._night()
        with self._lock:
            if self._renewing is not None or self._closed:
                return
            self._renewing = night.submit(self._renew_every_while())

    async def _renew_every_while(self) -> None:
        loop = asyncio.get_running_loop()
        chores = self._night().blocking(CHORES, CHORE_THREADS)
        while True:
            await asyncio.sleep(self._renew_every)
            await loop.run_in_executor(chores, self._renew_all)

    def _renew_all(self) -> None:
        with self._releasing:  # the close waits for it (its client stays open meanwhile)
            with self._lock:
                if self._closed:
                    return
                leases = [lease for spare in self._spare.values() for lease, _ in spare]
                leases += [lease for in_use in self._in_use.values() for lease in in_use]
            for lease in leases:
                try:
                    self._api.renew(lease)
                except Exception as exc:  # not strict: the job runs on, the cap may be exceeded
                    log.warning("could not renew a Prefect concurrency lease: %s", exc)


class Orphans(Protocol):
    """Slot leases of dead nights (``store/slot_holders.SlotHolders``)."""

    def orphans(self) -> list[Any]: ...

    def claim(self, orphan: Any) -> bool: ...


class SlotHealer(Protocol):
    """What healing needs of the server: release a lease, or take slots back outright."""

    temporary: bool

    def release(self, lease: str) -> None: ...

    def release_slots(self, name: str, slots: int) -> None: ...


def heal_orphans(book: Orphans, api: SlotHealer) -> int:
    """Give back the slots of nights that died holding them; how many were given back.

    A real server still holds a dead night's lease (until it expires): released by id. The
    temporary server a dead night ran on died with it, and its leases (kept in its memory)
    with them, while ``active_slots`` stays taken in the database: taken back one by one.
    """
    healed = 0
    for orphan in book.orphans():
        if not book.claim(orphan):
            continue  # another night starting now heals this one
        try:
            if api.temporary:
                api.release_slots(orphan.limit_name, 1)
            else:
                api.release(orphan.lease_id)
        except Exception as exc:  # it may expire on its own (a real server)
            log.warning("could not give back a dead night's slot of %s: %s", orphan.limit_name, exc)
            continue
        log.info("gave back a slot of %s held by a night that died (%s)", orphan.limit_name,
                 orphan.holder)  # fmt: skip
        healed += 1
    return healed


class PrefectLeaseApi:
    """``SlotLeaseApi`` on the Prefect server's global concurrency limits.

    Its own client, not the flow run's shared one (whose context count is not thread-safe):
    opened by ``open`` (or on first use), closed by ``close``.
    """

    def __init__(self, lease_s: float = LEASE_S) -> None:
        self.lease_s = lease_s
        from prefect.settings import PREFECT_API_URL

        # a temporary server (Prefect's, or the one `nightshift run` started): its slot leases
        # live in its memory only
        self.temporary = temporary_prefect_api(PREFECT_API_URL.value(), os.environ)
        self._client: SyncPrefectClient | None = None
        self._lock = threading.Lock()

    def _api(self) -> SyncPrefectClient:
        from prefect.client.orchestration import get_client

        with self._lock:
            if self._client is None:
                # settings of our own: get_client then makes a client, not the context's
                client = get_client(sync_client=True, httpx_settings={"timeout": 30.0})
                self._client = client.__enter__()
            return self._client

    def open(self) -> None:
        """Make the client and its connection now: one small POST (as an acquire is), so the
        night's first acquire finds the connection made and the client's first-call work done."""
        self._api().read_global_concurrency_limits(limit=1)

    def acquire(self, name: str) -> str | None:
        import httpx

        try:
            response = self._api().increment_concurrency_slots_with_lease(
                names=[name], slots=1, mode="concurrency", lease_duration=self.lease_s
            )
        except httpx.HTTPStatusError as exc:
            if exc.response.status_code == 423:
                return FULL
            raise
        data = response.json()
        return str(data["lease_id"]) if data.get("limits") else None

    def renew(self, lease: str) -> None:
        from uuid import UUID

        self._api().renew_concurrency_lease(lease_id=UUID(lease), lease_duration=self.lease_s)

    def release(self, lease: str) -> None:
        from uuid import UUID

        self._api().release_concurrency_slots_with_lease(lease_id=UUID(lease))

    def release_slots(self, name: str, slots: int) -> None:
        """Take ``slots`` of ``name`` back without a lease (its lease died with its server)."""
        self._api().release_concurrency_slots(names=[name], slots=slots, occupancy_seconds=1.0)

    def server(self) -> str:
        """Which server this is: its API URL, or ``temporary:<PREFECT_HOME>``."""
        from prefect.settings import PREFECT_API_URL, PREFECT_HOME

        url = PREFECT_API_URL.value()
        return f"temporary:{PREFECT_HOME.value()}" if self.temporary else str(url)

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.__exit__(None, None, None)
