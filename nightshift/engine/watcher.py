"""One task on the night's loop (``nightshift/loop.py``) that watches every in-flight job.

Each job keeps its own poll schedule and timers (``engine/poll_schedule.py``: with a usual
duration, rarely far from its usual end and densely around it; without, its backoff). When a job
of a backend that can list many jobs at once (``status_many``) falls due, one listing answers
for every job of that backend in flight: each one's schedule moves on from that look, so none is
asked again separately for a state the listing just gave, and the next listing is made when the
earliest of them is next due. A backend that answers one job at a time gets one status call per
due job, side by side (bounded per backend), so a hung call costs only its own job. Timers are
checked by the watch itself: they fire on time whatever a status call (on a pool thread) is
doing. A job is never
asked again once it is final.
A job the listing does not show (or every job, when the listing fails) is asked at once on a
call of its own: the answers the listing had in hand go on without waiting for it. A listing has
a deadline of its own (``listing_deadline``, half the poll cap in a night): past it, its jobs are
asked one by one, each on its own call, and the backend lists again only once the hung listing
came back, so one hung job holds only itself.

A job the service says it does not know (``UnknownJobError``: a 404, "no such job") before any
status answer has shown it is *not visible yet* (workers scaling from zero, a lagging replica):
it is asked again on its backoff until ``visible_at``, then given up as ``lost``. Once seen, the
same answer means its record expired.

Whenever watching gives up on a job that may still run out there (a timer, a status it cannot
read, a job never seen), the job is cancelled, on a call with its own deadline
(``cancel_deadline``): the result says whether the service accepted it.

The moment a job is seen final ``on_final`` is told, before its record is written: the night's
gate hands its slot to the next job within this tick.

A job whose backend streams its changes (``Streams``) is listened to instead (``streams.py``: a
task on the same loop per stream): its statuses are taken like a poll's answers, it gets no
status call while the stream holds, and a dropped stream puts it back on its backoff until a
poll finds it still going: then it is listened to again (a stream that dropped more than
``STREAM_RECONNECTS`` times leaves its job polled to its end).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, InvalidStateError
from typing import Any

from nightshift.backends.base import ExternalState, JobStatus, ListsSome, capabilities
from nightshift.engine.poll_schedule import PollSchedule
from nightshift.engine.streams import StreamListener
from nightshift.engine.watch_request import CancelAsked, Reason, WatchRequest, WatchResult
from nightshift.errors import (
    BackendError,
    CannotCancelError,
    PermanentBackendError,
    TransientBackendError,
    UnknownJobError,
)
from nightshift.loop import NightLoop, Signal
from nightshift.usual import Usual

__all__ = ["STREAM_RECONNECTS", "CancelAsked", "WatchRequest", "WatchResult", "Watcher"]

OnChange = Callable[[str, ExternalState, JobStatus], None]
OnError = Callable[[str, BaseException | None], None]  # a status call failed (or said nothing)
# label -> its usual duration from submit to end (seconds: known as one number), if known
Expected = Callable[[str], Usual | float | None]
_CALLS_PER_BACKEND = 8  # status calls in flight at once, per backend
_THREADS = 32  # the status calls' threads, for every backend
# a job's stream is listened to again after each of its first drops (a proxy's restart, an
# idle cut): a long job is not polled for hours after one blip; a stream that keeps dropping
# is given up and its job polled on its backoff
STREAM_RECONNECTS = 3
LISTING_DEADLINE_S = 15.0  # a listing's own deadline (a night's: half its poll cap)
CANCEL_DEADLINE_S = 30.0  # a cancel's own deadline: one that hangs never holds the night
_CANCEL_THREADS = 8


class Watcher:
    """Polls all registered jobs from one loop; ``watch`` returns a future per job."""

    def __init__(
        self,
        on_change: OnChange,
        clock: Callable[[], float] = time.monotonic,
        *,
        on_error: OnError = lambda _label, _error: None,
        expected: Expected = lambda _label: None,
        on_final: Callable[[str], None] = lambda _label: None,
        listing_deadline: float = LISTING_DEADLINE_S,
        cancel_deadline: float = CANCEL_DEADLINE_S,
        loop: NightLoop | None = None,
    ) -> None:
        self._on_change = on_change
        self._on_error = on_error
        self._expected = expected
        self._on_final = on_final
        self._clock = clock
        # the night's loop runs the watch (a watcher made alone runs on a loop of its own)
        self._night = loop if loop is not None else NightLoop("nightshift-watcher")
        self._owns_loop = loop is None
        self._lock = threading.RLock()  # the entries: read and changed by the loop and the calls
        self._changed = Signal(self._night)  # wakes the watch (and ``wait_idle``)
        self._entries: list[WatchRequest] = []
        self._stopped = False
        self._detached = False
        self._calls_per_backend = _CALLS_PER_BACKEND
        self._calls: dict[int, int] = {}  # backend (by id) -> status calls in flight
        # backends whose status_many call is in flight -> when it is given up (watcher clock)
        self._listing: dict[int, float] = {}
        # backends whose listing was given up and is not back yet: their jobs are asked singly
        self._hung_listings: set[int] = set()
        self._listing_deadline = listing_deadline
        self._cancel_deadline = cancel_deadline
        self._pool = self._night.blocking("nightshift-status", _THREADS)
        # cancels run apart from the status calls: one waited on holds no status call's thread
        self._cancels = self._night.blocking("nightshift-cancel", _CANCEL_THREADS)
        self._streams = StreamListener(self._night)  # every stream a task on the night's loop
        self._awaited: set[asyncio.Future[None]] = set()  # status calls awaited on the loop
        self._task = self._night.submit(self._watch())

    @property
    def loop(self) -> NightLoop:
        """The loop the watch runs on (the night's)."""
        return self._night

    def now(self) -> float:
        """The watcher's clock."""
        return self._clock()

    def watch(self, request: WatchRequest) -> Future[WatchResult]:
        """Start watching; the first check after the policy's initial delay (or its end)."""
        now = self._clock()
        usual = request.usual if request.usual is not None else self._expected(request.label)
        if isinstance(usual, int | float):
            usual = Usual.exactly(float(usual))
        request.usual = usual
        request.schedule = PollSchedule(request.policy, usual)
        request.origin = now
        request.next_at = now if request.look_first else self._next_poll(request, now)
        with self._lock:
            if self._detached:  # the night stops watching: this job is left running too
                self._settle(request, WatchResult("detached", None, 0))
                return request.future
            if self._stopped:
                raise RuntimeError("watcher is stopped")
            self._entries.append(request)
            self._changed.fire()
        if (awaits := capabilities(request.backend).awaits_status) is not None:
            self._streams.adopt(awaits)  # its async client is closed with the streams'
        self._listen(request)
        request.future.add_done_callback(lambda future: self._given_up(request, future))
        return request.future

    def _given_up(self, entry: WatchRequest, future: Future[WatchResult]) -> None:
        """Whoever waited for this job gave up (its task was cancelled): stop watching it, or
        it would be asked again at once forever (its answers are ignored) and its timers fire."""
        if future.cancelled():
            self._close(entry)

    def in_flight(self) -> list[str]:
        """Labels still being watched."""
        with self._lock:
            return [e.label for e in self._entries]

    def look_now(self, labels: list[str]) -> None:
        """Ask about these jobs at once (someone cancelled them out there)."""
        wanted = set(labels)
        with self._lock:
            now = self._clock()
            for entry in self._entries:
                if entry.label in wanted:
                    entry.next_at = min(entry.next_at, now)
            self._changed.fire()

    def poke(self) -> None:
        """Look at the clock again now (a test moved its fake clock)."""
        with self._lock:
            self._changed.fire()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no call is in flight and nothing is due; False if ``timeout`` ran out."""
        if self._night.closed:  # stopped: only the calls still out there can end
            end = time.monotonic() + timeout
            while self._busy_now():
                if time.monotonic() >= end:
                    return False
                time.sleep(0.001)
            return True
        try:
            self._night.run(self._until_idle(), timeout)
        except TimeoutError:
            return False
        return True

    def _busy_now(self) -> bool:
        with self._lock:
            return self._busy()

    async def _until_idle(self) -> None:
        while True:
            with self._lock:
                if not self._busy():
                    return
            await self._changed.wait(None)

    def stop(self) -> None:
        """Stop the watch; jobs still watched get a RuntimeError on their futures."""
        with self._lock:
            self._stopped = True
            stranded, self._entries = self._entries, []
        self._changed.fire()
        if self._night.on_loop():
            for task in self._awaited:
                task.cancel()
        else:
            with contextlib.suppress(Exception):  # its end (or the bug that ended it)
                self._task.result(timeout=10)
            with contextlib.suppress(Exception):  # the loop closed meanwhile
                self._night.run(self._drop_awaited(), timeout=10)
        # before the clients close under them: a call's error is not a job's
        self._streams.close()
        # the pools are the loop's (another watcher may share them): closed with it
        if self._owns_loop:
            self._night.close()
        for entry in stranded:
            self._settle(entry, exc=RuntimeError("watcher stopped"))

    def detach(self) -> None:
        """Stop watching without a verdict (the night was interrupted): every job's future,
        and any job's registered later, gets a ``detached`` result now. Nothing is cancelled."""
        with self._lock:
            self._detached = True
            left, self._entries = self._entries, []
            for entry in left:
                entry.closing = True  # a status call in flight is ignored when it answers
            self._changed.fire()
        for entry in left:
            self._settle(entry, WatchResult("detached", entry.last_status, entry.checks))

    @property
    def stopped(self) -> bool:
        """True once the loop has ended (stopped, or died on a bug)."""
        return self._stopped

    async def _drop_awaited(self) -> None:
        """Cancel the status calls still awaited (the watch has stopped) and wait for them."""
        awaited = list(self._awaited)
        for task in awaited:
            task.cancel()
        if awaited:
            await asyncio.wait(awaited)

    # -- the loop -----------------------------------------------------------------------
    def _busy(self) -> bool:
        now = self._clock()
        if any(self._calls.values()) or self._listing:
            return True
        return any(
            e.checking
            or (not e.closing and e.streamed)
            or (not e.closing and (w := e.wake_at()) is not None and w <= now)
            for e in self._entries
        )

    async def _watch(self) -> None:
        """The watch: fire due timers, start due calls, sleep until the next is due or a change
        (an answer, a new job, a stop) wakes it."""
        try:
            while True:
                with self._lock:
                    if self._stopped:
                        return
                    now = self._clock()
                    work, wake = self._take_work(now)
                if not work:
                    await self._changed.wait(max(0.0, min(wake - now, 3600.0)))
                    continue
                for fn, args in work:
                    if fn == self._await_single:  # a call awaited on this loop: no thread
                        task = asyncio.ensure_future(self._await_single(*args))
                        self._awaited.add(task)
                        task.add_done_callback(self._awaited.discard)
                        # its call counted back even when it is cancelled before its first step
                        task.add_done_callback(functools.partial(self._single_over, *args))
                    else:
                        self._pool.submit(fn, *args)
        except BaseException as exc:  # a bug here must not leave every job waiting forever
            self._strand(exc)
            raise

    def _take_work(
        self, now: float
    ) -> tuple[list[tuple[Callable[..., object], tuple[Any, ...]]], float]:
        """Under the lock: fire due timers, start the due status calls; say when to look next.

        A job whose backend has no free call waits for one to end (that end wakes the loop),
        so only its timers count towards the next wake-up.
        """
        work: list[tuple[Callable[..., object], tuple[Any, ...]]] = []
        wake = now + 3600.0
        self._give_up_listings(now)
        for entry in self._entries:
            if not entry.closing and (reason := entry.timer_due(now)) is not None:
                entry.closing = True
                work.append((self._fire, (entry, reason)))
        for entry in self._entries:
            if entry.streamed and not entry.closing and not entry.checking:
                entry.checking = True
                work.append((self._run_streamed, (entry,)))
        due: dict[int, list[WatchRequest]] = {}
        idle: dict[int, list[WatchRequest]] = {}  # every job not being asked, by backend
        for entry in self._entries:
            if not entry.closing and not entry.checking:
                idle.setdefault(id(entry.backend), []).append(entry)
                if entry.next_at <= now:
                    due.setdefault(id(entry.backend), []).append(entry)
        for key, entries in due.items():
            backend = entries[0].backend
            caps = capabilities(backend)
            lists = caps.lists_status is not None
            some = caps.lists_some

            def listable(entry: WatchRequest, some: ListsSome | None = some) -> bool:
                return not entry.single and (some is None or some.listable(entry.external_id))

            # the last listing did not show them, or no listing can: each on a call of its own
            singles = [e for e in entries if not listable(e)]
            rest = [e for e in entries if listable(e)]
            # a listing given up and not back yet: its backend's jobs are asked one by one
            if lists and rest and key not in self._hung_listings:
                listed = [e for e in idle[key] if listable(e)]
                if key in self._listing:
                    rest = []  # one listing at a time; its end wakes the loop for these
                elif len(listed) > 1:
                    # one listing answers for every job of the backend, due or not: their look
                    self._listing[key] = now + self._listing_deadline
                    for entry in listed:
                        entry.checking = True
                        entry.listed = key
                    work.append((self._run_listing, (key, listed)))
                    rest = []
            for entry in [*singles, *rest]:
                if self._calls.get(key, 0) >= self._calls_per_backend:
                    break  # bounded: the rest wait for a free call
                self._calls[key] = self._calls.get(key, 0) + 1
                entry.checking = True
                entry.single = False
                awaits = capabilities(backend).awaits_status is not None
                work.append((self._await_single if awaits else self._run_single, (key, entry)))
        for entry in self._entries:
            if entry.closing:
                continue
            times = list(entry.timers().values())
            if not entry.checking and entry.next_at > now:
                times.append(entry.next_at)
            wake = min([wake, *times])
        return work, min([wake, *self._listing.values()])

    def _give_up_listings(self, now: float) -> None:
        """Under the lock: a listing past its deadline no longer holds its jobs: each is asked
        at once on a call of its own (its answer, when it comes, is ignored)."""
        for key, give_up_at in list(self._listing.items()):
            if now < give_up_at:
                continue
            del self._listing[key]
            self._hung_listings.add(key)
            for entry in self._entries:
                if entry.listed == key and entry.checking:
                    entry.checking, entry.listed, entry.single = False, None, True
                    entry.next_at = min(entry.next_at, now)

    def _strand(self, exc: BaseException) -> None:
        with self._lock:
            self._stopped = True
            stranded, self._entries = self._entries, []
        for entry in stranded:
            self._settle(entry, exc=RuntimeError(f"watcher died: {exc!r}"))

    def _run_single(self, key: int, entry: WatchRequest) -> None:
        try:
            if self._stopped:  # queued before the stop: nobody waits for its answer
                return
            try:
                seen: JobStatus | BaseException = entry.backend.status(entry.external_id)
            except Exception as exc:  # anything but a transient error ends this job only
                seen = exc
            self._advance(entry, seen)
        finally:
            with self._lock:
                self._calls[key] -= 1
                entry.checking = False
                self._changed.fire()

    async def _await_single(self, key: int, entry: WatchRequest) -> None:
        """``_run_single`` for a backend whose status call is awaited on the loop (its own
        async client): the answer is then taken on the status pool (its ledger write blocks)."""
        awaits = capabilities(entry.backend).awaits_status
        assert awaits is not None  # only such a backend gets here
        try:
            seen: JobStatus | BaseException = await awaits.astatus(entry.external_id)
        except Exception as exc:  # anything but a transient error ends this job only
            seen = exc
        await asyncio.get_running_loop().run_in_executor(self._pool, self._advance, entry, seen)

    def _single_over(self, key: int, entry: WatchRequest, _task: object = None) -> None:
        """An awaited status call is over (answered, failed or cancelled): its backend's call
        is free again and its job may be asked next."""
        with self._lock:
            self._calls[key] -= 1
            entry.checking = False
        self._changed.fire()

    # -- streams (engine/streams.py): a streamed status is taken like a poll's answer --------
    def _listen(self, entry: WatchRequest) -> None:
        """Listen to the job's stream when its backend has one; it is not polled meanwhile.
        A stream that cannot be opened (the watcher stopping, a backend that fails to say)
        leaves the job on its polls, as without one."""
        streams = capabilities(entry.backend).streams
        try:
            if streams is None or not streams.streams(entry.external_id):
                return
        except Exception:
            return
        with self._lock:
            if entry.closing:  # its watch ended meanwhile (a timer, the night's stop)
                return
            polls_at, entry.streaming, entry.next_at = entry.next_at, True, float("inf")

        def heard(status: JobStatus) -> None:
            with self._lock:
                entry.streamed.append(status)
                self._changed.fire()

        def dropped(_error: BaseException) -> None:  # polled again, on its backoff
            with self._lock:
                if entry.streaming and not entry.closing:
                    entry.streaming = False
                    entry.stream_drops += 1
                    entry.next_at = self._next_poll(entry, self._clock())
                    self._changed.fire()

        try:
            self._streams.listen(id(entry), streams, entry.external_id, heard, dropped)
        except Exception:
            with self._lock:
                entry.streaming, entry.next_at = False, polls_at
            return
        if entry.closing:  # closed while the stream was being opened: it had none to forget
            self._streams.forget(id(entry))

    def _run_streamed(self, entry: WatchRequest) -> None:
        try:
            while not self._stopped:  # queued before the stop: nobody waits for it
                with self._lock:
                    if not entry.streamed:
                        return
                    seen = entry.streamed.pop(0)
                self._advance(entry, seen, polled=False)
                with self._lock:
                    if entry.streaming:
                        entry.next_at = float("inf")  # _take set a poll: the stream still holds
        finally:
            with self._lock:
                entry.checking = False
                self._changed.fire()

    def _run_listing(self, key: int, entries: list[WatchRequest]) -> None:
        # while this listing is out (or given up and not back), no other one of its backend
        # starts: its key in ``_listing`` says it was not given up
        # queued before the stop: nobody waits for its answer
        statuses = {} if self._stopped else self._list(entries)
        with self._lock:
            if key not in self._listing:  # given up at its deadline: its jobs went on singly
                self._hung_listings.discard(key)
                self._changed.fire()
                return
            del self._listing[key]  # from here on it cannot be given up
        unlisted: list[WatchRequest] = []
        try:
            for entry in entries:
                if entry.external_id in statuses:
                    self._advance(entry, statuses[entry.external_id])
                else:
                    unlisted.append(entry)
        finally:
            with self._lock:
                for entry in entries:
                    entry.checking, entry.listed = False, None
                for entry in unlisted:  # asked at once, each on a call of its own
                    entry.single = True
                    entry.next_at = min(entry.next_at, self._clock())
                self._changed.fire()

    @staticmethod
    def _list(entries: list[WatchRequest]) -> Mapping[str, JobStatus | BaseException]:
        """What one listing says; a job it leaves out is asked singly (all, if it broke)."""
        lister = capabilities(entries[0].backend).lists_status
        assert lister is not None  # only a backend that lists gets here
        try:
            found: Mapping[str, JobStatus | BaseException] = lister.status_many(
                [e.external_id for e in entries]
            )
        except Exception:  # listing is a convenience, not the contract: ask one by one
            return {}
        return found

    def _advance(
        self, entry: WatchRequest, seen: JobStatus | BaseException | None, polled: bool = True
    ) -> None:
        """Take one status call's answer (``polled``), or what its stream said; ignored once a
        timer (or stop) ended the job."""
        if entry.closing or entry.future.done():
            return
        try:
            self._take(entry, seen, polled)
        except Exception as exc:  # e.g. the ledger write behind on_change failed
            self._close(entry, exc=exc)

    def _take(
        self, entry: WatchRequest, seen: JobStatus | BaseException | None, polled: bool
    ) -> None:
        entry.checks += 1
        going = False  # a poll's answer that says the job goes on
        if isinstance(seen, UnknownJobError) and not entry.seen:
            # an id the service gave out and never showed yet: not visible yet, not lost
            if entry.visible_at is None or self._clock() >= entry.visible_at:
                self._close(entry, result=self._give_up(entry, "lost", seen))
                return
            entry.unseen += 1
            with self._lock:
                entry.next_at = min(self._next_poll(entry, self._clock()), entry.visible_at)
            return
        if isinstance(seen, BaseException) or seen is None:
            self._on_error(entry.label, seen)
        if isinstance(seen, TransientBackendError) or seen is None:
            entry.errors += 1
            if entry.errors > entry.max_errors:
                error = seen or TransientBackendError("no status")
                self._close(entry, result=self._give_up(entry, "unreadable", error))
                return
        elif isinstance(seen, PermanentBackendError):
            # the job may still run out there: cancel it rather than leave it unwatched
            if isinstance(seen, UnknownJobError):  # seen before: gone from the service
                seen = UnknownJobError(f"lost: its record expired at the service ({seen})")
            self._close(entry, result=self._give_up(entry, "unreadable", seen))
            return
        elif isinstance(seen, BaseException):
            self._close(entry, exc=seen)
            return
        else:
            entry.errors = 0
            entry.seen = True
            entry.last_status = seen
            going = polled
            if seen.state != entry.last_state:
                entry.last_state = seen.state
                self._on_change(entry.label, seen.state, seen)
            if seen.state.final:
                self._final(entry.label)
                self._close(entry, result=WatchResult("final", seen, entry.checks))
                return
        with self._lock:
            # a look asked for while its stream holds (look_now): the stream goes on alone
            polls_next = self._next_poll(entry, self._clock())
            entry.next_at = float("inf") if entry.streaming else polls_next
            # polled since its stream dropped, and still going: listen to it again
            again = going and not entry.streaming and 0 < entry.stream_drops <= STREAM_RECONNECTS
        if again:
            self._listen(entry)

    @staticmethod
    def _next_poll(entry: WatchRequest, now: float) -> float:
        """When to look at ``entry`` next, by its schedule (a look past its usual end is late)."""
        schedule = entry.schedule or PollSchedule(entry.policy)
        elapsed = now - entry.origin
        at = now + schedule.delay(elapsed, entry.checks, entry.late)
        if schedule.late(elapsed):
            entry.late += 1
        return at

    def _final(self, label: str) -> None:
        """Tell the night a job ended (its slot may go on); a failure only delays that."""
        # on a failure the slot is freed when the job's record is written
        with contextlib.suppress(Exception):
            self._on_final(label)

    def _give_up(
        self, entry: WatchRequest, reason: Reason, error: BaseException | None = None
    ) -> WatchResult:
        """Stop watching a job that may still run out there: cancel it, and say how that went."""
        cancel, cancel_error = self._cancel(entry)
        return WatchResult(
            reason,
            entry.last_status,
            entry.checks,
            cancel_error,
            error=None if error is None else str(error),
            cancel=cancel,
        )

    def _fire(self, entry: WatchRequest, reason: Reason) -> None:
        """A timer fired: hand a fallback back as it is, cancel the job for the others."""
        if self._stopped:  # queued before the stop: its job was settled, nothing is cancelled
            return
        if reason == "fallback":
            result = WatchResult(reason, entry.last_status, entry.checks)
        else:
            result = self._give_up(entry, reason)
        self._close(entry, result=result)

    def _cancel(self, entry: WatchRequest) -> tuple[CancelAsked, str | None]:
        """Ask the service to cancel the job, waiting ``cancel_deadline`` at most for it."""
        try:
            call = self._cancels.submit(entry.backend.cancel, entry.external_id)
        except RuntimeError:  # the night's loop closed: no one waits for this job any more
            return "unanswered", "the night stopped before the cancel was sent"
        try:
            call.result(timeout=self._cancel_deadline)
        except CannotCancelError as exc:
            return "unsupported", str(exc)
        except TimeoutError:
            return "unanswered", f"no answer within {self._cancel_deadline:g}s"
        except Exception as exc:  # a backend's error (or its bug): said, never raised here
            return "failed", str(exc) if isinstance(exc, BackendError) else repr(exc)
        return "accepted", None

    def _close(
        self,
        entry: WatchRequest,
        result: WatchResult | None = None,
        exc: BaseException | None = None,
    ) -> None:
        with self._lock:
            entry.closing = True
            if entry in self._entries:
                self._entries.remove(entry)
            self._changed.fire()
        if entry.streaming:
            self._streams.forget(id(entry))
        self._settle(entry, result, exc)

    @staticmethod
    def _settle(
        entry: WatchRequest, result: WatchResult | None = None, exc: BaseException | None = None
    ) -> None:
        """Resolve the job's future once; whoever comes second (stop, a late call) is ignored."""
        try:
            if result is not None:
                entry.future.set_result(result)
            else:
                entry.future.set_exception(exc or RuntimeError("watching ended"))
        except InvalidStateError:
            pass
