"""What the watchdog reads from the ledger: jobs in flight, leases, outcomes, labels' successes.

Small read-only queries on the ledger's ``jobs``, ``transitions`` and ``leases`` tables (named
here by the columns they read; the schema is the migrations'), on SQLite and PostgreSQL. They
need no live night: a crashed night's rows are all there is to go on.

A job is in flight when its ``jobs`` row is neither an outcome nor ``lost`` (a job the night
gave up on and already reported). Its state is its newest transition's (the ``jobs`` row keeps
only the submit state), entered at that transition's time. Rows from before catalogues (``""``)
belong to no catalogue a night runs today, and are left out.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

import sqlalchemy as sa

from nightshift.states import FINAL, JobState
from nightshift.store.db import UTCDateTime
from nightshift.store.ledger import BEFORE_CATALOGUES
from nightshift.watchdog.checks import InFlight, LabelRecord, LeaseRow, NightOutcome

__all__ = ["DONE", "in_flight", "label_records", "leases", "night_activity", "outcomes"]

# a night's last word on a job: its outcome, or lost (failed tonight, kept for a rerun)
DONE = frozenset(FINAL | {JobState.LOST})

_jobs = sa.table(
    "jobs",
    sa.column("catalogue", sa.String),
    sa.column("night", sa.String),
    sa.column("label", sa.String),
    sa.column("backend", sa.String),
    sa.column("state", sa.String),
    sa.column("submitted_at", UTCDateTime()),
    sa.column("finished_at", UTCDateTime()),
)
_transitions = sa.table(
    "transitions",
    sa.column("id", sa.Integer),
    sa.column("catalogue", sa.String),
    sa.column("night", sa.String),
    sa.column("label", sa.String),
    sa.column("backend", sa.String),
    sa.column("to_state", sa.String),
    sa.column("at", UTCDateTime()),
)
_leases = sa.table(
    "leases",
    sa.column("key", sa.String),
    sa.column("owner", sa.String),
    sa.column("expires_at", UTCDateTime()),
)


def in_flight(engine: sa.Engine, catalogue: str | None = None) -> list[InFlight]:
    """Jobs in flight (one catalogue's, or every one's), each in its newest transition's state."""
    j, t, t2 = _jobs.c, _transitions.c, _transitions.alias("newest").c
    newest = (
        sa.select(sa.func.max(t2.id))
        .where(t2.catalogue == j.catalogue, t2.night == j.night, t2.label == j.label)
        .correlate(_jobs)
        .scalar_subquery()
    )
    query = (
        sa.select(j.catalogue, j.night, j.label, j.backend, j.state, j.submitted_at)
        .add_columns(t.backend.label("t_backend"), t.to_state, t.at)
        .select_from(_jobs.outerjoin(_transitions, t.id == newest))
        .where(j.state.not_in(sorted(DONE)), j.catalogue != BEFORE_CATALOGUES)
        .order_by(j.catalogue, j.night, j.label)
    )
    if catalogue is not None:
        query = query.where(j.catalogue == catalogue)
    found = []
    with engine.begin() as conn:
        for row in conn.execute(query):
            state, entered_at = row.to_state or row.state, row.at or row.submitted_at
            if entered_at is None or state in DONE:  # nothing to measure, or the night's done
                continue
            backend = row.t_backend or row.backend
            found.append(InFlight(row.catalogue, row.night, row.label, backend, state, entered_at))
    return found


def leases(engine: sa.Engine) -> dict[str, LeaseRow]:
    """Every lease row by key (a catalogue's), expired ones included."""
    with engine.begin() as conn:
        rows = conn.execute(sa.select(_leases.c.key, _leases.c.owner, _leases.c.expires_at))
        return {row.key: LeaseRow(row.key, row.owner, row.expires_at) for row in rows}


def night_activity(
    engine: sa.Engine, catalogues: Iterable[str], since_night: str
) -> dict[tuple[str, str], datetime]:
    """(catalogue, night) -> the newest transition of each night on or after ``since_night``."""
    wanted = sorted(set(catalogues))
    if not wanted:
        return {}
    t = _transitions.c
    query = (
        sa.select(t.catalogue, t.night, sa.func.max(t.at).label("last"))
        .where(t.catalogue.in_(wanted), t.night >= since_night)
        .group_by(t.catalogue, t.night)
    )
    with engine.begin() as conn:
        return {(row.catalogue, row.night): _aware(row.last) for row in conn.execute(query)}


def outcomes(
    engine: sa.Engine, since_night: str, catalogue: str | None = None
) -> list[NightOutcome]:
    """How each label's job ended, night by night, for nights on or after ``since_night``."""
    j = _jobs.c
    query = (
        sa.select(j.catalogue, j.night, j.label, j.state)
        .where(j.state.in_(sorted(DONE)), j.night >= since_night)
        .where(j.catalogue != BEFORE_CATALOGUES)
        .order_by(j.catalogue, j.label, j.night)
    )
    if catalogue is not None:
        query = query.where(j.catalogue == catalogue)
    with engine.begin() as conn:
        return [NightOutcome(r.catalogue, r.night, r.label, r.state) for r in conn.execute(query)]


def label_records(engine: sa.Engine, catalogue: str) -> dict[str, LabelRecord]:
    """Each label of ``catalogue`` that finished: its first run, last success and last run."""
    j = _jobs.c
    when = sa.func.coalesce(j.submitted_at, j.finished_at)
    success = j.state == JobState.SUCCEEDED
    query = (
        sa.select(
            j.label,
            sa.func.min(j.night).label("first_night"),
            sa.func.min(when).label("first_at"),
            sa.func.max(sa.case((success, j.night))).label("success_night"),
            sa.func.max(sa.case((success, j.finished_at))).label("success_at"),
            sa.func.max(j.night).label("last_night"),
            sa.func.max(sa.func.coalesce(j.finished_at, j.submitted_at)).label("last_at"),
        )
        .where(j.catalogue == catalogue, j.state.in_(sorted(DONE)))
        .group_by(j.label)
    )
    found = {}
    with engine.begin() as conn:
        for row in conn.execute(query):
            if row.first_at is None:
                continue
            found[row.label] = LabelRecord(
                catalogue,
                row.label,
                row.first_night,
                _aware(row.first_at),
                row.success_night,
                _aware(row.success_at) if row.success_at is not None else None,
                row.last_night,
                _aware(row.last_at) if row.last_at is not None else None,
            )
    return found


def missed_never_run(
    engine: sa.Engine, catalogue: str, since: str
) -> list[tuple[str, datetime | None, str]]:
    """The nights of ``catalogue`` from ``since`` on named missed and not run since: (night,
    slot, why)."""
    from nightshift.store.night_reads import named_fates

    fates = named_fates(engine, catalogue, since)
    return [(m.night, m.scheduled_at, m.reason) for m, fate in fates if fate == "missed"]


def _aware(value: datetime | str) -> datetime:
    """An aggregate's datetime, aware: SQLite keeps naive UTC (and may hand back its text)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
