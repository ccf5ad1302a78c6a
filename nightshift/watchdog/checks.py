"""What the watchdog finds in plain values read from the ledger (pure: no I/O, no Prefect).

Four checks, each finding an ``AlertRecord`` (raised by ``watchdog``, level ``alert``) whose key
makes it once in the alert log:

- ``dwell``: a job in flight longer than 2 x p95 in its current state. Keyed like the night's
  own alert (night, label, state), so one the night already raised is not raised again.
- ``stopped``: a night with jobs in flight that nobody watches: its catalogue's lease is gone or
  expired, or a live lease belongs to another night. The lease is per catalogue, so the night
  it covers is taken to be the one with the newest transition (a night that just took the lease
  and wrote nothing yet lets an older stopped night pass for watched until it does). Once per
  (catalogue, night).
- ``stale``: a label of the catalogue file that missed its schedule: no success and no run at
  all for the schedule's interval plus a grace (``stale_limit``: a daily catalogue's is 30 h), or
  ``stale_after_s`` when given. A label whose last run failed within that time is not stale: its
  night's digest said so already (and three such nights are a ``streak``). Only labels that have
  finished at least once: a new catalogue or label is still starting. Keyed by the night of the
  last success (or of the first run), so it is raised once per dry spell.
- ``streak``: a label whose last ``streak_nights`` (default 3) recorded nights all ended other
  than ``succeeded`` (partial, failed, timeout, skipped, lost...). Nights without a row for the
  label (an ``--only`` run) don't break or extend a streak. Keyed by the streak's first night:
  once per streak, however long it grows.

Several ``dwell`` findings of one backend's jobs in one state of one night are one incident, as
in the night (``group_stalls``): one finding names them all (kind ``incident``, its key
``cli/queued#watchdog``), the jobs' own rows are kept so none is raised again.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from nightshift.budgets.columns import Source
from nightshift.budgets.lookup import FLOOR_S, Budget, classify
from nightshift.config.durations import format_duration
from nightshift.config.names import first_few, shown_name
from nightshift.states import JobState
from nightshift.store.alert_log import (
    DWELL,
    INCIDENT,
    MISSED,
    STALE,
    STOPPED,
    STREAK,
    AlertRecord,
)

__all__ = [
    "BY",
    "BudgetLookup",
    "InFlight",
    "LabelRecord",
    "LeaseRow",
    "NightOutcome",
    "Rules",
    "dwell_findings",
    "group_stalls",
    "missed_findings",
    "stale_findings",
    "stale_limit",
    "stopped_findings",
    "streak_findings",
]

BY = "watchdog"  # the alert log's raised_by


class BudgetLookup(Protocol):
    """Where a job's learned budget comes from (``nightshift.budgets.lookup.Budgets``)."""

    def budget(
        self, catalogue: str, label: str, state: str, backend: str | None = None
    ) -> Budget | None:
        """The budget of ``label`` in ``state``, or None while learning."""
        ...


DAY_S = 24 * 3600.0
GRACE_MIN_S = 3600.0  # a stale limit is at least this much past the schedule's interval
GRACE_SHARE = 0.25  # ... or a quarter of the interval: a daily job gets 6 h to finish late


def stale_limit(interval_s: float = DAY_S) -> float:
    """How long a label may go without a success or a run: its interval plus a grace."""
    return interval_s + max(GRACE_MIN_S, GRACE_SHARE * interval_s)


@dataclass(frozen=True)
class Rules:
    """The watchdog's thresholds; ``stale_after_s`` None: from the catalogue's schedule."""

    stale_after_s: float | None = None
    streak_nights: int = 3
    interval_s: float = DAY_S  # the catalogue's schedule: the gap between two of its nights

    def __post_init__(self) -> None:
        if (self.stale_after_s is not None and self.stale_after_s <= 0) or self.streak_nights < 1:
            raise ValueError(f"rules need stale_after_s > 0 and streak_nights >= 1, got {self}")

    @property
    def stale_s(self) -> float:
        """The stale limit in force: the one given, else the schedule's interval plus a grace."""
        return (
            self.stale_after_s if self.stale_after_s is not None else stale_limit(self.interval_s)
        )


@dataclass(frozen=True)
class InFlight:
    """A job not final in the ledger: the state of its latest transition, and since when."""

    catalogue: str
    night: str
    label: str
    backend: str | None
    state: str
    entered_at: datetime


@dataclass(frozen=True)
class LeaseRow:
    """A catalogue's lease row (kept after a crash; deleted when a night ends cleanly)."""

    key: str  # the catalogue's key
    owner: str
    expires_at: datetime


@dataclass(frozen=True)
class NightOutcome:
    """How one label's job of one night ended (a final jobs row)."""

    catalogue: str
    night: str
    label: str
    state: str


@dataclass(frozen=True)
class LabelRecord:
    """One label's finished runs in short: the first, and the last success if any."""

    catalogue: str
    label: str
    first_night: str
    first_at: datetime
    last_success_night: str | None = None
    last_success_at: datetime | None = None
    last_night: str | None = None  # its latest finished run, whatever its state
    last_at: datetime | None = None


def dwell_findings(
    jobs: Iterable[InFlight], budgets: BudgetLookup, now: datetime, floor_s: float = FLOOR_S
) -> list[AlertRecord]:
    """Jobs past 2 x p95 in their current state, the floor under it (``classify``'s rule)."""
    found = []
    for job in jobs:
        budget = budgets.budget(job.catalogue, job.label, job.state, job.backend)
        dwell = (now - job.entered_at).total_seconds()
        if budget is None or classify(dwell, budget, floor_s=floor_s) != "alert":
            continue
        floored = f", floor {format_duration(floor_s)}" if floor_s > budget.p95 else ""
        # a state that is normally instant (p95 0) has no ratio to speak of: its floor says it
        ratio = f", x{dwell / budget.p95:.1f}" if budget.p95 > 0 else ""
        pooled = f" pooled from {job.backend}" if budget.source == Source.BACKEND else ""
        text = (
            f"{shown_name(job.catalogue)}/{job.label} {job.state} for {format_duration(dwell)} "
            f"(p95 {format_duration(budget.p95)}{pooled}{ratio}{floored}) night {job.night}"
        )
        key = (job.catalogue, job.night, job.label, DWELL)
        found.append(_record(*key, now, text, job.state, dwell_s=dwell, p95_s=budget.p95))
    return found


def group_stalls(
    raised: Sequence[AlertRecord], backends: Mapping[str, str | None], now: datetime, jobs: int = 3
) -> list[AlertRecord]:
    """``raised`` with every ``jobs`` or more dwell findings of one backend's jobs in one state of
    one night told as one incident finding (``backends``: label -> backend), in its place."""
    groups: dict[tuple[str, str, str, str], list[AlertRecord]] = defaultdict(list)
    for alert in raised:
        backend = backends.get(alert.label)
        if alert.kind == DWELL and backend:
            groups[(alert.catalogue, alert.night, backend, alert.state)].append(alert)
    out, told = [], set()
    for alert in raised:
        backend = backends.get(alert.label)
        key = (alert.catalogue, alert.night, backend or "", alert.state)
        group = groups.get(key, []) if alert.kind == DWELL else []
        if len(group) < jobs:
            out.append(alert)
            continue
        if key in told:
            continue
        told.add(key)
        labels = [a.label for a in group]
        named = first_few(labels)
        text = (
            f"{shown_name(alert.catalogue)}: {backend}: {len(labels)} jobs stalled in "
            f"{alert.state} ({named}) night {alert.night}, past twice their p95"
        )
        label = f"{backend}/{alert.state}#{BY}"
        out.append(_record(alert.catalogue, alert.night, label, INCIDENT, now, text, alert.state))
    return out


def stopped_findings(
    jobs: Iterable[InFlight],
    leases: Mapping[str, LeaseRow],
    last_activity: Mapping[tuple[str, str], datetime],
    now: datetime,
) -> list[AlertRecord]:
    """Nights with jobs in flight that no live lease covers.

    ``last_activity``: (catalogue, night) -> its newest transition, for every night that may
    hold the lease; a live lease covers the catalogue's newest night. A lease is live until
    ``expires_at`` passes (as the lease's own take-over rule: ``expires_at < now`` is expired).
    """
    nights: dict[tuple[str, str], list[InFlight]] = defaultdict(list)
    for job in jobs:
        nights[(job.catalogue, job.night)].append(job)
    found = []
    for (catalogue, night), stuck in sorted(nights.items()):
        lease = leases.get(catalogue)
        live = lease is not None and lease.expires_at >= now
        if live and _newest(catalogue, last_activity) in (None, night):
            continue
        if lease is None:
            why = "no night holds its lease"
        elif not live:
            ago = format_duration((now - lease.expires_at).total_seconds())
            why = f"its lease ({lease.owner}) expired {ago} ago"
        else:
            why = f"the live lease ({lease.owner}) runs a newer night"
        listed = ", ".join(f"{j.label} ({j.state})" for j in sorted(stuck, key=lambda j: j.label))
        text = (
            f"{shown_name(catalogue)} night {night} stopped watching: {why}; {len(stuck)} in "
            f"flight: {listed}"
        )
        found.append(_record(catalogue, night, "", STOPPED, now, text))
    return found


def stale_findings(
    catalogue: str,
    labels: Iterable[str],
    records: Mapping[str, LabelRecord],
    now: datetime,
    rules: Rules = Rules(),
) -> list[AlertRecord]:
    """Labels of ``catalogue`` without a success or a run for longer than ``rules.stale_s``."""
    found = []
    limit_s = rules.stale_s
    name = shown_name(catalogue)
    for label in sorted(set(labels)):
        record = records.get(label)
        if record is None:  # never finished: new, not stale
            continue
        since = record.last_success_at or record.first_at
        age = (now - since).total_seconds()
        if age <= limit_s:
            continue
        if record.last_at is not None and (now - record.last_at).total_seconds() <= limit_s:
            continue  # it ran on schedule and did not succeed: its night reported that
        ago = format_duration(age)
        if record.last_success_at is not None and record.last_success_night is not None:
            night, what = record.last_success_night, f"last success {ago} ago"
        else:
            night, what = record.first_night, f"never succeeded (first run {ago} ago)"
        limit = format_duration(limit_s)
        text = f"{name}/{label} stale: {what}, more than {limit} (night {night})"
        found.append(_record(catalogue, night, label, STALE, now, text))
    return found


def missed_findings(
    catalogue: str, missed: Iterable[tuple[str, datetime | None, str]], now: datetime
) -> list[AlertRecord]:
    """Each (night, slot, why) of ``catalogue`` named missed and never run since: ``missed``."""
    name = shown_name(catalogue)
    found = []
    for night, slot, why in sorted(missed, key=lambda m: m[0]):
        when = f"its {slot:%H:%M} UTC slot passed" if slot is not None else "its slot passed"
        text = f"{name} night {night} missed: {when} and it never ran ({why})"
        found.append(_record(catalogue, night, "", MISSED, now, text))
    return found


def streak_findings(
    outcomes: Iterable[NightOutcome],
    now: datetime,
    rules: Rules = Rules(),
    labels: Iterable[str] | None = None,
) -> list[AlertRecord]:
    """Labels whose latest ``rules.streak_nights`` nights were all not ok (only ``labels``)."""
    wanted = None if labels is None else set(labels)
    by_label: dict[tuple[str, str], list[NightOutcome]] = defaultdict(list)
    for outcome in outcomes:
        if wanted is None or outcome.label in wanted:
            by_label[(outcome.catalogue, outcome.label)].append(outcome)
    found = []
    for (catalogue, label), rows in sorted(by_label.items()):
        streak = _trailing_not_ok(sorted(rows, key=lambda r: r.night))
        if len(streak) < rules.streak_nights:
            continue
        start = streak[0].night
        shown = ", ".join(f"{r.night} {r.state}" for r in streak[-rules.streak_nights :])
        text = (
            f"{shown_name(catalogue)}/{label} not ok {len(streak)} nights in a row since "
            f"{start}: {shown}"
        )
        found.append(_record(catalogue, start, label, STREAK, now, text))
    return found


def _trailing_not_ok(rows: Sequence[NightOutcome]) -> list[NightOutcome]:
    """The newest rows after the last success, oldest first."""
    streak: list[NightOutcome] = []
    for row in reversed(rows):
        if row.state == JobState.SUCCEEDED:
            break
        streak.append(row)
    return streak[::-1]


def _newest(catalogue: str, last_activity: Mapping[tuple[str, str], datetime]) -> str | None:
    """The catalogue's night with the newest transition (latest night on a tie)."""
    mine = [(at, night) for (c, night), at in last_activity.items() if c == catalogue]
    return max(mine)[1] if mine else None


def _record(
    catalogue: str,
    night: str,
    label: str,
    kind: str,
    now: datetime,
    text: str,
    state: str = "",
    **measures: float,
) -> AlertRecord:
    return AlertRecord(
        catalogue=catalogue,
        night=night,
        label=label,
        kind=kind,
        level="alert",
        raised_by=BY,
        at=now,
        state=state,
        detail=text,
        **measures,
    )
