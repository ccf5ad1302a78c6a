"""Night events: what happens in a night, as small immutable values handed to every sink.

The runner and the watcher publish; the ledger, the live table, the progress artifact, the
flow's logs, the dwell watch, Slack and the trace listen. A sink is any callable taking an
event, called on the night's loop; a slow one is a ``Consumer``. A sink that raises is logged
and skipped: it never stops the night nor changes its verdict.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from nightshift.engine.alerts import Alert
from nightshift.engine.expected import Typical
from nightshift.engine.incidents import Closed, IncidentChange, Opened
from nightshift.engine.outcomes import JobOutcome, NightSummary
from nightshift.loop import NightLoop

__all__ = [
    "Consumer",
    "ExpectedDurations",
    "IncidentChanged",
    "JobChanged",
    "JobFinished",
    "LevelChanged",
    "LogSink",
    "NightEvent",
    "NightFinished",
    "PollFailed",
    "Publisher",
    "Since",
    "Sink",
]

_SETTLE_S = 30.0  # what the night's end waits for its sinks, at most
Logger = logging.Logger | logging.LoggerAdapter  # type: ignore[type-arg]


@dataclass(frozen=True)
class JobChanged:
    """A job entered ``state`` (a ledger state: submitting, queued, running, ..., its outcome)."""

    night: str
    catalogue: str
    label: str
    backend: str
    attempt: int
    external_id: str | None
    state: str
    at: datetime  # aware, UTC
    dwell_s: float | None  # seconds in the previous state, as this night saw it; None: unknown


@dataclass(frozen=True)
class JobFinished:
    """A job has its outcome for tonight (also a job kept from an earlier run of the night)."""

    night: str
    catalogue: str
    outcome: JobOutcome
    at: datetime
    trace_id: str | None = None  # the trace its try belongs to (None: untraced, or no try)
    trace_parent: str | None = None  # the span its try hangs under


@dataclass(frozen=True)
class PollFailed:
    """A status call for a job failed (it may be retried; the job's outcome says how it ended)."""

    night: str
    catalogue: str
    label: str
    backend: str
    error: str
    at: datetime


@dataclass(frozen=True)
class NightFinished:
    """The night is joined: its summary holds the verdict."""

    night: str
    catalogue: str
    summary: NightSummary
    at: datetime


@dataclass(frozen=True)
class LevelChanged:
    """A job's time in its state passed a level (watch or alert): once per job, state and level
    per night, however often it is polled, and not again when a rerun re-attaches."""

    alert: Alert

    @property
    def label(self) -> str:
        """The job's label."""
        return self.alert.label


@dataclass(frozen=True)
class ExpectedDurations:
    """How long tonight's jobs usually take (learned budgets' p50s), told once at the start.

    Only jobs with some learned p50 are in ``jobs``; a night with no budgets publishes none.
    """

    night: str
    catalogue: str
    jobs: Mapping[str, Typical]
    at: datetime


@dataclass(frozen=True)
class IncidentChanged:
    """An incident of one backend opened, took a level, lost a job or ended
    (engine/incidents.py): its levels are not announced one job at a time."""

    night: str
    catalogue: str
    change: IncidentChange


NightEvent = (
    JobChanged
    | JobFinished
    | PollFailed
    | NightFinished
    | LevelChanged
    | ExpectedDurations
    | IncidentChanged
)
Sink = Callable[[NightEvent], None]


class Publisher:
    """Hands each event to every sink, in order, on the night's loop (an event published from
    another thread is handed over, in the order it came: ``NightLoop.soon``); without a loop
    (a test on one thread), on the publishing thread.

    A sink runs on the loop and must not block: a slow one (a database, an HTTP call) is a
    ``Consumer``, which queues what it hears and takes it off the loop in order.
    """

    def __init__(
        self,
        sinks: Iterable[Sink] = (),
        logger: Logger | None = None,
        *,
        loop: NightLoop | None = None,
    ) -> None:
        self._sinks = list(sinks)
        self._logger: Logger = logger or logging.getLogger("nightshift.events")
        self._loop = loop

    @property
    def sinks(self) -> list[Sink]:
        """The sinks, in the order they hear events (a copy)."""
        return list(self._sinks)

    def add(self, sink: Sink) -> None:
        """One more sink, after the others."""
        self._sinks.append(sink)

    def publish(self, event: NightEvent) -> None:
        """Tell every sink (on the loop); a sink that raises is logged and the others still
        hear it."""
        if self._loop is None:
            self._tell(event)
        else:
            self._loop.soon(self._tell, event)

    def settle(self, timeout: float = _SETTLE_S) -> bool:
        """Wait until every event published so far has been heard, a consumer's too (the
        night's end); False if one was still at it after ``timeout``."""
        if self._loop is None or self._loop.on_loop() or self._loop.closed:
            return True
        consumers = [s for s in self._sinks if isinstance(s, Consumer)]

        async def heard() -> None:
            for consumer in consumers:
                await consumer.heard()

        try:
            self._loop.run(heard(), timeout)
        except (TimeoutError, RuntimeError):
            return False
        return True

    def _tell(self, event: NightEvent) -> None:
        for sink in list(self._sinks):
            try:
                sink(event)
            except Exception:
                name = getattr(sink, "__qualname__", type(sink).__name__)
                self._logger.exception("night event sink %s failed on %r", name, event)


class Consumer:
    """A slow sink (it writes a database, posts to an API) as a consumer task of the night's
    loop: what it hears is queued on the loop and handed to ``sink`` off it, one event after
    another in order, on ``pool``. The publisher never waits for it; ``Publisher.settle``
    waits for what it queued."""

    def __init__(
        self, sink: Sink, loop: NightLoop, pool: str, *, logger: Logger | None = None
    ) -> None:
        self._sink = sink
        self._loop = loop
        self._pool = pool
        self._logger: Logger = logger or logging.getLogger("nightshift.events")
        self._queue: asyncio.Queue[NightEvent] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    def __call__(self, event: NightEvent) -> None:
        self._loop.owned("a consumer's queue")
        self._queue.put_nowait(event)
        if self._task is None:
            self._task = self._loop.spawn(self._consume(), f"consumer-{self._pool}")

    async def heard(self) -> None:
        """On the loop: once every event queued so far has been handed to the sink."""
        await self._queue.join()

    async def _consume(self) -> None:
        loop = asyncio.get_running_loop()
        thread = self._loop.blocking(self._pool, 1)
        while True:
            event = await self._queue.get()
            try:
                await loop.run_in_executor(thread, self._sink, event)
            except Exception:
                name = getattr(self._sink, "__qualname__", type(self._sink).__name__)
                self._logger.exception("night event sink %s failed on %r", name, event)
            finally:
                self._queue.task_done()


class Since:
    """When each job entered its current state: the dwell of its next change. Not thread-safe:
    its one owner is the night's marks, on the loop."""

    def __init__(self) -> None:
        self._since: dict[str, tuple[str, datetime]] = {}

    def current(self, label: str) -> tuple[str, datetime] | None:
        """The job's current state and when it entered it; None before its first."""
        return self._since.get(label)

    def enter(self, label: str, state: str, at: datetime) -> float | None:
        """Seconds the job spent in its previous state; None for its first, or a repeat."""
        previous = self._since.get(label)
        if previous is not None and previous[0] == state:
            return None  # not a change: the state keeps its start
        self._since[label] = (state, at)
        if previous is None:
            return None
        # a final state is dated when first seen, which may precede a later note (fallback)
        return max(0.0, (at - previous[1]).total_seconds())


class LogSink:
    """The flow's log lines, each thing once: a job that succeeded, each watch (INFO) and alert
    (ERROR), the night's message. A job that did not succeed is not logged here: its task
    says why, once, at ERROR, on its own task run."""

    def __init__(self, logger: Logger) -> None:
        self._logger = logger

    def __call__(self, event: NightEvent) -> None:
        if isinstance(event, JobFinished):
            if event.outcome.ok:
                self._logger.info("finished %s", event.outcome.line())
        elif isinstance(event, NightFinished):
            self._logger.info("%s", event.summary.message())
        elif isinstance(event, LevelChanged):
            # once each: a watch for the record, an alert for someone to act on
            severity = logging.ERROR if event.alert.level == "alert" else logging.INFO
            self._logger.log(severity, "%s", event.alert.line())
        elif isinstance(event, IncidentChanged):
            self._incident(event.change)

    def _incident(self, change: IncidentChange) -> None:
        incident = change.incident
        if isinstance(change, Opened):
            severity = logging.ERROR if incident.level == "alert" else logging.WARNING
            self._logger.log(severity, "incident: %s", incident.headline())
        elif isinstance(change, Closed):
            self._logger.info("incident %s %s", incident.key, incident.end_line())
        # a job's level and its end inside an incident are logged once already, as its own
