"""The night runs that were traced: written only here (``begin``, ``emitted``), read when a night
begins (the earlier runs of the night whose span was never emitted: killed) and by the report.

A run's row is written when it begins (its trace id chosen) and marked when its span was handed
to the exporter; a run killed before that is found by the next run of the night, which emits its
span for it (its end: the last row that run wrote), so no try's span is left without a parent.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa

from nightshift.store.db import UTCDateTime, dialect_insert

__all__ = ["NIGHT_TRACES_TABLE", "NightTraces", "TracedRun"]

_metadata = sa.MetaData()

_traces = sa.Table(
    "night_traces",
    _metadata,
    sa.Column("catalogue", sa.String(300), primary_key=True),
    sa.Column("night", sa.String(32), primary_key=True),
    sa.Column("run_id", sa.String(64), primary_key=True),
    sa.Column("trace_id", sa.String(32), nullable=False),
    sa.Column("parent_span", sa.String(16), nullable=True),
    sa.Column("sampled", sa.Boolean, nullable=False),
    sa.Column("started_at", UTCDateTime(), nullable=False),
    sa.Column("emitted_at", UTCDateTime(), nullable=True),
)

NIGHT_TRACES_TABLE = _traces  # for readers (retention); writes go through NightTraces


@dataclass(frozen=True)
class TracedRun:
    """One traced run of a night."""

    run_id: str
    trace_id: str  # 32 hex digits
    parent_span: str | None  # 16 hex digits: Prefect's flow-run span, when it held the night
    sampled: bool
    started_at: datetime
    emitted_at: datetime | None


class NightTraces:
    """The traced runs of one catalogue's nights, in the ledger's database."""

    def __init__(self, engine: sa.Engine, catalogue: str) -> None:
        self.engine = engine
        self.catalogue = catalogue

    def begin(self, night: str, trace: TracedRun) -> None:
        """Write down a run's trace as it begins."""
        row = {
            "catalogue": self.catalogue,
            "night": night,
            "run_id": trace.run_id,
            "trace_id": trace.trace_id,
            "parent_span": trace.parent_span,
            "sampled": trace.sampled,
            "started_at": trace.started_at,
            "emitted_at": None,
        }
        with self.engine.begin() as conn:
            conn.execute(dialect_insert(self.engine, _traces).values(row).on_conflict_do_nothing())

    def of(self, night: str) -> list[TracedRun]:
        """The night's traced runs, oldest first."""
        query = (
            sa.select(_traces)
            .where(_traces.c.catalogue == self.catalogue, _traces.c.night == night)
            .order_by(_traces.c.started_at)
        )
        with self.engine.begin() as conn:
            rows = conn.execute(query).all()
        return [
            TracedRun(
                r.run_id, r.trace_id, r.parent_span, bool(r.sampled), r.started_at, r.emitted_at
            )
            for r in rows
        ]

    def emitted(self, night: str, run_id: str, at: datetime | None = None) -> None:
        """A run's span was handed to the exporter: no later run emits it again."""
        with self.engine.begin() as conn:
            conn.execute(
                sa.update(_traces)
                .where(
                    _traces.c.catalogue == self.catalogue,
                    _traces.c.night == night,
                    _traces.c.run_id == run_id,
                )
                .values(emitted_at=at or datetime.now(UTC))
            )
