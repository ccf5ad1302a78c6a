"""A month of made-up past nights for a ledger, so budgets are learned, not guessed.

``generate`` is pure: from each job's usual night (``Usual``: the seconds its external job
usually spends in each state) it makes the transitions and job rows past nights would have
written, as the night writes them: ``submitting`` when the submit begins, ``submitted`` when it
returned, then each state the watcher saw at a poll (its backoff delays plus a log-normal
latency; a short state between two polls is never seen), then the final state dated at the poll
that saw it. Each state's true length is log-normal around the usual one; now and then a night
fails. Seeded: the same arguments give the same rows. ``write`` inserts them in two statements.
"""

from __future__ import annotations

import math
import random
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import sqlalchemy as sa

from nightshift.backoff import Backoff
from nightshift.files import label_filename
from nightshift.states import JobState
from nightshift.store.db import UTCDateTime
from nightshift.store.ledger import Ledger

__all__ = ["Habits", "History", "Usual", "generate", "seed", "write"]

SUBMITTING, SUBMITTED = JobState.SUBMITTING.value, JobState.SUBMITTED.value


@dataclass(frozen=True)
class Usual:
    """One job's usual night: seconds its external job spends in each state, in order."""

    label: str
    backend: str
    states: tuple[tuple[str, float], ...]  # e.g. (("queued", 0.5), ("running", 3.0))
    start_s: float = 0.0  # when in the night it is usually submitted (after what it needs)


@dataclass(frozen=True)
class Habits:
    """How the past nights went: their polling, their spread, how often they failed."""

    poll: Backoff = field(default_factory=lambda: Backoff(initial=0.5, factor=2.0, max=2.0))
    starts_at: time = time(1, 0)  # UTC: when each past night began
    sigma: float = 0.3  # log-normal spread of each state's true length
    submit_s: float = 0.3  # median seconds of a submit (a CLI call, an upload, a spawn)
    latency_s: float = 0.2  # median seconds of a status poll
    latency_sigma: float = 0.6  # log-normal spread of both
    failure_rate: float = 0.04  # chance a job-night fails while running
    seed: int = 8


@dataclass(frozen=True)
class History:
    """Rows for the ledger's ``transitions`` and ``jobs`` tables, without their catalogue."""

    transitions: list[dict[str, Any]]
    jobs: list[dict[str, Any]]


def generate(
    usual: Sequence[Usual], tonight: date, nights: int = 30, habits: Habits | None = None
) -> History:
    """The ``nights`` nights before ``tonight`` (oldest first) of every job in ``usual``."""
    habits = habits or Habits()
    rng = random.Random(habits.seed)
    transitions: list[dict[str, Any]] = []
    jobs: list[dict[str, Any]] = []
    for back in range(nights, 0, -1):
        day = tonight - timedelta(days=back)
        night = day.isoformat()
        start = datetime.combine(day, habits.starts_at, tzinfo=UTC)
        run_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        for job in usual:
            begin = start + timedelta(seconds=job.start_s * _spread(rng, habits.sigma))
            rows, record = _job_night(rng, habits, job, night, run_id, begin)
            transitions.extend(rows)
            jobs.append(record)
    return History(transitions, jobs)


def _spread(rng: random.Random, sigma: float) -> float:
    return math.exp(rng.gauss(0.0, sigma))


def _external_id(rng: random.Random, job: Usual) -> str:
    token = f"{rng.getrandbits(48):012x}"
    if job.backend == "cli":
        return f"agy-{token}"
    if job.backend == "gemini_batch":
        return f"batches/h{token}"
    return f"{label_filename(job.label)}-{token[:8]}"


def _job_night(
    rng: random.Random, habits: Habits, job: Usual, night: str, run_id: str, begin: datetime
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One job's rows of one night: its transitions and its job record."""

    external_id = _external_id(rng, job)
    submitted = habits.submit_s * _spread(rng, habits.latency_sigma)
    # the external job's true timeline, in seconds from the submit's return
    ends, elapsed = [], 0.0
    for state, seconds in job.states:
        elapsed += seconds * _spread(rng, habits.sigma)
        ends.append((state, elapsed))
    final = JobState.SUCCEEDED.value
    if rng.random() < habits.failure_rate:
        final = "failed"
    if final == "failed" and ends:
        # it dies part way through its last state (a job with none fails at its first look)
        state, end = ends[-1]
        before = ends[-2][1] if len(ends) > 1 else 0.0
        ends[-1] = (state, before + (end - before) * rng.uniform(0.1, 0.9))
    seen: list[tuple[str, float]] = [(SUBMITTING, 0.0), (SUBMITTED, submitted)]
    # the polls: a long state at the poll cap is hundreds of them, each one latency draw. The
    # polls only move forward, and so do the states' ends: the state a poll sees is found by
    # walking on from the last poll's, and the delays stop being computed once at their cap
    bounds = [(state, end + submitted) for state, end in ends]
    at, checks, current, now = submitted, 0, 0, SUBMITTED
    delay, capped = habits.poll.delay, habits.poll.jitter == 0
    gauss, median, sigma = rng.gauss, habits.latency_s, habits.latency_sigma
    wait = delay(0)
    while now != final:
        at += wait + median * math.exp(gauss(0.0, sigma))  # a poll's latency
        checks += 1
        if not capped or wait < habits.poll.max:
            wait = delay(checks)
        while current < len(bounds) and at >= bounds[current][1]:
            current += 1
        seen_now = bounds[current][0] if current < len(bounds) else final
        if seen_now != now:
            now = seen_now
            seen.append((now, at))
    rows = []
    previous: tuple[str, float] | None = None
    for state, offset in seen:
        rows.append(
            {
                "night": night,
                "run_id": run_id,
                "label": job.label,
                "backend": job.backend,
                "external_id": None if state == SUBMITTING else external_id,
                "from_state": previous[0] if previous else None,
                "to_state": state,
                "at": begin + timedelta(seconds=offset),
                "dwell_s": offset - previous[1] if previous else None,
                "attempt": 1,
            }
        )
        previous = (state, offset)
    record = {
        "night": night,
        "label": job.label,
        "backend": job.backend,
        "external_id": external_id,
        "state": final,
        "attempts": 1,
        "submitted_at": begin,
        "finished_at": rows[-1]["at"],
        "detail": "exit code 1" if final == "failed" else None,
        "data": None,
    }
    return rows, record


_COLUMNS = {
    "transitions": "night run_id label backend external_id from_state to_state at dwell_s attempt",
    "jobs": "night label backend external_id state attempts submitted_at finished_at detail data",
}
_TYPES: dict[str, Any] = {
    "at": UTCDateTime(),
    "submitted_at": UTCDateTime(),
    "finished_at": UTCDateTime(),
    "dwell_s": sa.Float(),
    "attempt": sa.Integer(),
    "attempts": sa.Integer(),
}


def _table(name: str) -> sa.TableClause:
    columns = [sa.column(c, _TYPES.get(c, sa.String())) for c in _COLUMNS[name].split()]
    return sa.table(name, sa.column("catalogue", sa.String()), *columns)


def write(ledger: Ledger, history: History) -> None:
    """Insert ``history`` as ``ledger``'s catalogue's rows, in one transaction."""
    with ledger.engine.begin() as conn:
        for name, rows in (("transitions", history.transitions), ("jobs", history.jobs)):
            if rows:
                conn.execute(sa.insert(_table(name)), _with_catalogue(ledger.catalogue, rows))


def _with_catalogue(catalogue: str, rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"catalogue": catalogue, **row} for row in rows]


def seed(ledger: Ledger, usual: Sequence[Usual], tonight: date, nights: int = 30) -> list[str]:
    """Write the past nights of each job in ``usual`` that has none yet; the labels written.

    A ledger seeded before (a sandbox used again) keeps its history: a job is left alone once
    any of the ``nights`` before ``tonight`` holds a dwell of it.
    """
    first = datetime.combine(tonight - timedelta(days=nights), time(0), tzinfo=UTC)
    past = ledger.history(first)
    known = set(past.loc[past["night"] < tonight.isoformat(), "label"])
    fresh = [job for job in usual if job.label not in known]
    write(ledger, generate(fresh, tonight, nights))
    return [job.label for job in fresh]
