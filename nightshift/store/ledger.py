"""The dwell ledger and job records: every state change of every job, in SQLite or PostgreSQL.

``transitions`` holds one row per state change (never sampled) with the seconds spent in the
previous state; ``jobs`` holds one row per (catalogue, night, label) so a rerun of a night can
re-attach to a job still running, skip jobs that succeeded and redo only the failed ones. A Ledger
reads and writes one catalogue's rows only; rows from before catalogues (``""``) match none. The
schema is Alembic's (``nightshift.store.migrations``), brought up to date when a Ledger is made.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from nightshift.dwells import measured_dwell
from nightshift.states import JobState
from nightshift.store import migrations
from nightshift.store.db import UTCDateTime, make_engine
from nightshift.usual import Usual

if TYPE_CHECKING:  # a night never reads history as a frame: pandas comes with history()
    import pandas as pd

__all__ = [
    "AT",
    "BACKEND",
    "BEFORE_CATALOGUES",
    "CATALOGUE",
    "DWELL_S",
    "HISTORY_COLUMNS",
    "JOBS_TABLE",
    "LABEL",
    "NIGHT",
    "RUN_ID",
    "STATE",
    "TRANSITIONS_TABLE",
    "JobRecord",
    "Ledger",
    "Transition",
    "TransitionRow",
    "UTCDateTime",
    "make_engine",
]

# columns of Ledger.history(): one row per completed dwell
NIGHT = "night"
RUN_ID = "run_id"
LABEL = "label"
BACKEND = "backend"
STATE = "state"  # the state the job dwelt in (the transition's from_state)
DWELL_S = "dwell_s"  # seconds spent in STATE
AT = "at"  # when the job left STATE (datetime64[us, UTC])
HISTORY_COLUMNS = [NIGHT, RUN_ID, LABEL, BACKEND, STATE, DWELL_S, AT]
CATALOGUE = "catalogue"  # first column of Ledger.history(all_catalogues=True)

BEFORE_CATALOGUES = ""  # the catalogue of rows written before jobs were keyed by catalogue
_COST = "cost_usd"  # what a job's results say it cost (backends.base.COST_USD)

# what migrations build (tests compare the two); the schema itself lives in tasks/migrations
_metadata = sa.MetaData()


def _catalogue_column() -> sa.Column[str]:
    return sa.Column("catalogue", sa.String(300), nullable=False, server_default=BEFORE_CATALOGUES)


_transitions = sa.Table(
    "transitions",
    _metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    _catalogue_column(),
    sa.Column("night", sa.String(32), nullable=False),
    sa.Column("run_id", sa.String(64), nullable=False),
    sa.Column("label", sa.String(200), nullable=False),
    sa.Column("backend", sa.String(64), nullable=False),
    sa.Column("external_id", sa.String(500), nullable=True),
    sa.Column("from_state", sa.String(32), nullable=True),
    sa.Column("to_state", sa.String(32), nullable=False),
    sa.Column("at", UTCDateTime(), nullable=False),
    sa.Column("dwell_s", sa.Float, nullable=True),
    sa.Column("attempt", sa.Integer, nullable=True),  # None: written before revision 0003
    sa.Index("ix_transitions_catalogue_night_label", "catalogue", "night", "label", "id"),
    sa.Index("ix_transitions_at", "at"),
)

_jobs = sa.Table(
    "jobs",
    _metadata,
    _catalogue_column(),
    sa.Column("night", sa.String(32), nullable=False),
    sa.Column("label", sa.String(200), nullable=False),
    sa.Column("backend", sa.String(64), nullable=True),  # None: failed before submit
    sa.Column("external_id", sa.String(500), nullable=True),
    sa.Column("state", sa.String(32), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False, default=0),
    sa.Column("submitted_at", UTCDateTime(), nullable=True),
    sa.Column("finished_at", UTCDateTime(), nullable=True),
    sa.Column("detail", sa.Text, nullable=True),
    sa.Column("data", sa.Text, nullable=True),  # JSON object
    # what the night's ended tries of the job cost, and what its try out there may (0009)
    sa.Column("committed_usd", sa.Float, nullable=True),
    sa.Column("spent_usd", sa.Float, nullable=True),
    # the trace of the night run that began its try, and its parent span (0012; None: untraced)
    sa.Column("trace_id", sa.String(32), nullable=True),
    sa.Column("trace_parent", sa.String(16), nullable=True),
    sa.PrimaryKeyConstraint("catalogue", "night", "label", name="pk_jobs"),
    sa.Index("ix_jobs_catalogue_label_state", "catalogue", "label", "state"),
)

# the tables, for readers aggregating across catalogues in SQL (metrics); writes go via Ledger
TRANSITIONS_TABLE = _transitions
JOBS_TABLE = _jobs

# every column but the catalogue, which a Ledger already knows
_TRANSITION_FIELDS = [c for c in _transitions.c if c.name != "catalogue"]
_JOB_FIELDS = [c for c in _jobs.c if c.name != "catalogue"]


# a transition's arguments: night, run_id, label, backend, external_id, to_state, at, attempt
TransitionRow = tuple[str, str, str, str, str | None, str, datetime | None, int | None]


@dataclass(frozen=True)
class Transition:
    """One row of the dwell ledger."""

    id: int
    night: str
    run_id: str
    label: str
    backend: str
    external_id: str | None
    from_state: str | None
    to_state: str
    at: datetime
    dwell_s: float | None  # None: the first of a job, or of a new attempt (see Ledger.transition)
    attempt: int | None = None  # None: unknown (written before revision 0003, or not given)


@dataclass(frozen=True)
class JobRecord:
    """What we last knew about one job of one night."""

    night: str
    label: str
    backend: str | None
    external_id: str | None
    state: str
    attempts: int
    submitted_at: datetime | None
    finished_at: datetime | None
    detail: str | None
    data: dict[str, Any] | None
    committed_usd: float | None = None  # the expected cost of its try out there (paid jobs)
    spent_usd: float | None = None  # what its ended tries of this night cost
    trace_id: str | None = None  # the trace its try belongs to (32 hex digits; None: untraced)
    trace_parent: str | None = None  # the span its try hangs under (16 hex digits)


class Ledger:
    """One catalogue's dwell ledger and job records behind a database URL; thread-safe."""

    def __init__(self, url: str, catalogue: str = "default") -> None:
        """Upgrade the schema if needed; BEFORE_CATALOGUES reads the rows of older Nightshifts."""
        self.url = url
        self.catalogue = catalogue
        self.engine = make_engine(url)
        # (from, to) when this Ledger upgraded the schema, for the caller to say so
        self.schema_upgrade = migrations.upgrade(self.engine)
        self._lock = threading.Lock()
        # (night, label) -> (state, at, attempt) of the job's latest transition written here
        self._last: dict[tuple[str, str], tuple[str, datetime, int | None]] = {}

    def close(self) -> None:
        """Release the engine's connections."""
        self.engine.dispose()

    def transition(
        self,
        night: str,
        run_id: str,
        label: str,
        backend: str,
        external_id: str | None,
        to_state: str,
        at: datetime | None = None,
        attempt: int | None = None,
    ) -> None:
        """Record that a job entered ``to_state``; a repeat of its current state is ignored.

        A dwell is measured only within one attempt: the first transition of a new attempt keeps
        ``from_state`` (the chain stays readable) but has ``dwell_s`` None, so the idle gap
        before a resubmission is no dwell. An unknown attempt (None) on either side measures.
        """
        self.transitions([(night, run_id, label, backend, external_id, to_state, at, attempt)])

    def transitions(self, rows: Iterable[TransitionRow]) -> None:
        """Several ``transition`` calls (their arguments, in order) in one transaction."""
        written: dict[tuple[str, str], tuple[str, datetime, int | None]] = {}
        with self._lock:
            self._write_transitions(rows, written)
            self._last.update(written)  # once committed

    def _write_transitions(
        self,
        rows: Iterable[TransitionRow],
        written: dict[tuple[str, str], tuple[str, datetime, int | None]],
    ) -> None:
        with self.engine.begin() as conn:
            for night, run_id, label, backend, external_id, to_state, at, attempt in rows:
                key = (night, label)
                previous = written.get(key) or self._last.get(key)
                if previous is None:
                    row = conn.execute(
                        sa.select(
                            _transitions.c.to_state, _transitions.c.at, _transitions.c.attempt
                        )
                        .where(*self._mine(_transitions), _transitions.c.night == night)
                        .where(_transitions.c.label == label)
                        .order_by(_transitions.c.id.desc())
                        .limit(1)
                    ).first()
                    previous = (row.to_state, row.at, row.attempt) if row else None
                at = _utc(at or _now())
                to_state = str(to_state)
                new_attempt = (
                    previous is not None
                    and None not in (attempt, previous[2])
                    and attempt != previous[2]
                )
                if previous is not None and previous[0] == to_state and not new_attempt:
                    written[key] = previous
                    continue
                from_state, dwell_s = None, None
                if previous is not None:
                    from_state = previous[0]
                if previous is not None and not new_attempt:
                    # kept as measured when two hosts' clocks disagree (learning leaves it out)
                    dwell_s = measured_dwell((at - previous[1]).total_seconds())
                conn.execute(
                    sa.insert(_transitions).values(
                        catalogue=self.catalogue,
                        night=night,
                        run_id=run_id,
                        label=label,
                        backend=backend,
                        external_id=external_id,
                        from_state=from_state,
                        to_state=to_state,
                        at=at,
                        dwell_s=dwell_s,
                        attempt=attempt,
                    )
                )
                written[key] = (to_state, at, attempt)

    def forget(self, keys: Iterable[tuple[str, str]]) -> None:
        """Read these (night, label)'s last transitions from the database again (a commit
        whose answer was lost may have gone through)."""
        with self._lock:
            for key in keys:
                self._last.pop(key, None)

    def dwells(self, night: str, label: str | None = None) -> list[Transition]:
        """Every transition of ``night`` (optionally one job's), in the order they were written."""
        query = sa.select(*_TRANSITION_FIELDS).where(
            *self._mine(_transitions), _transitions.c.night == night
        )
        if label is not None:
            query = query.where(_transitions.c.label == label)
        with self.engine.begin() as conn:
            rows = conn.execute(query.order_by(_transitions.c.id)).all()
        return [Transition(**row._asdict()) for row in rows]

    def history(self, since: datetime, *, all_catalogues: bool = False) -> pd.DataFrame:
        """Completed dwells that ended at or after ``since``, as HISTORY_COLUMNS.

        ``all_catalogues``: every catalogue's (not those from before catalogues), with a first
        ``catalogue`` column: the frame ``nightshift.budgets.table`` reads.
        """
        import pandas as pd

        t = _transitions
        if all_catalogues:
            scope: tuple[sa.ColumnElement[bool], ...] = (t.c.catalogue != BEFORE_CATALOGUES,)
        else:
            scope = self._mine(t)
        fields = [
            t.c.night,
            t.c.run_id,
            t.c.label,
            t.c.backend,
            t.c.from_state,
            t.c.dwell_s,
            t.c.at,
        ]
        query = self._completed_dwells(since, scope, [t.c.catalogue] if all_catalogues else [])
        query = query.add_columns(*fields)
        columns = [CATALOGUE, *HISTORY_COLUMNS] if all_catalogues else HISTORY_COLUMNS
        with self.engine.begin() as conn:
            frame = pd.DataFrame([tuple(row) for row in conn.execute(query)], columns=columns)
        for column in columns:
            if column not in (DWELL_S, AT):
                frame[column] = frame[column].astype(str)
        frame[DWELL_S] = frame[DWELL_S].astype(float)
        frame[AT] = pd.to_datetime(frame[AT], utc=True).dt.as_unit("us")
        return frame

    def dwell_rows(self, since: datetime) -> list[tuple[str, str, str, float]]:
        """This catalogue's completed dwells that ended at or after ``since``, as ``(night,
        label, state, dwell_s)`` tuples: what a night reads at its start, without pandas (a
        night's memory is better spent on its jobs)."""
        t = _transitions
        query = self._completed_dwells(since, self._mine(t), [])
        query = query.add_columns(t.c.night, t.c.label, t.c.from_state, t.c.dwell_s)
        with self.engine.begin() as conn:
            return [(str(n), str(lb), str(st), float(d)) for n, lb, st, d in conn.execute(query)]

    def state_times(
        self, labels: Sequence[str], states: Sequence[str], since: datetime
    ) -> list[tuple[str, str, str, str, datetime]]:
        """``(night, run_id, label, to_state, at)`` of the ``labels`` entering ``states`` since
        ``since``, oldest first: when a chain's steps ended and began (the forecast's gaps)."""
        t = _transitions
        query = (
            sa.select(t.c.night, t.c.run_id, t.c.label, t.c.to_state, t.c.at)
            .where(*self._mine(t), t.c.label.in_(list(labels)), t.c.to_state.in_(list(states)))
            .where(t.c.at >= _utc(since))
            .order_by(t.c.id)
        )
        with self.engine.begin() as conn:
            return [
                (str(n), str(r), str(lb), str(st), at) for n, r, lb, st, at in conn.execute(query)
            ]

    def has_dwells(self, since: datetime) -> bool:
        """Whether any catalogue's completed dwell ended at or after ``since`` (budgets are
        learned across catalogues): one indexed row at most, no pandas."""
        query = self._completed_dwells(since, (), [sa.literal(1)]).limit(1)
        with self.engine.begin() as conn:
            return conn.execute(query).first() is not None

    @staticmethod
    def _completed_dwells(
        since: datetime, scope: tuple[sa.ColumnElement[bool], ...], first: list[Any]
    ) -> sa.Select[Any]:
        """The transitions with a dwell in ``scope`` since ``since``, oldest first; columns to
        add (after ``first``)."""
        t = _transitions
        return (
            sa.select(*first)
            # a new attempt's first row has a from_state but no dwell: nothing to learn from
            .where(*scope, t.c.from_state.is_not(None), t.c.dwell_s.is_not(None))
            .where(t.c.at >= _utc(since))
            .order_by(t.c.at, t.c.id)
        )

    def get_job(self, night: str, label: str) -> JobRecord | None:
        """The record of one job of one night, or None if it never got one."""
        with self.engine.begin() as conn:
            row = conn.execute(sa.select(*_JOB_FIELDS).where(*self._job_key(night, label))).first()
        if row is None:
            return None
        values = row._asdict()
        values["data"] = json.loads(values["data"]) if values["data"] is not None else None
        return JobRecord(**values)

    def jobs_of(self, night: str) -> list[JobRecord]:
        """Every job record of one night (this catalogue's), by label."""
        query = sa.select(*_JOB_FIELDS).where(*self._mine(_jobs), _jobs.c.night == night)
        with self.engine.begin() as conn:
            rows = [row._asdict() for row in conn.execute(query.order_by(_jobs.c.label))]
        for values in rows:
            values["data"] = json.loads(values["data"]) if values["data"] is not None else None
        return [JobRecord(**values) for values in rows]

    def record_submit(
        self,
        night: str,
        label: str,
        backend: str,
        external_id: str | None,
        attempts: int,
        *,
        at: datetime | None = None,
        state: str = JobState.QUEUED,
        committed_usd: float | None = None,
        trace: tuple[str | None, str | None] = (None, None),
    ) -> None:
        """Record a (re)submission; clears the finish time, detail and data of an earlier try.
        ``committed_usd``: a paid try's expected cost; ``trace``: the trace id and parent span
        of the run that begins the try (each kept when not given)."""
        values: dict[str, Any] = {"backend": backend, "external_id": external_id}
        values |= {"attempts": attempts, "state": str(state), "submitted_at": _utc(at or _now())}
        if committed_usd is not None:
            values["committed_usd"] = committed_usd
        if trace[0] is not None:
            values["trace_id"], values["trace_parent"] = trace
        self._upsert_job(night, label, values | dict.fromkeys(("finished_at", "detail", "data")))

    def record_state(
        self,
        night: str,
        label: str,
        state: str,
        finished_at: datetime | None = None,
        detail: str | None = None,
        data: dict[str, Any] | None = None,
        spent_usd: float | None = None,
    ) -> None:
        """Set a job's state; finished_at, detail and data change only when given.
        ``spent_usd``: what the job's tries of the night cost, its last one settled."""
        values: dict[str, Any] = {"state": str(state)}
        if spent_usd is not None:
            values |= {"spent_usd": spent_usd, "committed_usd": None}
        if finished_at is not None:
            values["finished_at"] = _utc(finished_at)
        if detail is not None:
            values["detail"] = detail
        if data is not None:
            values["data"] = json.dumps(data, sort_keys=True)
        self._upsert_job(night, label, values)

    def expected_durations(
        self, labels: Iterable[str], since: datetime, *, succeeded: str = JobState.SUCCEEDED
    ) -> dict[str, float]:
        """The p50 seconds from submit to finish of each label's succeeded jobs since ``since``."""
        wanted = sorted(set(labels))
        if not wanted:
            return {}
        query = sa.select(_jobs.c.label, _jobs.c.submitted_at, _jobs.c.finished_at).where(
            *self._mine(_jobs),
            _jobs.c.label.in_(wanted),
            _jobs.c.state == str(succeeded),
            _jobs.c.submitted_at >= _utc(since),
            _jobs.c.finished_at.is_not(None),
        )
        seconds: dict[str, list[float]] = {}
        with self.engine.begin() as conn:
            for label, submitted_at, finished_at in conn.execute(query):
                seconds.setdefault(label, []).append((finished_at - submitted_at).total_seconds())
        return {label: u.p50 for label, values in seconds.items() if (u := Usual.of(values))}

    def job_costs(self, labels: Iterable[str], since: datetime) -> dict[str, list[float]]:
        """What each label's last try of a night cost (its results' ``cost_usd``), one per night
        since ``since``, for nights whose results said."""
        wanted = sorted(set(labels))
        if not wanted:
            return {}
        query = sa.select(_jobs.c.label, _jobs.c.data).where(
            *self._mine(_jobs),
            _jobs.c.label.in_(wanted),
            _jobs.c.submitted_at >= _utc(since),
            _jobs.c.data.like(f'%"{_COST}"%'),
        )
        out: dict[str, list[float]] = {}
        with self.engine.begin() as conn:
            for label, text in conn.execute(query):
                cost = json.loads(text).get(_COST)
                if isinstance(cost, int | float) and not isinstance(cost, bool) and cost >= 0:
                    out.setdefault(label, []).append(float(cost))
        return out

    def _mine(self, table: sa.Table) -> tuple[sa.ColumnElement[bool]]:
        """The filter every query carries: this catalogue's rows only."""
        return (table.c.catalogue == self.catalogue,)

    def _job_key(self, night: str, label: str) -> tuple[sa.ColumnElement[bool], ...]:
        return (*self._mine(_jobs), _jobs.c.night == night, _jobs.c.label == label)

    def _upsert_job(self, night: str, label: str, values: dict[str, Any]) -> None:
        # under BEGIN IMMEDIATE (SQLite) the read-then-write is atomic; on PostgreSQL one
        # (catalogue, night, label) is only ever written by the live night holding the
        # catalogue's lease
        where = self._job_key(night, label)
        with self.engine.begin() as conn:
            if conn.execute(sa.update(_jobs).where(*where).values(**values)).rowcount == 0:
                key = {"catalogue": self.catalogue, "night": night, "label": label}
                conn.execute(sa.insert(_jobs).values({**key, "attempts": 0, **values}))


def _now() -> datetime:
    return datetime.now(UTC)


def _utc(value: datetime) -> datetime:
    """``value`` in UTC; refuses naive datetimes, whose zone we would only be guessing."""
    if value.tzinfo is None:
        raise ValueError(f"naive datetime {value!r}: pass a timezone-aware one")
    return value.astimezone(UTC)
