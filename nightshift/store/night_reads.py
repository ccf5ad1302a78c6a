"""A night's jobs as the ledger has them, for ``nightshift status`` and ``nightshift cancel``.

Read only: each job's row (state, attempts, external id, submitted, finished) and since when it
is in its state (its latest transition). A job in flight is in the state its latest transition
says (the row is written at its submit and its end only: ``queued`` for a job seen running).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING

import sqlalchemy as sa

from nightshift.states import PATH
from nightshift.store.ledger import JOBS_TABLE, TRANSITIONS_TABLE

if TYPE_CHECKING:
    from nightshift.store.missed_nights import MissedNight

__all__ = [
    "NightJob",
    "first_night",
    "named_fates",
    "night_jobs",
    "night_verdicts",
    "nights_run",
]


@dataclass(frozen=True)
class NightJob:
    """One job of a night: its ledger row and since when it is in its state."""

    label: str
    backend: str | None
    state: str
    since: datetime | None
    attempts: int
    external_id: str | None
    submitted_at: datetime | None
    finished_at: datetime | None
    detail: str | None


def night_jobs(engine: sa.Engine, catalogue: str, night: str) -> list[NightJob]:
    """Every job of ``night`` with a row in the ledger, by label."""
    jobs, t = JOBS_TABLE, TRANSITIONS_TABLE
    latest = (
        sa.select(t.c.label, sa.func.max(t.c.id).label("id"))
        .where(t.c.catalogue == catalogue, t.c.night == night)
        .group_by(t.c.label)
        .subquery()
    )
    since = (
        sa.select(t.c.label, t.c.at, t.c.to_state, t.c.attempt)
        .join(latest, t.c.id == latest.c.id)
        .subquery()
    )
    # a job on its way (its row as its submit wrote it): in the state its try was last seen in,
    # when that is further along (a row `queued` with its id, whose `submitted` transition is
    # not written yet, stays `queued`: in flight, a target of `nightshift cancel`)
    rank = {state: i for i, state in enumerate(PATH)}
    on_its_way = sa.and_(
        jobs.c.state.in_(PATH),
        since.c.to_state.in_(PATH),
        since.c.attempt == jobs.c.attempts,
        sa.case(rank, value=since.c.to_state) >= sa.case(rank, value=jobs.c.state),
    )
    query = (
        sa.select(
            jobs.c.label,
            jobs.c.backend,
            sa.case((on_its_way, since.c.to_state), else_=jobs.c.state),
            since.c.at,
            jobs.c.attempts,
            jobs.c.external_id,
            jobs.c.submitted_at,
            jobs.c.finished_at,
            jobs.c.detail,
        )
        .outerjoin(since, since.c.label == jobs.c.label)
        .where(jobs.c.catalogue == catalogue, jobs.c.night == night)
        .order_by(jobs.c.label)
    )
    with engine.begin() as conn:
        return [_latest(NightJob(*row)) for row in conn.execute(query)]


def _latest(job: NightJob) -> NightJob:
    """Since its latest try: a state entered again (a step skipped again by a retry) writes no
    transition, but its row's end moves on."""
    if job.finished_at is not None and (job.since is None or job.finished_at > job.since):
        return replace(job, since=job.finished_at)
    return job


def nights_run(engine: sa.Engine, catalogue: str, since: str = "") -> set[str]:
    """The nights from ``since`` on that have a job in the ledger (they ran, in part or all)."""
    jobs = JOBS_TABLE.c
    query = (
        sa.select(jobs.night)
        .where(jobs.catalogue == catalogue, jobs.night >= since)
        .group_by(jobs.night)
    )
    with engine.begin() as conn:
        return {row.night for row in conn.execute(query)}


def night_verdicts(
    engine: sa.Engine, catalogue: str, nights: list[str], only: list[str] | None = None
) -> dict[str, str]:
    """Each of ``nights`` with jobs in the ledger (``only`` these labels) -> ``ok`` (every job
    succeeded), ``running`` (a job not yet in a final state) or ``not ok``."""
    from nightshift.states import FINAL

    jobs = JOBS_TABLE.c
    query = sa.select(jobs.night, jobs.state).where(
        jobs.catalogue == catalogue, jobs.night.in_(nights)
    )
    if only:
        query = query.where(jobs.label.in_(only))
    states: dict[str, set[str]] = {}
    with engine.begin() as conn:
        for row in conn.execute(query):
            states.setdefault(row.night, set()).add(row.state)
    out = {}
    for night, seen in states.items():
        if seen - FINAL:
            out[night] = "running"
        else:
            out[night] = "ok" if seen == {"succeeded"} else "not ok"
    return out


def first_night(engine: sa.Engine, catalogue: str) -> str | None:
    """The catalogue's first night in the ledger (None: it never ran)."""
    jobs = JOBS_TABLE.c
    with engine.begin() as conn:
        query = sa.select(sa.func.min(jobs.night)).where(jobs.catalogue == catalogue)
        return conn.execute(query).scalar_one_or_none()


def named_fates(
    engine: sa.Engine, catalogue: str, since: str, until: str | None = None
) -> list[tuple[MissedNight, str]]:
    """The nights named missed from ``since`` to ``until`` (None: on), each with what became of
    it: ``missed`` (never run), or its verdict once run (``night_verdicts``)."""
    from nightshift.store.missed_nights import MissedNights

    named = [
        m for m in MissedNights(engine, catalogue).all(since) if until is None or m.night <= until
    ]
    verdicts = night_verdicts(engine, catalogue, [m.night for m in named])
    return [(m, verdicts.get(m.night, "missed")) for m in named]
