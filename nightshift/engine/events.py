"""Night events: what happens in a night, as small immutable values handed to every sink.

The runner and the watcher publish; the ledger, the live table, the progress artifact and the
flow's logs listen (later: budgets, Slack, metrics). A sink is any callable taking an event. A
sink that raises is logged and skipped: it never stops the night nor changes its verdict.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from nightshift.engine.alerts import Alert
from nightshift.engine.expected import Typical
from nightshift.engine.incidents import Closed, IncidentChange, Opened
from nightshift.engine.outcomes import JobOutcome, NightSummary

__all__ = [
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
    """Hands each event to every sink, in order, on the publishing thread."""

    def __init__(self, sinks: Iterable[Sink] = (), logger: Logger | None = None) -> None:
        self._sinks = list(sinks)
        self._logger: Logger = logger or logging.getLogger("nightshift.events")

    @property
    def sinks(self) -> list[Sink]:
        """The sinks, in the order they hear events (a copy)."""
        return list(self._sinks)

    def add(self, sink: Sink) -> None:
        """One more sink, after the others."""
        self._sinks.append(sink)

    def publish(self, event: NightEvent) -> None:
        """Tell every sink; a sink that raises is logged and the others still hear it."""
        for sink in list(self._sinks):
            try:
                sink(event)
            except Exception:
                name = getattr(sink, "__qualname__", type(sink).__name__)
                self._logger.exception("night event sink %s failed on %r", name, event)


class Since:
    """When each job entered its current state: the dwell of its next change. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since: dict[str, tuple[str, datetime]] = {}

    def current(self, label: str) -> tuple[str, datetime] | None:
        """The job's current state and when it entered it; None before its first."""
        with self._lock:
            return self._since.get(label)

    def enter(self, label: str, state: str, at: datetime) -> float | None:
        """Seconds the job spent in its previous state; None for its first, or a repeat."""
        with self._lock:
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
