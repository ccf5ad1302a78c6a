"""The night's detector at work: fed each job change, woken between polls, announcing once.

``DwellWatch`` is a sink of the night's events: a job entering a state that is not final is
observed by the ``Detector``, a final state forgets it. Between polls a task on the night's loop
sleeps until ``Detector.next_wake()`` and ticks (off the loop: a tick writes the alert log and
sends), so a level changes on time whatever the poll interval.
Each level change is kept in the alert log first; only a change the log had not seen (a rerun
re-attaching repeats nothing) becomes a ``LevelChanged`` event for the sinks and goes to the
``AlertSink`` at once (watches too: the sink sends what ``notify.alert_levels`` lists). A night
that lost its lease keeps and announces nothing: the night holding it does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Literal, cast

from nightshift.budgets.lookup import Budget, Budgets, dwell_floor
from nightshift.engine.alerts import Alert, AlertSink, Raised
from nightshift.engine.detection import Detector
from nightshift.engine.events import (
    ExpectedDurations,
    JobChanged,
    LevelChanged,
    Logger,
    NightEvent,
)
from nightshift.engine.expected import typical_of
from nightshift.engine.outcomes import is_final
from nightshift.loop import CHORE_THREADS, CHORES, NightLoop, Signal
from nightshift.store.alert_log import DWELL, AlertLog, AlertRecord

if TYPE_CHECKING:
    from nightshift.engine.context import NightContext
    from nightshift.store.ledger import Ledger

__all__ = ["BudgetLoader", "CatalogueBudgets", "DwellWatch", "LevelOutlets", "watch_dwells"]

_MAX_WAIT = 60.0  # seconds: the timer looks at the wall clock at least this often
_MIN_WAIT = 0.01  # never spin, even if a wake-up is already past
_LEVELS: tuple[Literal["watch", "alert"], ...] = ("watch", "alert")


@dataclass(frozen=True)
class CatalogueBudgets:
    """Tonight's budgets for the detector: one catalogue's, a label's backend as the fallback."""

    budgets: Budgets
    catalogue: str
    backends: Mapping[str, str]  # label -> backend

    def budget(self, label: str, state: str) -> Budget | None:
        """The budget of ``label`` in ``state``, or None while still learning."""
        return self.budgets.budget(self.catalogue, label, state, self.backends.get(label))


@dataclass(frozen=True)
class LevelOutlets:
    """Where a level change goes: kept in the alert log first (once a night), then published
    to the night's sinks and sent to the alert sink."""

    log: AlertLog
    publish: Callable[[NightEvent], None]
    alerts: AlertSink


class DwellWatch:
    """A night event sink with a timer: turns job changes and time into announced levels."""

    def __init__(
        self,
        detector: Detector,
        outlets: LevelOutlets,
        *,
        wall: Callable[[], datetime],
        owns_night: Callable[[], bool] = lambda: True,
        logger: Logger | None = None,
        loop: NightLoop | None = None,
    ) -> None:
        self.detector = detector
        self._publish = outlets.publish
        self._log = outlets.log
        self._alerts = outlets.alerts
        self._wall = wall
        self._owns_night = owns_night
        self._logger: Logger = logger or logging.getLogger("nightshift.detection")
        self._entered: dict[str, tuple[str, datetime]] = {}
        self._lock = threading.Lock()
        # the night's loop runs the timer (a watch made alone runs on a loop of its own)
        self._night = loop if loop is not None else NightLoop("nightshift-dwell")
        self._owns_loop = loop is None
        self._changed = Signal(self._night)
        self._stopped = False
        self._waiting_for: datetime | None = None
        self._task: Future[None] | None = None

    # -- the sink -------------------------------------------------------------------------
    def __call__(self, event: NightEvent) -> None:
        if not isinstance(event, JobChanged):
            return
        if is_final(event.state):
            with self._lock:
                self._entered.pop(event.label, None)
            self.detector.forget(event.label)
            return
        with self._lock:
            previous = self._entered.get(event.label)
            if previous is None or previous[0] != event.state:
                self._entered[event.label] = (event.state, event.at)
            entered_at = self._entered[event.label][1]  # a repeat keeps the state's start
        changes = self.detector.observe(
            event.label,
            event.state,
            entered_at=entered_at,
            now=self._wall(),
            backend=event.backend,
        )
        self._announce(changes)
        self.poke()  # its next level may come before the timer's current wake-up

    # -- the timer ------------------------------------------------------------------------
    def start(self) -> DwellWatch:
        """Start the timer, a task on the night's loop."""
        self._task = self._night.submit(self._timer())
        return self

    def stop(self) -> None:
        """Stop the timer (the night is over)."""
        self._stopped = True
        self._changed.fire()
        if self._task is not None and not self._night.on_loop():
            with contextlib.suppress(Exception):
                self._task.result(timeout=10)
        if self._owns_loop:
            self._night.close()

    def poke(self) -> None:
        """Look at the clock again now (a new observation, or a test moved its fake clock)."""
        self._changed.fire()

    @property
    def waiting_for(self) -> datetime | None:
        """The wall time the timer sleeps until, None when nothing is pending or it is busy."""
        with self._lock:
            return self._waiting_for

    def tick(self) -> None:
        """Announce every level reached by now, without a poll."""
        self._announce(self.detector.tick(self._wall()))

    async def _timer(self) -> None:
        loop = asyncio.get_running_loop()
        chores = self._night.blocking(CHORES, CHORE_THREADS)
        while not self._stopped:
            wake, now = self.detector.next_wake(), self._wall()
            if wake is None or wake > now:
                left = _MAX_WAIT if wake is None else (wake - now).total_seconds()
                with self._lock:
                    self._waiting_for = wake
                await self._changed.wait(min(max(left, _MIN_WAIT), _MAX_WAIT))
                with self._lock:
                    self._waiting_for = None
                continue
            try:
                await loop.run_in_executor(chores, self.tick)
            except Exception:  # a bug here must not end the night; the next poll still observes
                self._logger.exception("dwell detection failed on a tick")
                await self._changed.wait(_MAX_WAIT)

    # -- announcing -----------------------------------------------------------------------
    def _announce(self, changes: list[Alert]) -> None:
        for alert in changes:
            if not self._owns_night():
                continue  # the rows and the news belong to the night holding the lease now
            if not self._keep(alert):
                continue
            self._publish(LevelChanged(alert))
            try:
                self._alerts.send(alert)
            except Exception:
                self._logger.exception("the alert sink failed on %s", alert.line())

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
    except Exception as exc:
        logger.warning(
            "no dwell watch tonight: the budgets could not be read: %s: %s",
            type(exc).__name__,
            str(exc).strip().splitlines()[0] if str(exc).strip() else "",
        )
        return None
    ctx.budgets = budgets  # a job's learned timeout is cut from them too
    backends = {job.label: job.backend for job in ctx.catalogue.jobs}
    detector = Detector(
        ctx.night,
        key,
        CatalogueBudgets(budgets, key, backends),
        raised=[cast("Raised", key) for key in raised if key[2] in _LEVELS],
        # a dwell is seen a poll late at worst: no level before a few of the night's longest
        floor_s=dwell_floor(ctx.catalogue.defaults.poll.max),
        name=ctx.catalogue.shown,
    )
    if typical := typical_of(budgets, ctx.catalogue):
        ctx.events.publish(ExpectedDurations(ctx.night, key, typical, ctx.wall()))
    watch = DwellWatch(
        detector,
        LevelOutlets(log, ctx.events.publish, alerts),
        wall=ctx.wall,
        owns_night=ctx.rules.owns_night,
        logger=logger,
        loop=ctx.loop,
    )
    ctx.events.add(watch)  # the last sink: the others hear a change before its level
    return watch.start()
