"""Budget snapshots in the ledger database: the budgets as last learned, and when.

The tables only, for now (revision 0004); reading and writing them comes with the budgets flow.
"""

from __future__ import annotations

import sqlalchemy as sa

from nightshift.store.db import UTCDateTime

__all__: list[str] = []

_metadata = sa.MetaData()

_snapshots = sa.Table(
    "budget_snapshots",
    _metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("built_at", UTCDateTime(), nullable=False),
    sa.Column("since", UTCDateTime(), nullable=False),  # the oldest dwell it could read
    sa.Column("dwells", sa.Integer, nullable=False),  # how many history rows it read
    sa.Index("ix_budget_snapshots_built_at", "built_at"),
)

# kind: "state" (catalogue, label, state, backend), "backend" (catalogue, backend, state; no
# label, no source) or "job" (catalogue, label, backend; no state); p50/p95 NULL while learning
_rows = sa.Table(
    "budget_rows",
    _metadata,
    sa.Column("snapshot_id", sa.Integer, nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("catalogue", sa.String(300), nullable=False),
    sa.Column("label", sa.String(200), nullable=True),
    sa.Column("backend", sa.String(64), nullable=True),
    sa.Column("state", sa.String(32), nullable=True),
    sa.Column("n", sa.Integer, nullable=False),
    sa.Column("p50", sa.Float, nullable=True),
    sa.Column("p95", sa.Float, nullable=True),
    sa.Column("source", sa.String(16), nullable=True),
    sa.Column("source_n", sa.Integer, nullable=True),
    sa.Index("ix_budget_rows_snapshot_catalogue", "snapshot_id", "catalogue"),
)
