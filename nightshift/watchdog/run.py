"""One watchdog pass: read the ledger, check, keep each finding once, announce the new ones.

It reads only the ledger (jobs, transitions, leases, alerts) and the budgets, so it works when
the night's own process died. A finding already in the alert log (the night raised it, or an
earlier pass did) is not announced again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from nightshift.budgets.lookup import FLOOR_S
from nightshift.config.catalogue import MIN_SAMPLES
from nightshift.config.names import shown_name
from nightshift.store.alert_log import (
    DWELL,
    INCIDENT,
    MISSED,
    STALE,
    STOPPED,
    STREAK,
    AlertLog,
    AlertRecord,
)
from nightshift.store.db import db_now
from nightshift.watchdog.checks import (
    BY,
    Rules,
    dwell_findings,
    group_stalls,
    missed_findings,
    stale_findings,
    stopped_findings,
    streak_findings,
)

__all__ = ["FindingSink", "LogFindingSink", "WatchReport", "watch_once"]

Logger = logging.Logger | logging.LoggerAdapter  # type: ignore[type-arg]

UNSTARTED_AFTER = timedelta(hours=1)  # a night not started this long after its slot: missed
OUTCOME_WINDOW = timedelta(days=30)  # streaks are read from this many nights back, as budgets
_ORDER = {STOPPED: 0, DWELL: 1, MISSED: 2, STREAK: 3, STALE: 4}  # the bigger news first


class FindingSink(Protocol):
    """Where new watchdog alerts go: the Slack notification will implement it."""

    def send(self, alert: AlertRecord) -> None:
        """Announce one alert; called once per alert-log key, ever."""
        ...


class LogFindingSink:
    """The stand-in sink: one warning line per new alert (the pass itself went fine)."""

    def __init__(self, logger: Logger | None = None) -> None:
        self._logger: Logger = logger or logging.getLogger("nightshift.watchdog")

    def send(self, alert: AlertRecord) -> None:
        """Log the alert's line."""
        self._logger.warning("%s %s: %s", alert.level, alert.kind, alert.detail)


@dataclass(frozen=True)
class WatchReport:
    """What one pass saw, found and newly raised."""

    at: datetime
    catalogue: str | None  # None: every catalogue in the ledger
    in_flight: int
    found: list[AlertRecord]
    raised: list[AlertRecord]  # the ones the alert log took: announced
    sink_errors: list[str] = field(default_factory=list)

    def headline(self) -> str:
        """``watchdog: 2 jobs in flight, 3 findings, 2 new alerts``."""
        return (
            f"watchdog: {self.in_flight} jobs in flight, {len(self.found)} findings, "
            f"{len(self.raised)} new alerts"
        )

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready object."""
        return {
            "at": self.at.isoformat(),
            "catalogue": self.catalogue,
            "in_flight": self.in_flight,
            "found": len(self.found),
            "raised": [_alert_dict(a) for a in self.raised],
            "sink_errors": self.sink_errors,
        }


def watch_once(
    url: str,
    *,
    catalogue: str | None = None,
    labels: list[str] | None = None,
    rules: Rules | None = None,
    sink: FindingSink | None = None,
    now: datetime | None = None,
    floor_s: float = FLOOR_S,
    min_samples: int = MIN_SAMPLES,
    host_clock: Callable[[], datetime] | None = None,
    schedule: list[tuple[str, str | None]] | None = None,
) -> WatchReport:
    """One pass over ``catalogue`` (a key; None: all); stale labels need ``labels`` (its file's).

    Judged at ``now``, by default the ledger's clock: PostgreSQL's ``now()`` (the clock its
    leases expire by, whatever this host's says), a SQLite file's host's (``host_clock``).

    ``floor_s`` and ``min_samples`` are the catalogue's (its dwell floor and
    ``defaults.min_samples``), the defaults without one. ``schedule``: the (cron, time zone)
    of the catalogue's nightly: a night whose slot passed ``UNSTARTED_AFTER`` ago with no night
    of the catalogue running and none of it in the ledger is named missed here (no worker ran
    it, so no run of it could).

    Database errors propagate for the caller to name.
    """
    from nightshift.budgets.current import current_budgets
    from nightshift.store.ledger import Ledger
    from nightshift.watchdog import reads

    rules = rules or Rules()
    sink = sink or LogFindingSink()
    ledger = Ledger(url, catalogue or "default")  # brings the schema up to date
    try:
        engine = ledger.engine
        now = now or db_now(engine, host_clock)
        jobs = reads.in_flight(engine, catalogue)
        catalogues = {j.catalogue for j in jobs}
        since = min((j.night for j in jobs), default="")
        activity = reads.night_activity(engine, catalogues, since)
        leases = reads.leases(engine)
        found = stopped_findings(jobs, leases, activity, now)
        if jobs:
            found += dwell_findings(jobs, current_budgets(ledger, now, min_samples), now, floor_s)
        first_night = (now - OUTCOME_WINDOW).date().isoformat()
        found += streak_findings(reads.outcomes(engine, first_night, catalogue), now, rules, labels)
        missed = []
        if catalogue is not None:
            if schedule:
                _name_unstarted(engine, catalogue, schedule, leases, now)
            missed = reads.missed_never_run(engine, catalogue, first_night)
            found += missed_findings(catalogue, missed, now)
        if catalogue is not None and labels is not None and not _fresh(missed, now, rules):
            # while a catalogue's missed nights are fresh news, it is `missed`, not each of its
            # labels stale; after that (nights still not running), stale says so again
            records = reads.label_records(engine, catalogue)
            found += stale_findings(catalogue, labels, records, now, rules)
        found.sort(key=lambda a: (_ORDER.get(a.kind, 9), a.catalogue, a.night, a.label))
        log = AlertLog(engine)
        raised = [alert for alert in found if log.record(alert)]
        # several of one backend's jobs stalled in one state: one incident, as in the night
        backends = {j.label: j.backend for j in jobs}
        raised = [
            alert
            for alert in group_stalls(raised, backends, now)
            if alert.kind != INCIDENT or log.record(alert)
        ]
    finally:
        ledger.close()
    errors = []
    for alert in raised:
        try:
            sink.send(alert)
        except Exception as exc:  # kept in the alert log all the same; say so, go on
            errors.append(f"{alert.kind} {shown_name(alert.catalogue)}/{alert.label}: {exc}")
    return WatchReport(now, catalogue, len(jobs), found, raised, errors)


def _alert_dict(alert: AlertRecord) -> dict[str, Any]:
    return {
        "catalogue": alert.catalogue,
        "night": alert.night,
        "label": alert.label,
        "kind": alert.kind,
        "state": alert.state,
        "level": alert.level,
        "dwell_s": alert.dwell_s,
        "p95_s": alert.p95_s,
        "text": alert.detail,
    }


def _fresh(missed: list[tuple[str, Any, str]], now: datetime, rules: Rules) -> bool:
    """Whether a night of ``missed`` ended within the stale limit of ``now``."""
    limit = now - timedelta(seconds=rules.stale_s)
    ends = [
        datetime.fromisoformat(night).replace(tzinfo=UTC) + timedelta(days=1)
        for night, *_ in missed
    ]
    return any(end >= limit for end in ends)


def _name_unstarted(
    engine: Any,
    catalogue: str,
    schedule: list[tuple[str, str | None]],
    leases: dict[str, Any],
    now: datetime,
) -> None:
    """Name the nights of ``schedule`` whose slot passed ``UNSTARTED_AFTER`` ago and that
    never started, since the catalogue's first night (none while one of its nights runs)."""
    from nightshift.engine.missed import LOOKBACK, crons_nights
    from nightshift.store.missed_nights import MissedNights
    from nightshift.store.night_reads import first_night, nights_run

    lease = leases.get(catalogue)
    if lease is not None and lease.expires_at >= now:
        return  # a night is running: the next one may only be waiting its turn
    first = first_night(engine, catalogue)
    if first is None:
        return  # it never ran: nothing says its schedule is meant to run yet
    start = datetime.fromisoformat(first).replace(tzinfo=UTC) + timedelta(days=1)
    since = max(start, now - LOOKBACK)
    # a schedule that cannot be read is `nightshift validate`'s to name
    slots, _problems = crons_nights(schedule, since, now - UNSTARTED_AFTER)
    missed = MissedNights(engine, catalogue)
    done = nights_run(engine, catalogue, first) | {m.night for m in missed.all(first)}
    unstarted = [(n, at) for n, at in sorted(slots.items()) if n not in done and n > first]
    why = "no run of it started (is a worker running? the deployment paused?)"
    missed.name(unstarted, by=BY, reason=why, at=now)
