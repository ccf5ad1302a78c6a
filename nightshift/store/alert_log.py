"""The alert log: every watch/alert a night or the watchdog raised, each at most once.

One row per (catalogue, night, label, kind, state, level): inserting a key that is already there
does nothing and says so, which is how a level is raised once across polls, reruns and the
watchdog (``INSERT ... ON CONFLICT DO NOTHING`` on SQLite and PostgreSQL).

Kinds: ``dwell`` (a job's time in ``state`` past its budget: watch > p95, alert > 2 x p95),
``stopped`` (a night's lease expired with jobs in flight), ``stale`` (no success in too long),
``streak`` (not ok several nights in a row), ``missed`` (a night of the schedule that never
ran: named by the run that found it, kept here so the watchdog does not name it again),
``incident`` (several jobs of one backend stalled in one state together: its label the
incident's key ``cli/queued#1``, one row at its opening with its level, one at its end with the
level ``over`` and how long it lasted in ``dwell_s``). Only ``dwell`` and ``incident`` rows have
a state.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from datetime import datetime

import sqlalchemy as sa

from nightshift.store.db import UTCDateTime, dialect_insert

__all__ = [
    "ALERTS_TABLE",
    "DWELL",
    "INCIDENT",
    "MISSED",
    "STALE",
    "STOPPED",
    "STREAK",
    "AlertLog",
    "AlertRecord",
]

DWELL, STOPPED, STALE, STREAK, MISSED = "dwell", "stopped", "stale", "streak", "missed"
INCIDENT = "incident"

_metadata = sa.MetaData()

_alerts = sa.Table(
    "alerts",
    _metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("catalogue", sa.String(300), nullable=False),
    sa.Column("night", sa.String(32), nullable=False),
    sa.Column("label", sa.String(200), nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("state", sa.String(32), nullable=False, server_default=""),
    sa.Column("level", sa.String(8), nullable=False),
    sa.Column("raised_by", sa.String(16), nullable=False),  # "night" | "watchdog"
    sa.Column("at", UTCDateTime(), nullable=False),
    sa.Column("dwell_s", sa.Float, nullable=True),
    sa.Column("p95_s", sa.Float, nullable=True),
    sa.Column("detail", sa.Text, nullable=True),
    sa.UniqueConstraint(
        "catalogue", "night", "label", "kind", "state", "level", name="uq_alerts_once"
    ),
    sa.Index("ix_alerts_at", "at"),
)

ALERTS_TABLE = _alerts  # for readers that aggregate in SQL (metrics)


@dataclass(frozen=True)
class AlertRecord:
    """One raised level, as the log keeps it."""

    catalogue: str
    night: str
    label: str
    kind: str  # DWELL | STOPPED | STALE | STREAK | MISSED
    level: str  # "watch" | "alert"
    raised_by: str  # "night" | "watchdog"
    at: datetime  # aware, UTC
    state: str = ""  # the state dwelt in (DWELL only)
    dwell_s: float | None = None
    p95_s: float | None = None
    detail: str | None = None

    @property
    def key(self) -> tuple[str, str, str, str, str, str]:
        """What makes it once: (catalogue, night, label, kind, state, level)."""
        return (self.catalogue, self.night, self.label, self.kind, self.state, self.level)


class AlertLog:
    """The alert log behind an engine (the ledger's); thread-safe."""

    def __init__(self, engine: sa.Engine) -> None:
        """The schema is the ledger's: make a ``Ledger`` on the URL first (it upgrades it)."""
        self.engine = engine
        self._lock = threading.Lock()

    def record(self, alert: AlertRecord) -> bool:
        """Keep ``alert``; False (and nothing written) when its key was raised before."""
        insert = dialect_insert(self.engine, _alerts)
        statement = insert.values(**asdict(alert)).on_conflict_do_nothing(
            index_elements=["catalogue", "night", "label", "kind", "state", "level"]
        )
        with self._lock, self.engine.begin() as conn:
            # RETURNING, not rowcount: drivers disagree on rowcount for a skipped insert
            return conn.execute(statement.returning(_alerts.c.id)).first() is not None

    def raised(self, catalogue: str, night: str, kind: str = DWELL) -> set[tuple[str, str, str]]:
        """(label, state, level) of one night's ``kind`` rows: what a rerun must not repeat."""
        a = _alerts.c
        query = sa.select(a.label, a.state, a.level).where(
            a.catalogue == catalogue, a.night == night, a.kind == kind
        )
        with self.engine.begin() as conn:
            return {(r.label, r.state, r.level) for r in conn.execute(query)}

    def alerts(
        self,
        *,
        catalogue: str | None = None,
        night: str | None = None,
        since: datetime | None = None,
    ) -> list[AlertRecord]:
        """The rows matching every filter given, oldest first."""
        a = _alerts.c
        query = sa.select(*(c for c in _alerts.c if c.name != "id")).order_by(a.id)
        if catalogue is not None:
            query = query.where(a.catalogue == catalogue)
        if night is not None:
            query = query.where(a.night == night)
        if since is not None:
            query = query.where(a.at >= since)
        with self.engine.begin() as conn:
            return [AlertRecord(**row._asdict()) for row in conn.execute(query)]
