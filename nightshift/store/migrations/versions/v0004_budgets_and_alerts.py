"""Budget snapshots (what normal is, as last learned) and the alert log (each level raised once).

``budget_snapshots`` holds one row per build (when, from which window); ``budget_rows`` its
budgets: per (catalogue, label, state), per (catalogue, backend, state) and per (catalogue, label)
for the whole job. ``alerts`` holds every watch/alert a night or the watchdog raised, at most one
per (catalogue, night, label, kind, state, level): the key is how "raised once" is kept.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nightshift.store.db import UTCDateTime

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the three tables; nothing existing changes."""
    op.create_table(
        "budget_snapshots",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("built_at", UTCDateTime(), nullable=False),
        sa.Column("since", UTCDateTime(), nullable=False),
        sa.Column("dwells", sa.Integer, nullable=False),
        sa.Index("ix_budget_snapshots_built_at", "built_at"),
    )
    op.create_table(
        "budget_rows",
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
    op.create_table(
        "alerts",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("catalogue", sa.String(300), nullable=False),
        sa.Column("night", sa.String(32), nullable=False),
        sa.Column("label", sa.String(200), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("state", sa.String(32), nullable=False, server_default=""),
        sa.Column("level", sa.String(8), nullable=False),
        sa.Column("raised_by", sa.String(16), nullable=False),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.Column("dwell_s", sa.Float, nullable=True),
        sa.Column("p95_s", sa.Float, nullable=True),
        sa.Column("detail", sa.Text, nullable=True),
        sa.UniqueConstraint(
            "catalogue", "night", "label", "kind", "state", "level", name="uq_alerts_once"
        ),
        sa.Index("ix_alerts_at", "at"),
    )


def downgrade() -> None:
    """Drop the three tables."""
    op.drop_table("alerts")
    op.drop_table("budget_rows")
    op.drop_table("budget_snapshots")
