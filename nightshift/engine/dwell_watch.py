"""The night's detector at work: fed each job change, woken between polls, announcing once.

``DwellWatch`` is a sink of the night's events: a job entering a state that is not final is
observed by the ``Detector``, a final state forgets it. Between polls a task on the night's loop
sleeps until ``Detector.next_wake()`` and ticks, so a level changes on time whatever the poll
interval. The detector and the incident desk are the loop's; what a level sets going (the alert
log's row, the sinks, the alert sink) is delivered in order by one task, off the loop.
Each level change is kept in the alert log first; only a change the log had not seen (a rerun
re-attaching repeats nothing) becomes a ``LevelChanged`` event for the sinks and goes to the
``AlertSink`` at once (watches too: the sink sends what ``notify.alert_levels`` lists). A night
that lost its lease keeps and announces nothing: the night holding it does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Literal, cast

from nightshift.budgets.columns import Source
from nightshift.budgets.lookup import Budget, Budgets, dwell_floor
from nightshift.engine.alerts import Alert, AlertSink, Raised
from nightshift.engine.detection import Detector
from nightshift.engine.events import (
    ExpectedDurations,
    IncidentChanged,
    JobChanged,
    LevelChanged,
    Logger,
    NightEvent,
)
from nightshift.engine.expected import typical_of
from nightshift.engine.holds import SubmitHolds
from nightshift.engine.incidents import (
    Action,
    Alone,
    Closed,
    Holds,
    IncidentDesk,
    IncidentRule,
    Opened,
)
from nightshift.engine.outcomes import is_final
from nightshift.engine.spend import is_paid
from nightshift.loop import CHORE_THREADS, CHORES, NightLoop, Signal
from nightshift.states import JobState
from nightshift.store.alert_log import DWELL, INCIDENT, AlertLog, AlertRecord

if TYPE_CHECKING:
    from nightshift.config.catalogue import Catalogue
    from nightshift.engine.context import NightContext
    from nightshift.store.ledger import Ledger

__all__ = [
    "BudgetLoader",
    "CatalogueBudgets",
    "DwellWatch",
    "LevelOutlets",
    "incident_desk",
    "watch_dwells",
]

_MAX_WAIT = 60.0  # seconds: the timer looks at the wall clock at least this often
_MIN_WAIT = 0.01  # never spin, even if a wake-up is already past
_LEVELS: tuple[Literal["watch", "alert"], ...] = ("watch", "alert")


@dataclass(frozen=True)
class CatalogueBudgets:
    """Tonight's budgets for the detector: one catalogue's, a label's backend as the fallback."""

    budgets: Budgets
    catalogue: str
    backends: Mapping[str, str]  # label -> backend
    expected: Mapping[str, float] = field(default_factory=dict)  # label -> its `expect:` (s)

    def budget(self, label: str, state: str) -> Budget | None:
        """The budget of ``label`` in ``state``, or None while still learning; a job that
        declares ``expect:`` and has no budget of its own yet is held to it while running."""
        own = self.budgets.states.get((self.catalogue, label, state))
        if label in self.expected and state == JobState.RUNNING and own is None:
            return Budget(self.expected[label], self.expected[label], 0, Source.DECLARED)
        return self.budgets.budget(self.catalogue, label, state, self.backends.get(label))


@dataclass(frozen=True)
class LevelOutlets:
    """Where a level change goes: kept in the alert log first (once a night), then published
    to the night's sinks and sent to the alert sink."""

    log: AlertLog
    publish: Callable[[NightEvent], None]
    alerts: AlertSink
    # several jobs of one backend stalled together: one incident (None: each level alone)
    desk: IncidentDesk | None = None


class DwellWatch:
    """A night event sink with a timer: turns job changes and time into announced levels.

    Its state (the jobs' entered states, the detector, the incident desk) is its loop's alone: a
    job change heard on a publisher's thread is taken on the loop, and the timer ticks there.
    What blocks (an alert log row, the sinks and the alert sink hearing a level) is one queue's
    work, delivered in order by one task of the loop, each call among the night's chores.
    """

    def __init__(
        self,
        detector: Detector,
        outlets: LevelOutlets,
        *,
        wall: Callable[[], datetime],
        owns_night: Callable[[], bool] = lambda: True,
        logger: Logger | None = None,
        loop: NightLoop,
    ) -> None:
        self.detector = detector  # the loop's (asked elsewhere: ``raised``, ``next_wake``)
        self._publish = outlets.publish
        self._log = outlets.log
        self._alerts = outlets.alerts
        self._desk = outlets.desk
        self._wall = wall
        self._owns_night = owns_night
        self._logger: Logger = logger or logging.getLogger("nightshift.detection")
        self._entered: dict[str, tuple[str, datetime]] = {}
        self._night = loop  # the night's loop runs the timer: its maker's, never its own
        self._changed = Signal(self._night)
        self._stopped = False
        self._waiting_for: datetime | None = None  # written on the loop, read anywhere
        # what is to be delivered, in order: levels reached, or what the incident desk is told
        self._outbox: asyncio.Queue[list[Alert] | _Tell | None] = asyncio.Queue()
        self._desk_due = False  # the desk's tick is queued: its wake-up is the deliverer's
        self._drained = False  # the deliverer is gone (stopped): the desk is told at once
        self._tasks: list[Future[None]] = []

    # -- the sink -------------------------------------------------------------------------
    def __call__(self, event: NightEvent) -> None:
        if isinstance(event, JobChanged):
            self._night.soon(self._seen, event)

    def _seen(self, event: JobChanged) -> None:
        """On the loop: a job's change observed; what it raised queued for delivery."""
        self._night.owned("the dwell watch")
        if is_final(event.state):
            self._entered.pop(event.label, None)
            self.detector.forget(event.label)
            if self._desk is not None:
                self._tell(partial(self._desk.ended, event.label, event.state, event.at))
            return
        previous = self._entered.get(event.label)
        if previous is None or previous[0] != event.state:
            self._entered[event.label] = (event.state, event.at)
        entered_at = self._entered[event.label][1]  # a repeat keeps the state's start
        if self._desk is not None:
            desk = self._desk
            self._tell(partial(desk.entered, event.label, event.backend, event.state, event.at))
        changes = self.detector.observe(
            event.label, event.state, entered_at=entered_at, now=self._wall(),
            backend=event.backend,
        )  # fmt: skip
        self._deliver(changes)
        self.poke()  # its next level may come before the timer's current wake-up

    # -- the timer ------------------------------------------------------------------------
    def start(self) -> DwellWatch:
        """Start the timer and the deliveries, tasks on the night's loop."""
        self._tasks = [self._night.submit(self._timer()), self._night.submit(self._delivering())]
        return self

    def stop(self) -> None:
        """Stop the timer (the night is over); what was queued is delivered first."""
        self._stopped = True
        self._changed.fire()
        self._night.soon(self._outbox.put_nowait, None)
        if not self._night.on_loop():
            for task in self._tasks:
                with contextlib.suppress(Exception):
                    task.result(timeout=10)

    def poke(self) -> None:
        """Look at the clock again now (a new observation, or a test moved its fake clock)."""
        self._changed.fire()

    @property
    def waiting_for(self) -> datetime | None:
        """The wall time the timer sleeps until, None when nothing is pending or it is busy."""
        return self._waiting_for

    def raised(self) -> frozenset[Raised]:
        """Every (label, state, level) raised tonight, asked of the loop."""
        return self._night.ask(lambda: self.detector.raised, timeout=10)

    def next_wake(self) -> datetime | None:
        """When the next level of a watched job is due (maybe past), asked of the loop."""
        return self._night.ask(self._next_wake, timeout=10)

    def _tick(self) -> None:
        """On the loop: every level reached by now, and the levels whose wait for others is
        over, without a poll."""
        now = self._wall()
        self._deliver(self.detector.tick(now))
        desk = self._desk
        wake = None if desk is None or self._desk_due else desk.next_wake()
        if desk is not None and wake is not None and wake <= now:
            self._desk_due = True  # weighed in its turn, after the levels queued before
            self._tell(lambda: desk.tick(self._wall()), tick=True)

    def _next_wake(self) -> datetime | None:
        wakes = [self.detector.next_wake()]
        if self._desk is not None and not self._desk_due:
            wakes.append(self._desk.next_wake())
        return min((w for w in wakes if w is not None), default=None)

    async def _timer(self) -> None:
        while not self._stopped:
            wake, now = self._next_wake(), self._wall()
            if wake is None or wake > now:
                left = _MAX_WAIT if wake is None else (wake - now).total_seconds()
                self._waiting_for = wake
                await self._changed.wait(min(max(left, _MIN_WAIT), _MAX_WAIT))
                self._waiting_for = None
                continue
            try:
                self._tick()
            except Exception:  # a bug here must not end the night; the next poll still observes
                self._logger.exception("dwell detection failed on a tick")
                await self._changed.wait(_MAX_WAIT)

    # -- announcing -----------------------------------------------------------------------
    def _deliver(self, work: list[Alert]) -> None:
        if work:
            self._outbox.put_nowait(work)

    def _tell(self, call: Callable[[], list[Action]], *, tick: bool = False) -> None:
        """Queue what the incident desk is to hear: it hears it in its turn, after the levels
        queued before (a level reaches the desk once the alert log kept it), so its changes
        go out in the order it made them (an incident's opening before a job joins it).
        Once the deliverer is gone, at once: a job ending after the watch stopped still ends
        its incident (the night's verdict reads it), though nothing is announced any more."""
        if self._drained:
            self._told_quietly(call)
        else:
            self._outbox.put_nowait(_Tell(call, tick))

    async def _delivering(self) -> None:
        """The one deliverer: levels kept, told and sent, an incident's changes, in order;
        each blocking call off the loop, the incident desk asked on it. Ends at ``stop``'s
        mark, once what came before it is delivered."""
        loop = asyncio.get_running_loop()
        chores = self._night.blocking(CHORES, CHORE_THREADS)
        while (work := await self._outbox.get()) is not None:
            try:
                if isinstance(work, _Tell):
                    await self._told(work, chores)
                    continue
                for alert in work:
                    actions = await self._announce(alert, chores)
                    await loop.run_in_executor(chores, self._dispatch, actions)
            except Exception:  # a bug here must not end the night
                self._logger.exception("delivering a level or an incident failed")
        # stopped: what came after the mark is not announced, but the desk still hears it
        self._drained = True
        while not self._outbox.empty():
            if isinstance(rest := self._outbox.get_nowait(), _Tell):
                self._told_quietly(rest.call)

    def _told_quietly(self, call: Callable[[], list[Action]]) -> None:
        """The desk told after the watch stopped: its state kept right, its changes not sent;
        a bug in it is logged, never raised into the night's end."""
        try:
            call()
        except Exception:
            self._logger.exception("the incident desk failed after the dwell watch stopped")

    async def _told(self, tell: _Tell, chores: Executor) -> None:
        """The desk hears a job's move or the timer's tick, on the loop; its changes go out."""
        try:
            actions = tell.call()
        finally:
            if tell.tick:
                self._desk_due = False
        if tell.tick:  # not after a tick that raised: it would be due again at once
            self.poke()  # the desk's next wake-up is the timer's again
        if actions:
            await asyncio.get_running_loop().run_in_executor(chores, self._dispatch, actions)

    async def _announce(self, alert: Alert, chores: Executor) -> list[Action]:
        """A level reached: kept in the alert log (once a night), told to the sinks; what it
        does to tonight's incidents (the desk is the loop's)."""
        if not self._owns_night():
            return []  # the rows and the news belong to the night holding the lease now
        loop = asyncio.get_running_loop()
        if not await loop.run_in_executor(chores, self._keep, alert):
            return []
        await loop.run_in_executor(chores, self._publish, LevelChanged(alert))
        if self._desk is None:
            return [Alone(alert)]
        actions = self._desk.level(alert, self._wall())
        self.poke()  # a level it holds for others of its backend wakes the timer in time
        return actions

    def _dispatch(self, actions: list[Action]) -> None:
        """A level alone to the alert sink; an incident's change to the night's sinks."""
        for action in actions:
            if isinstance(action, Alone):
                try:
                    self._alerts.send(action.alert)
                except Exception:
                    self._logger.exception("the alert sink failed on %s", action.alert.line())
                continue
            if not self._owns_night():
                continue
            if isinstance(action, Opened | Closed):
                self._keep_incident(action)
            self._publish(IncidentChanged(self.detector.night, self.detector.catalogue, action))

    def _keep_incident(self, change: Opened | Closed) -> None:
        """The incident's opening and its end in the alert log (metrics, reports, a rerun)."""
        incident, opened = change.incident, isinstance(change, Opened)
        record = AlertRecord(
            catalogue=self.detector.catalogue,
            night=self.detector.night,
            label=incident.key,
            kind=INCIDENT,
            level=incident.level if opened else "over",
            raised_by="night",
            at=incident.opened_at if opened else (incident.ended_at or incident.opened_at),
            state=incident.state,
            dwell_s=incident.lasted_s,
            detail=incident.line(),
        )
        try:
            self._log.record(record)
        except Exception as exc:
            self._logger.warning(
                "could not keep incident %s in the alert log: %s: %s",
                incident.key,
                type(exc).__name__,
                exc,
            )

    def _keep(self, alert: Alert) -> bool:
        """Write the alert log row; False when it was there already (raised by another run).

        A database that fails now does not silence the alert: it is announced all the same.
        """
        record = AlertRecord(
            catalogue=alert.catalogue,
            night=alert.night,
            label=alert.label,
            kind=DWELL,
            level=alert.level,
            raised_by="night",
            at=alert.at,
            state=alert.state,
            dwell_s=alert.dwell_s,
            p95_s=alert.p95_s,
            detail=alert.line(),
        )
        try:
            return self._log.record(record)
        except Exception as exc:
            self._logger.warning(
                "could not keep %s in the alert log: %s: %s", alert.key, type(exc).__name__, exc
            )
            return True


@dataclass(frozen=True)
class _Tell:
    """A call to the incident desk, made when the deliverer comes to it."""

    call: Callable[[], list[Action]]
    tick: bool = False  # the timer's: its wake-up is the timer's again once made


def incident_desk(catalogue: Catalogue) -> IncidentDesk:
    """Tonight's incident desk with each backend's rule (``incident:`` of the catalogue): its
    submits held while it lasts when ``hold_submits`` says so, a paid job's always."""
    paid = {job.backend for job in catalogue.jobs if is_paid(job)}
    poll_max = catalogue.defaults.poll.max

    def rule(backend: str) -> IncidentRule:
        settings = catalogue.incident(backend)
        holds: Holds = "all" if settings.hold_submits else "paid" if backend in paid else "none"
        return IncidentRule(settings.jobs, settings.window_s(poll_max), holds)

    return IncidentDesk(rule)


def hold_submits(holds: SubmitHolds, event: NightEvent) -> None:
    """An incident that holds submits holds them from its opening; its end releases them when
    its jobs moved on, else its backend is refused for the rest of the night."""
    if not isinstance(event, IncidentChanged):
        return
    change, incident = event.change, event.change.incident
    if incident.holds == "none":
        return
    if isinstance(change, Opened):
        holds.hold(incident.backend, incident.headline(), everything=incident.holds == "all")
    elif isinstance(change, Closed) and incident.moved_on:
        holds.release(incident.backend)
    elif isinstance(change, Closed):
        holds.refuse(incident.backend, f"{incident.headline()}, and none moved on")


def _numbered(keys: Iterable[str]) -> dict[tuple[str, str], int]:
    """(backend, state) -> the most incidents of it opened, from keys like ``cli/queued#2``."""
    counts: dict[tuple[str, str], int] = {}
    for key in keys:
        where, _, number = key.rpartition("#")
        backend, _, state = where.partition("/")
        if number.isdigit():
            counts[(backend, state)] = max(counts.get((backend, state), 0), int(number))
    return counts


# (ledger, now, min_samples): the budgets of at least the catalogue's `defaults.min_samples`
BudgetLoader = Callable[["Ledger", datetime, int], Budgets]


def watch_dwells(
    ctx: NightContext, load: BudgetLoader | None, alerts: AlertSink
) -> DwellWatch | None:
    """Tonight's detection on ``ctx``, started: budgets as of now, seeded from the alert log.

    No loader, or budgets that cannot be read (one line in the night's log): None, and the night
    runs as it would without budgets. The expected durations go out first, as an event.
    """
    logger: Logger = ctx.logger or logging.getLogger("nightshift.detection")
    key = ctx.catalogue.key
    if load is None:
        return None
    try:
        budgets = load(ctx.ledger, ctx.wall(), ctx.catalogue.defaults.min_samples)
        log = AlertLog(ctx.ledger.engine)
        raised = log.raised(key, ctx.night)
        opened = {label for label, _, _ in log.raised(key, ctx.night, INCIDENT)}
    except Exception as exc:
        logger.warning(
            "no dwell watch tonight: the budgets could not be read: %s: %s",
            type(exc).__name__,
            str(exc).strip().splitlines()[0] if str(exc).strip() else "",
        )
        return None
    ctx.budgets = budgets  # a job's learned timeout is cut from them too
    backends = {job.label: job.backend for job in ctx.catalogue.jobs}
    expected = {job.label: job.expect for job in ctx.catalogue.jobs if job.expect is not None}
    detector = Detector(
        ctx.night,
        key,
        CatalogueBudgets(budgets, key, backends, expected),
        raised=[cast("Raised", key) for key in raised if key[2] in _LEVELS],
        # a dwell is seen a poll late at worst: no level before a few of the night's longest
        floor_s=dwell_floor(ctx.catalogue.defaults.poll.max),
        name=ctx.catalogue.shown,
    )
    if typical := typical_of(budgets, ctx.catalogue):
        ctx.events.publish(ExpectedDurations(ctx.night, key, typical, ctx.wall()))
    desk = ctx.incidents
    desk.numbered.update(_numbered(opened))  # a rerun numbers on from an earlier run's
    watch = DwellWatch(
        detector,
        LevelOutlets(log, ctx.events.publish, alerts, desk),
        wall=ctx.wall,
        owns_night=ctx.rules.owns_night,
        logger=logger,
        loop=ctx.loop,
    )
    ctx.events.add(lambda event: hold_submits(ctx.holds, event))
    ctx.events.add(watch)  # the last sink: the others hear a change before its level
    return watch.start()
