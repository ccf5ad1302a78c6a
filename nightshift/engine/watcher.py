"""One task on the night's loop (``nightshift/loop.py``) that watches every in-flight job.

Each job keeps its own poll schedule and timers (``engine/poll_schedule.py``: with a usual
duration, rarely far from its usual end and densely around it; without, its backoff). What to
ask and when (one listing for a backend that lists, bounded single calls otherwise, a listing's
own deadline) is ``engine/watch_schedule.py``; what an answer means (a change, an error, a job
not visible yet) is ``judge`` in ``engine/watch_request.py``; this module asks. Timers are
checked by the watch itself: they fire on time whatever a status call is doing. A job is never
asked again once it is final.

Everything the watcher keeps (the watched jobs, the calls out, the listings) is its loop's: the
watch and the calls' continuations are tasks on the loop, and a thread runs only the blocking call
itself (``backend.status``, ``status_many``, ``cancel``), handed arguments and returning a value.
What was seen is told to the night on the loop (``on_change``, ``on_error``, ``on_final``: they
must not block; the night's sinks hear it there, its ledger writer queues the rows). Other
threads hand their asks to the loop (``watch``, ``look_now``, ``detach``, ``stop``). With the
loop's owner check on (the test suite), touching the schedule from another thread raises.

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
import time
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import Future, InvalidStateError
from typing import Any, TypeVar

from nightshift.backends.base import ExternalState, JobStatus, capabilities
from nightshift.engine.poll_schedule import PollSchedule
from nightshift.engine.streams import StreamListener
from nightshift.engine.watch_cancel import given_up
from nightshift.engine.watch_request import (
    STREAM_RECONNECTS,
    CancelAsked,
    Judged,
    Reason,
    WatchRequest,
    WatchResult,
    judge,
    next_poll,
)
from nightshift.engine.watch_schedule import Ask, Drain, Fire, ListAll, WatchSchedule, Work
from nightshift.loop import NightLoop, Signal
from nightshift.usual import Usual

__all__ = ["STREAM_RECONNECTS", "CancelAsked", "WatchRequest", "WatchResult", "Watcher"]

T = TypeVar("T")
OnChange = Callable[[str, ExternalState, JobStatus], None]
OnError = Callable[[str, BaseException | None], None]  # a status call failed (or said nothing)
# label -> its usual duration from submit to end (seconds: known as one number), if known
Expected = Callable[[str], Usual | float | None]
Seen = JobStatus | BaseException | None
_CALLS_PER_BACKEND = 8  # status calls in flight at once, per backend
_THREADS = 32  # the status calls' threads, for every backend
LISTING_DEADLINE_S = 15.0  # a listing's own deadline (a night's: half its poll cap)
CANCEL_DEADLINE_S = 30.0  # a cancel's own deadline: one that hangs never holds the night
_CANCEL_THREADS = 8
_STOP_S = 10.0  # what a stop waits for the calls' continuations, at most


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
        loop: NightLoop,
    ) -> None:
        self._on_change = on_change
        self._on_error = on_error
        self._expected = expected
        self._on_final = on_final
        self._clock = clock
        self._night = loop  # the night's loop runs the watch; whoever made it closes it
        self._plan = WatchSchedule(
            listing_deadline, _CALLS_PER_BACKEND, lambda: self._night.owned("the watcher")
        )
        self._changed = Signal(self._night)  # wakes the watch (and ``wait_idle``)
        self._stopped = False  # read anywhere (``stopped``), written on the loop
        self._detached = False
        self._cancel_deadline = cancel_deadline
        self._pool = self._night.blocking("nightshift-status", _THREADS)
        # cancels run apart from the status calls: one waited on holds no status call's thread
        self._cancels = self._night.blocking("nightshift-cancel", _CANCEL_THREADS)
        self._streams = StreamListener(self._night)  # every stream a task on the night's loop
        self._work: set[asyncio.Task[None]] = set()  # the calls and firings under way
        self._task = self._night.submit(self._watch())

    @property
    def loop(self) -> NightLoop:
        """The loop the watch runs on (the night's)."""
        return self._night

    def now(self) -> float:
        """The watcher's clock."""
        return self._clock()

    @property
    def stopped(self) -> bool:
        """True once the watch has ended (stopped, or died on a bug)."""
        return self._stopped

    # -- asked from any thread: handed to the loop --------------------------------------
    def watch(self, request: WatchRequest) -> Future[WatchResult]:
        """Start watching; the first check after the policy's initial delay (or its end)."""
        if self._stopped and not self._detached:
            raise RuntimeError("watcher is stopped")
        now = self._clock()
        usual = request.usual if request.usual is not None else self._expected(request.label)
        if isinstance(usual, int | float):
            usual = Usual.exactly(float(usual))
        request.usual = usual
        request.schedule = PollSchedule(request.policy, usual)
        request.origin = now
        request.next_at = now if request.look_first else next_poll(request, now)
        request.future.add_done_callback(lambda future: self._given_up(request, future))
        self._night.soon(self._add, request)
        return request.future

    def in_flight(self) -> list[str]:
        """Labels still being watched."""
        return self._ask(self._plan.labels, [])

    def look_now(self, labels: list[str]) -> None:
        """Ask about these jobs at once (someone cancelled them out there)."""
        self._night.soon(self._look_now, labels)

    def poke(self) -> None:
        """Look at the clock again now (a test moved its fake clock)."""
        self._changed.fire()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no call is in flight and nothing is due; False if ``timeout`` ran out."""
        if self._night.closed:  # stopped: nothing more is asked or answered
            return True
        try:
            self._night.run(self._until_idle(), timeout)
        except TimeoutError:
            return False
        return True

    def stop(self) -> None:
        """Stop the watch; jobs still watched get a RuntimeError on their futures."""
        stranded: list[WatchRequest] | None = None
        if self._night.on_loop():
            stranded = self._stop()
        elif not self._night.closed:
            with contextlib.suppress(RuntimeError, TimeoutError):  # closed meanwhile
                stranded = self._night.run(self._stop_and_wait(), _STOP_S)
        if stranded is None:  # the loop is gone: nothing runs on it any more
            self._stopped = True
            stranded = self._plan.take_all()  # the loop is gone: ours alone
        # before the clients close under them: a call's error is not a job's
        self._streams.close()
        # the pools are the loop's (another watcher may share them): closed with it
        for entry in stranded:
            _settle(entry, exc=RuntimeError("watcher stopped"))

    def detach(self) -> None:
        """Stop watching without a verdict (the night was interrupted): every job's future,
        and any job's registered later, gets a ``detached`` result now. Nothing is cancelled."""
        left: list[WatchRequest] = self._ask(self._detach, [])
        if self._night.closed and not self._detached:
            self._detached = True
            left = self._plan.take_all()  # the loop is gone: ours alone
        for entry in left:
            _settle(entry, WatchResult("detached", entry.last_status, entry.checks))

    def _ask(self, fn: Callable[[], T], otherwise: T) -> T:
        """``fn()`` run on the loop (at once when called there); ``otherwise`` once it closed."""
        if self._night.closed and not self._night.on_loop():
            return otherwise
        try:
            return self._night.ask(fn, _STOP_S)
        except (RuntimeError, TimeoutError):  # closed meanwhile (or stuck: a bug)
            return otherwise

    def _given_up(self, entry: WatchRequest, future: Future[WatchResult]) -> None:
        """Whoever waited for this job gave up (its task was cancelled): stop watching it, or
        it would be asked again at once forever (its answers are ignored) and its timers fire."""
        if future.cancelled():
            self._night.soon(self._forget, entry)

    # -- the loop ---------------------------------------------------------------------------
    def _add(self, entry: WatchRequest) -> None:
        if self._detached:  # the night stops watching: this job is left running too
            _settle(entry, WatchResult("detached", None, 0))
            return
        if self._stopped:
            _settle(entry, exc=RuntimeError("watcher is stopped"))
            return
        if entry.future.done():  # given up before it was added
            return
        self._plan.add(entry)
        if (awaits := capabilities(entry.backend).awaits_status) is not None:
            self._streams.adopt(awaits)  # its async client is closed with the streams'
        self._listen(entry)
        self._changed.fire()

    def _look_now(self, labels: list[str]) -> None:
        self._plan.look_now(labels, self._clock())
        self._changed.fire()

    def _forget(self, entry: WatchRequest) -> None:
        self._plan.remove(entry)
        if entry.streaming:
            self._streams.forget(id(entry))
        self._changed.fire()

    def _stop(self) -> list[WatchRequest]:
        self._stopped = True
        for task in self._work:
            task.cancel()
        self._changed.fire()
        return self._plan.take_all()

    async def _stop_and_wait(self) -> list[WatchRequest]:
        """Stop, and wait for the calls' tasks to end (their clients close next)."""
        left = self._stop()
        if self._work:
            await asyncio.wait(set(self._work), timeout=_STOP_S)
        return left

    def _detach(self) -> list[WatchRequest]:
        self._detached = True
        self._changed.fire()
        return self._plan.take_all()

    async def _until_idle(self) -> None:
        while self._plan.busy(self._clock()):  # a listing given up and hung is not waited for
            await self._changed.wait(None)

    async def _watch(self) -> None:
        """The watch: fire due timers, start due calls, sleep until the next is due or a change
        (an answer, a new job, a stop) wakes it."""
        try:
            while not self._stopped:
                now = self._clock()
                work, wake = self._plan.take(now)
                if not work:
                    await self._changed.wait(max(0.0, min(wake - now, 3600.0)))
                    continue
                for item in work:
                    self._spawn(self._run(item))
        except BaseException as exc:  # a bug here must not leave every job waiting forever
            self._stopped = True
            for entry in self._plan.take_all():
                _settle(entry, exc=RuntimeError(f"watcher died: {exc!r}"))
            raise

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._work.add(task)
        task.add_done_callback(self._over)

    def _over(self, task: asyncio.Task[None]) -> None:
        self._work.discard(task)
        self._changed.fire()

    async def _run(self, item: Work) -> None:
        try:
            await self._do(item)
        except Exception as exc:  # a bug in taking an answer ends that job only, not the watch
            for entry in item.entries if isinstance(item, ListAll) else (item.entry,):
                self._close(entry, exc=exc)

    async def _do(self, item: Work) -> None:
        if isinstance(item, Fire):
            await self._fire(item.entry, item.reason)
        elif isinstance(item, Drain):
            await self._drain(item.entry)
        elif isinstance(item, Ask):
            try:
                await self._take(item.entry, await self._status(item.entry, item.awaits))
            finally:  # answered, failed or cancelled: its backend's call is free again
                self._plan.asked(item.backend, item.entry)
        else:
            await self._list(item.backend, item.entries)

    async def _blocking(self, pool: Any, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)

    async def _status(self, entry: WatchRequest, awaits: bool) -> Seen:
        """One status call's answer (its error as a value)."""
        try:
            if awaits:
                client = capabilities(entry.backend).awaits_status
                assert client is not None  # only such a backend is awaited
                return await client.astatus(entry.external_id)
            return await self._blocking(self._pool, entry.backend.status, entry.external_id)
        except Exception as exc:  # anything but a transient error ends this job only
            return exc

    async def _list(self, key: int, entries: tuple[WatchRequest, ...]) -> None:
        """One listing; a job it leaves out is asked singly (all, if it broke)."""
        lister = capabilities(entries[0].backend).lists_status
        assert lister is not None  # only a backend that lists gets here
        ids = [e.external_id for e in entries]
        try:
            found: Mapping[str, Seen] = await self._blocking(self._pool, lister.status_many, ids)
        except Exception:  # listing is a convenience, not the contract: ask one by one
            found = {}
        if not self._plan.listing_back(key):  # given up at its deadline: they went on singly
            return
        unlisted = [e for e in entries if e.external_id not in found]
        try:
            answered = [
                (e, found[e.external_id])
                for e in entries
                if e.external_id in found and not e.closing and not e.future.done()
            ]
            now = self._clock()
            judged = [(e, seen, judge(e, seen, now, True)) for e, seen in answered]
            # what the listing saw, told to the night here, in order (a thousand jobs'
            # changes take no thread: the night's sinks hear them on the loop)
            told = [(e.label, seen, j.changed) for e, seen, j in judged if j.report]
            failed = self._report_many(told)
            for entry, _seen, judgement in judged:
                await self._follow(entry, judgement, failed.get(entry.label))
        finally:
            self._plan.listed(entries, unlisted, self._clock())

    async def _drain(self, entry: WatchRequest) -> None:
        """Take what the job's stream said, in order, like a poll's answers."""
        try:
            while entry.streamed and not self._stopped:
                await self._take(entry, entry.streamed.pop(0), polled=False)
                if entry.streaming:
                    entry.next_at = float("inf")  # _take set a poll: the stream still holds
        finally:
            entry.checking = False

    # -- streams (engine/streams.py): a streamed status is taken like a poll's answer --------
    def _listen(self, entry: WatchRequest) -> None:
        """Listen to the job's stream when its backend has one; it is not polled meanwhile.
        A stream that cannot be opened (the watcher stopping, a backend that fails to say)
        leaves the job on its polls, as without one. (``streams`` answers without I/O.)"""
        streams = capabilities(entry.backend).streams
        try:
            if streams is None or not streams.streams(entry.external_id):
                return
        except Exception:
            return
        if entry.closing:  # its watch ended meanwhile (a timer, the night's stop)
            return
        polls_at, entry.streaming, entry.next_at = entry.next_at, True, float("inf")

        def heard(status: JobStatus) -> None:  # on the loop: the stream is a task of it
            entry.streamed.append(status)
            self._changed.fire()

        def dropped(_error: BaseException) -> None:  # polled again, on its backoff
            if entry.streaming and not entry.closing:
                entry.streaming = False
                entry.stream_drops += 1
                entry.next_at = next_poll(entry, self._clock())
                self._changed.fire()

        try:
            self._streams.listen(id(entry), streams, entry.external_id, heard, dropped)
        except Exception:
            entry.streaming, entry.next_at = False, polls_at

    # -- an answer ------------------------------------------------------------------------
    async def _take(self, entry: WatchRequest, seen: Seen, polled: bool = True) -> None:
        """Take one status call's answer (``polled``), or what its stream said; ignored once a
        timer (or stop) ended the job."""
        if entry.closing or entry.future.done():
            return
        judged = judge(entry, seen, self._clock(), polled)
        failed = None
        if judged.report:  # told to the night here: its sinks hear it on the loop
            failed = self._report(entry.label, seen, judged.changed)
        await self._follow(entry, judged, failed)

    async def _follow(
        self, entry: WatchRequest, judged: Judged, failed: BaseException | None
    ) -> None:
        """What follows a judged answer, once the night was told (``failed``: what telling it
        raised: that ends the job)."""
        if failed is not None:
            self._close(entry, exc=failed)
            return
        if judged.next == "poll":
            if judged.listen:
                self._listen(entry)
        elif judged.next == "give_up":
            assert judged.reason is not None
            self._close(entry, await self._give_up(entry, judged.reason, judged.error))
        elif judged.next == "fail":
            self._close(entry, exc=judged.error)
        else:
            self._close(entry, WatchResult("final", entry.last_status, entry.checks))

    def _report_many(self, told: list[tuple[str, Seen, bool]]) -> dict[str, BaseException]:
        """On the loop: ``_report`` each, in order; what each that failed raised."""
        failed: dict[str, BaseException] = {}
        for label, seen, changed in told:
            if (exc := self._report(label, seen, changed)) is not None:
                failed[label] = exc
        return failed

    def _report(self, label: str, seen: Seen, changed: bool) -> BaseException | None:
        """On the loop: tell the night what a look saw (a change, an error; a final state
        hands the job's slot on). Returns what ``on_change`` raised, if anything."""
        if not isinstance(seen, JobStatus):
            self._on_error(label, seen)
            return None
        try:
            if changed:
                self._on_change(label, seen.state, seen)
        except Exception as exc:
            return exc
        if seen.state.final:
            # on a failure the slot is freed when the job's record is written
            with contextlib.suppress(Exception):
                self._on_final(label)
        return None

    async def _give_up(
        self, entry: WatchRequest, reason: Reason, error: BaseException | None = None
    ) -> WatchResult:
        """Cancel a job that may still run out there (``watch_cancel.py``), and say how."""
        return await given_up(self._cancels, entry, reason, self._cancel_deadline, error)

    async def _fire(self, entry: WatchRequest, reason: Reason) -> None:
        """A timer fired: hand a fallback back as it is, cancel the job for the others."""
        if self._stopped:  # its job was settled at the stop, nothing is cancelled
            return
        if reason == "fallback":
            result = WatchResult(reason, entry.last_status, entry.checks)
        else:
            result = await self._give_up(entry, reason)
        self._close(entry, result)

    def _close(
        self,
        entry: WatchRequest,
        result: WatchResult | None = None,
        exc: BaseException | None = None,
    ) -> None:
        self._forget(entry)
        _settle(entry, result, exc)


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
