"""A job the watcher watches (its timers, its schedule's bookkeeping), what one answer about it
means (``judge``) and why watching ended: values, no I/O. ``WatchRequest.timers`` says which
timers still apply (the queue timer only while the job never ran), ``timer_due`` which fired,
``wake_at`` when the watcher must look next.

A job the service says it does not know (``UnknownJobError``: a 404, "no such job") before any
status answer has shown it is *not visible yet* (workers scaling from zero, a lagging replica):
it is asked again on its backoff until ``visible_at``, then given up as ``lost``. Once seen, the
same answer means its record expired.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Literal

from nightshift.backends.base import Backend, ExternalState, JobStatus
from nightshift.backoff import Backoff
from nightshift.engine.poll_schedule import PollSchedule
from nightshift.errors import PermanentBackendError, TransientBackendError, UnknownJobError
from nightshift.usual import Usual

__all__ = [
    "STREAM_RECONNECTS",
    "CancelAsked",
    "Judged",
    "Reason",
    "WatchRequest",
    "WatchResult",
    "judge",
    "next_poll",
]

# "detached": the night stopped watching (interrupted); the job still runs out there
# "lost": the service never showed the job within its ``visible_at``
Reason = Literal["final", "timeout", "stuck_queued", "fallback", "unreadable", "lost", "detached"]
# what became of the cancel asked when watching gave up on a job (None: none was asked)
CancelAsked = Literal["accepted", "failed", "unsupported", "unanswered"]
_TIMER_REASONS: tuple[Reason, ...] = ("fallback", "timeout", "stuck_queued")
# a job's stream is listened to again after each of its first drops (a proxy's restart, an
# idle cut): a long job is not polled for hours after one blip; a stream that keeps dropping
# is given up and its job polled on its backoff
STREAM_RECONNECTS = 3


@dataclass(frozen=True)
class WatchResult:
    """Why watching ended, and the last status seen."""

    reason: Reason
    status: JobStatus | None
    checks: int
    cancel_error: str | None = None  # why the cancel failed (or went unanswered)
    error: str | None = None  # why the status could not be read ("unreadable", "lost")
    cancel: CancelAsked | None = None  # the cancel asked when watching gave up, if any


# compared by identity: finding a closing watch among thousands is a pointer compare per watch,
# not a compare of every field (10 s of CPU under the watcher's lock for 5,000 jobs)
@dataclass(eq=False)
class WatchRequest:
    """A job to watch; times are on the watcher's monotonic clock (None: no such timer)."""

    label: str
    backend: Backend
    external_id: str
    policy: Backoff
    timeout_at: float | None = None
    queued_timeout_at: float | None = None
    fallback_at: float | None = None
    max_errors: int = 3
    last_state: ExternalState | None = None
    # a re-attached job: ask at once, and let no timer fire before that first answer (its
    # timers may have run out while nobody watched, but it may have finished meanwhile)
    look_first: bool = False
    # a job the service does not know yet (UnknownJobError) waits until then to be seen; None:
    # no wait (such an answer gives the job up at once)
    visible_at: float | None = None
    # a status answer has shown the job (for a re-attached job: an earlier night's did)
    seen: bool = False
    # usual duration from now (its submit) to its end; None: the watcher's `expected` lookup
    usual: Usual | float | None = None
    # bookkeeping, owned by the watcher
    schedule: PollSchedule | None = None
    origin: float = 0.0  # when watching began (its schedule counts from there)
    late: int = 0  # looks since its usual end passed
    checks: int = 0
    errors: int = 0
    next_at: float = 0.0
    last_status: JobStatus | None = None
    checking: bool = False  # a status call for this job is in flight
    listed: int | None = None  # the backend whose listing it waits for (being asked in one)
    single: bool = False  # the last listing did not show it: ask it on a call of its own
    streaming: bool = False  # its backend's stream is listened to: no status calls meanwhile
    stream_drops: int = 0  # how often its stream dropped
    streamed: list[JobStatus] = field(default_factory=list)  # what it said, not yet taken
    closing: bool = False  # watching is ending: no more checks, results ignored
    unseen: int = 0  # answers that the service does not know the job yet
    future: Future[WatchResult] = field(default_factory=Future)

    def timers(self) -> dict[Reason, float]:
        """The timers that still apply: the queue timer only while the job never ran."""
        out: dict[Reason, float] = {}
        if self.look_first and self.checks == 0:
            return out
        if self.fallback_at is not None:
            out["fallback"] = self.fallback_at
        if self.timeout_at is not None:
            out["timeout"] = self.timeout_at
        never_ran = self.last_state in (None, ExternalState.QUEUED)
        # the answer in flight may say it runs: "stuck in the queue" needs a look at the queue
        if never_ran and self.queued_timeout_at is not None and not self.checking:
            out["stuck_queued"] = self.queued_timeout_at
        return out

    def timer_due(self, now: float) -> Reason | None:
        """The timer that has fired, the SLA fallback first (it keeps the rows)."""
        timers = self.timers()
        return next((r for r in _TIMER_REASONS if r in timers and now >= timers[r]), None)

    def wake_at(self) -> float | None:
        """When the loop must next look at this job (its next check or its next timer)."""
        times = list(self.timers().values())
        if not self.checking:
            times.append(self.next_at)
        return min(times) if times else None


def next_poll(entry: WatchRequest, now: float) -> float:
    """When to look at ``entry`` next, by its schedule (a look past its usual end is late)."""
    schedule = entry.schedule or PollSchedule(entry.policy)
    elapsed = now - entry.origin
    at = now + schedule.delay(elapsed, entry.checks, entry.late)
    if schedule.late(elapsed):
        entry.late += 1
    return at


Next = Literal["poll", "give_up", "fail", "final"]


@dataclass(frozen=True)
class Judged:
    """What one answer means. First, when ``report``, the night is told what was seen (a
    change of state when ``changed``, an error, an end); then ``next``: ask again at its
    ``next_at`` (and listen to its stream again when ``listen``), give it up for ``reason``
    (cancelled), fail with ``error``, or end as final."""

    next: Next
    report: bool = False
    changed: bool = False
    listen: bool = False
    reason: Reason | None = None
    error: BaseException | None = None


def judge(
    entry: WatchRequest, seen: JobStatus | BaseException | None, now: float, polled: bool
) -> Judged:
    """Book one status answer (``polled``) or what its stream said on ``entry``; say what
    follows. An error is one the backend raised (its status call's answer)."""
    entry.checks += 1
    if isinstance(seen, UnknownJobError) and not entry.seen:
        # an id the service gave out and never showed yet: not visible yet, not lost
        if entry.visible_at is None or now >= entry.visible_at:
            return Judged("give_up", reason="lost", error=seen)
        entry.unseen += 1
        entry.next_at = min(next_poll(entry, now), entry.visible_at)
        return Judged("poll")
    if not isinstance(seen, JobStatus):
        if isinstance(seen, TransientBackendError) or seen is None:
            entry.errors += 1
            if entry.errors <= entry.max_errors:
                return _later(entry, now, going=False, report=True)
            error = seen or TransientBackendError("no status")
            return Judged("give_up", report=True, reason="unreadable", error=error)
        if isinstance(seen, PermanentBackendError):
            # the job may still run out there: cancel it rather than leave it unwatched
            if isinstance(seen, UnknownJobError):  # seen before: gone from the service
                seen = UnknownJobError(f"lost: its record expired at the service ({seen})")
            return Judged("give_up", report=True, reason="unreadable", error=seen)
        return Judged("fail", report=True, error=seen)
    changed = seen.state != entry.last_state
    entry.errors = 0
    entry.seen = True
    entry.last_status = seen
    entry.last_state = seen.state
    if seen.state.final:
        return Judged("final", report=True, changed=changed)
    return _later(entry, now, going=polled, report=changed, changed=changed)


def _later(
    entry: WatchRequest, now: float, *, going: bool, report: bool, changed: bool = False
) -> Judged:
    """Ask again on its schedule; a look asked for while its stream holds (``look_now``)
    leaves the stream going alone. Polled since its stream dropped, and still going: listen
    to it again (a few times at most)."""
    polls_next = next_poll(entry, now)
    entry.next_at = float("inf") if entry.streaming else polls_next
    listen = going and not entry.streaming and 0 < entry.stream_drops <= STREAM_RECONNECTS
    return Judged("poll", report=report, changed=changed, listen=listen)
