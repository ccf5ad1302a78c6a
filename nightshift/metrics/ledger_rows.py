"""The metrics' rows, read from the ledger database with SQL aggregates (SQLite and PostgreSQL).

Every catalogue's rows (not those from before catalogues); one query per family, so a ledger
with a million transitions costs a few grouped scans, not a million rows in Python.
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa

from nightshift.dwells import MAX_DWELL_S
from nightshift.metrics.families import (
    DWELL_BUCKETS,
    AlertCount,
    DwellBuckets,
    JobLatest,
    MetricsData,
    RunCount,
    night_severity,
)
from nightshift.states import JobState
from nightshift.store.alert_log import ALERTS_TABLE, INCIDENT
from nightshift.store.ledger import BEFORE_CATALOGUES, JOBS_TABLE, TRANSITIONS_TABLE
from nightshift.store.missed_nights import MISSED_NIGHTS_TABLE

__all__ = ["read_metrics"]


def read_metrics(engine: sa.Engine) -> MetricsData:
    """Every family's rows, as the ledger holds them now."""
    with engine.begin() as conn:
        return MetricsData(
            runs=_runs(conn),
            latest=_latest(conn),
            dwells=_dwells(conn),
            alerts=_alerts(conn),
            incidents=_incidents(conn),
            severities=_severities(conn),
            spend=_spend(conn),
            missed=_missed(conn),
        )


def _runs(conn: sa.Connection) -> list[RunCount]:
    j = JOBS_TABLE.c
    query = (
        sa.select(j.catalogue, j.label, j.state, sa.func.count())
        .where(j.catalogue != BEFORE_CATALOGUES)
        .group_by(j.catalogue, j.label, j.state)
    )
    return [RunCount(*row) for row in conn.execute(query)]


def _latest(conn: sa.Connection) -> list[JobLatest]:
    j = JOBS_TABLE.c
    finished = j.finished_at.is_not(None) & (j.catalogue != BEFORE_CATALOGUES)
    last = (
        sa.select(
            j.catalogue,
            j.label,
            sa.func.max(j.finished_at).label("last_run"),
            sa.func.max(sa.case((j.state == JobState.SUCCEEDED, j.finished_at))).label("last_ok"),
        )
        .where(finished)
        .group_by(j.catalogue, j.label)
        .subquery()
    )
    # the latest run's own row, for its duration (a tie on finished_at: any of them)
    query = (
        sa.select(last, j.submitted_at)
        .join(
            JOBS_TABLE,
            (j.catalogue == last.c.catalogue)
            & (j.label == last.c.label)
            & (j.finished_at == last.c.last_run),
        )
        .order_by(last.c.catalogue, last.c.label)
    )
    out: dict[tuple[str, str], JobLatest] = {}
    for row in conn.execute(query):
        last_run = _aware(row.last_run)
        submitted = _aware(row.submitted_at)
        assert last_run is not None  # the join matched on it
        duration = None if submitted is None else (last_run - submitted).total_seconds()
        out[(row.catalogue, row.label)] = JobLatest(
            row.catalogue, row.label, last_run, duration, _aware(row.last_ok)
        )
    return list(out.values())


def _dwells(conn: sa.Connection) -> list[DwellBuckets]:
    t = TRANSITIONS_TABLE.c
    buckets = [
        sa.func.sum(sa.case((t.dwell_s <= bound, 1), else_=0)).label(f"b{i}")
        for i, bound in enumerate(DWELL_BUCKETS)
    ]
    query = (
        sa.select(
            t.catalogue, t.label, t.from_state, sa.func.count(), sa.func.sum(t.dwell_s), *buckets
        )
        .where(t.catalogue != BEFORE_CATALOGUES)
        .where(t.from_state.is_not(None), t.dwell_s.is_not(None))
        .where(t.dwell_s.between(0.0, MAX_DWELL_S))  # clocks that disagree: not a sample
        .group_by(t.catalogue, t.label, t.from_state)
    )
    return [
        DwellBuckets(row[0], row[1], row[2], tuple(int(n) for n in row[5:]), row[3], float(row[4]))
        for row in conn.execute(query)
    ]


def _alerts(conn: sa.Connection) -> list[AlertCount]:
    a = ALERTS_TABLE.c
    query = (
        sa.select(a.catalogue, a.label, a.level, sa.func.count())
        .where(a.kind != INCIDENT)  # a job's levels: an incident is counted on its own
        .group_by(a.catalogue, a.label, a.level)
    )
    return [AlertCount(*row) for row in conn.execute(query)]


def _incidents(conn: sa.Connection) -> dict[tuple[str, str, str], int]:
    """(catalogue, backend, state) -> incidents opened (their opening rows, not their ends)."""
    a = ALERTS_TABLE.c
    query = sa.select(a.catalogue, a.label, a.state).where(a.kind == INCIDENT, a.level != "over")
    counts: dict[tuple[str, str, str], int] = {}
    for catalogue, key, state in conn.execute(query):
        backend = key.split("/", 1)[0]  # cli/queued#1
        counts[(catalogue, backend, state)] = counts.get((catalogue, backend, state), 0) + 1
    return counts


def _severities(conn: sa.Connection) -> dict[str, str]:
    j = JOBS_TABLE.c
    query = sa.select(j.catalogue, j.state).join(*_latest_night())
    states: dict[str, list[str]] = {}
    for catalogue, state in conn.execute(query):
        states.setdefault(catalogue, []).append(state)
    return {catalogue: night_severity(s) for catalogue, s in states.items()}


def _spend(conn: sa.Connection) -> dict[str, float]:
    """Each catalogue's latest night: what its paid jobs spent and still commit, in USD."""
    j = JOBS_TABLE.c
    usd = sa.func.sum(sa.func.coalesce(j.spent_usd, 0.0) + sa.func.coalesce(j.committed_usd, 0.0))
    query = (
        sa.select(j.catalogue, usd)
        .join(*_latest_night())
        .where(sa.or_(j.spent_usd.is_not(None), j.committed_usd.is_not(None)))
        .group_by(j.catalogue)
    )
    return {catalogue: float(total) for catalogue, total in conn.execute(query)}


def _missed(conn: sa.Connection) -> dict[tuple[str, str], int]:
    """(catalogue, "missed" | "backfilled") -> how many nights named missed are so."""
    m, j = MISSED_NIGHTS_TABLE.c, JOBS_TABLE.c
    ran = sa.exists().where(j.catalogue == m.catalogue, j.night == m.night)
    became = sa.case((ran, "backfilled"), else_="missed")
    query = sa.select(m.catalogue, became, sa.func.count()).group_by(m.catalogue, became)
    return {(catalogue, state): int(n) for catalogue, state, n in conn.execute(query)}


def _latest_night() -> tuple[sa.Subquery, sa.ColumnElement[bool]]:
    """The join onto each catalogue's latest night: the subquery and the on-clause."""
    j = JOBS_TABLE.c
    latest = (
        sa.select(j.catalogue, sa.func.max(j.night).label("night"))
        .where(j.catalogue != BEFORE_CATALOGUES)
        .group_by(j.catalogue)
        .subquery()
    )
    return latest, (j.catalogue == latest.c.catalogue) & (j.night == latest.c.night)


def _aware(value: datetime | None) -> datetime | None:
    """An aggregate's datetime as aware UTC (the column type usually does it already)."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)
