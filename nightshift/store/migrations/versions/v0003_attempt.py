"""Each transition knows the job's attempt, so a resubmission starts a new dwell chain.

Rows written before this revision keep ``attempt`` NULL ("unknown"): the Ledger then counts
dwells across them as it always did.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add the nullable ``transitions.attempt``; SQLite adds it in place, no table copy."""
    with op.batch_alter_table("transitions") as batch:
        batch.add_column(sa.Column("attempt", sa.Integer, nullable=True))


def downgrade() -> None:
    """Drop ``transitions.attempt`` (SQLite copies the table)."""
    with op.batch_alter_table("transitions") as batch:
        batch.drop_column("attempt")
