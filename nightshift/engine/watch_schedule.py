"""What the watcher asks and when: the watched jobs, their due looks and timers, and which status
calls, listings and timer firings start now. Values and decisions only, no I/O, no thread: the
watcher (``engine/watcher.py``) owns one on its loop and runs the work it hands out.

A backend that can list many jobs at once (``status_many``) gets one listing for every job of it
that is idle (due or not) when one of them falls due; one listing is out per backend at a time,
with its own deadline (``listing_deadline``): past it, its jobs are asked one by one and the
backend lists again only once the hung listing came back. A job a listing left out is asked on a
call of its own. Other backends get one call per due job, ``calls_per_backend`` at most at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from nightshift.backends.base import ListsSome, capabilities
from nightshift.engine.watch_request import Reason, WatchRequest

__all__ = ["Ask", "Drain", "Fire", "ListAll", "WatchSchedule", "Work"]

FAR = 3600.0  # the longest the watch sleeps without a reason to wake


@dataclass(frozen=True)
class Fire:
    """A timer of ``entry`` fired: the watch of it ends for ``reason``."""

    entry: WatchRequest
    reason: Reason


@dataclass(frozen=True)
class Drain:
    """``entry``'s stream said something: take what it said, in order."""

    entry: WatchRequest


@dataclass(frozen=True)
class Ask:
    """One status call for ``entry`` (``awaits``: on its backend's own async client)."""

    backend: int
    entry: WatchRequest
    awaits: bool


@dataclass(frozen=True)
class ListAll:
    """One listing of ``backend`` answering for ``entries``."""

    backend: int
    entries: tuple[WatchRequest, ...]


Work = Fire | Drain | Ask | ListAll


class WatchSchedule:
    """The watched jobs and the calls out for them; ``check`` is called on every change (the
    watcher's owner check: only its loop may touch this)."""

    def __init__(
        self,
        listing_deadline: float,
        calls_per_backend: int,
        check: Callable[[], None] = lambda: None,
    ) -> None:
        self._entries: list[WatchRequest] = []
        self._listing_deadline = listing_deadline
        self._calls_per_backend = calls_per_backend
        self._check = check
        self._calls: dict[int, int] = {}  # backend (by id) -> status calls out
        # backends whose listing is out -> when it is given up
        self._listing: dict[int, float] = {}
        # backends whose listing was given up and is not back yet: their jobs are asked singly
        self._hung: set[int] = set()

    def add(self, entry: WatchRequest) -> None:
        self._check()
        self._entries.append(entry)

    def remove(self, entry: WatchRequest) -> None:
        """Watching ``entry`` ended: no more looks, its answers ignored."""
        self._check()
        entry.closing = True
        if entry in self._entries:
            self._entries.remove(entry)

    def take_all(self) -> list[WatchRequest]:
        """Every job still watched, each closing (the watch stops)."""
        self._check()
        left, self._entries = self._entries, []
        for entry in left:
            entry.closing = True  # a call in flight is ignored when it answers
        return left

    def labels(self) -> list[str]:
        self._check()
        return [e.label for e in self._entries]

    def look_now(self, labels: Iterable[str], now: float) -> None:
        self._check()
        wanted = set(labels)
        for entry in self._entries:
            if entry.label in wanted:
                entry.next_at = min(entry.next_at, now)

    def busy(self, now: float) -> bool:
        """Whether a call is out or a look or timer is due."""
        self._check()
        if any(self._calls.values()) or self._listing:
            return True
        return any(
            e.checking
            or (not e.closing and e.streamed)
            or (not e.closing and (w := e.wake_at()) is not None and w <= now)
            for e in self._entries
        )

    def take(self, now: float) -> tuple[list[Work], float]:
        """Fire due timers, start the due calls; say when to look next.

        A job whose backend has no free call waits for one to end (that end wakes the watch),
        so only its timers count towards the next wake-up.
        """
        self._check()
        work: list[Work] = []
        self._give_up_listings(now)
        for entry in self._entries:
            if not entry.closing and (reason := entry.timer_due(now)) is not None:
                entry.closing = True
                work.append(Fire(entry, reason))
        for entry in self._entries:
            if entry.streamed and not entry.closing and not entry.checking:
                entry.checking = True
                work.append(Drain(entry))
        due: dict[int, list[WatchRequest]] = {}
        idle: dict[int, list[WatchRequest]] = {}  # every job not being asked, by backend
        for entry in self._entries:
            if not entry.closing and not entry.checking:
                idle.setdefault(id(entry.backend), []).append(entry)
                if entry.next_at <= now:
                    due.setdefault(id(entry.backend), []).append(entry)
        for key, entries in due.items():
            work += self._calls_for(key, entries, idle[key], now)
        wake = now + FAR
        for entry in self._entries:
            if entry.closing:
                continue
            times = list(entry.timers().values())
            if not entry.checking and entry.next_at > now:
                times.append(entry.next_at)
            wake = min([wake, *times])
        return work, min([wake, *self._listing.values()])

    def _calls_for(
        self, key: int, due: list[WatchRequest], idle: list[WatchRequest], now: float
    ) -> list[Work]:
        """The calls that ask about one backend's due jobs (a listing where it can)."""
        caps = capabilities(due[0].backend)
        some = caps.lists_some

        def listable(entry: WatchRequest, some: ListsSome | None = some) -> bool:
            return not entry.single and (some is None or some.listable(entry.external_id))

        work: list[Work] = []
        # the last listing did not show them, or no listing can: each on a call of its own
        singles = [e for e in due if not listable(e)]
        rest = [e for e in due if listable(e)]
        # a listing given up and not back yet: its backend's jobs are asked one by one
        if caps.lists_status is not None and rest and key not in self._hung:
            listed = [e for e in idle if listable(e)]
            if key in self._listing:
                rest = []  # one listing at a time; its end wakes the watch for these
            elif len(listed) > 1:
                # one listing answers for every job of the backend, due or not: their look
                self._listing[key] = now + self._listing_deadline
                for entry in listed:
                    entry.checking = True
                    entry.listed = key
                work.append(ListAll(key, tuple(listed)))
                rest = []
        awaits = caps.awaits_status is not None
        for entry in [*singles, *rest]:
            if self._calls.get(key, 0) >= self._calls_per_backend:
                break  # bounded: the rest wait for a free call
            self._calls[key] = self._calls.get(key, 0) + 1
            entry.checking = True
            entry.single = False
            work.append(Ask(key, entry, awaits))
        return work

    def _give_up_listings(self, now: float) -> None:
        """A listing past its deadline no longer holds its jobs: each is asked at once on a
        call of its own (its answer, when it comes, is ignored)."""
        for key, give_up_at in list(self._listing.items()):
            if now < give_up_at:
                continue
            del self._listing[key]
            self._hung.add(key)
            for entry in self._entries:
                if entry.listed == key and entry.checking:
                    entry.checking, entry.listed, entry.single = False, None, True
                    entry.next_at = min(entry.next_at, now)

    def asked(self, key: int, entry: WatchRequest) -> None:
        """A status call is over (answered, failed or cancelled): its backend's call is free."""
        self._check()
        self._calls[key] -= 1
        entry.checking = False

    def listing_back(self, key: int) -> bool:
        """A listing came back: False when it had been given up (its jobs went on singly)."""
        self._check()
        if key not in self._listing:
            self._hung.discard(key)
            return False
        del self._listing[key]  # from here on it cannot be given up
        return True

    def listed(
        self, entries: Iterable[WatchRequest], unlisted: Iterable[WatchRequest], now: float
    ) -> None:
        """A listing's answers were taken: the jobs it left out are asked at once, singly."""
        self._check()
        for entry in entries:
            entry.checking, entry.listed = False, None
        for entry in unlisted:
            entry.single = True
            entry.next_at = min(entry.next_at, now)
