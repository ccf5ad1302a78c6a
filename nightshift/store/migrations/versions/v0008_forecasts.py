"""Forecasts: what each run of a night expected of itself when it started.

``forecasts`` holds one row per run of a night (its ``run_id`` is its ledger rows'): when the
forecast was made, the night's start, its expected finish (p50, p95), its critical path (a JSON
list of labels) and the per-job forecast (``body``, a JSON object). The night report and
``nightshift plan --accuracy`` hold it against the ledger's transitions.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nightshift.store.db import UTCDateTime

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the table; nothing existing changes."""
    op.create_table(
        "forecasts",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("catalogue", sa.String(300), nullable=False),
        sa.Column("night", sa.String(32), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("made_at", UTCDateTime(), nullable=False),
        sa.Column("start", UTCDateTime(), nullable=False),
        sa.Column("finish_p50", UTCDateTime(), nullable=False),
        sa.Column("finish_p95", UTCDateTime(), nullable=False),
        sa.Column("critical_path", sa.Text, nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.Index("ix_forecasts_catalogue_night", "catalogue", "night", "id"),
    )


def downgrade() -> None:
    """Drop the table."""
    op.drop_table("forecasts")
