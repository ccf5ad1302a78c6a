"""Spend: what a job's tries of a night cost, and what its try out there is expected to cost.

``jobs.committed_usd`` is written with a paid job's submit (before the create: a crash after it
still counts it); ``jobs.spent_usd`` adds up the costs of the job's ended tries of the night (its
retries and earlier runs of the night included). The night's spend cap reads both.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add the two columns; existing rows have spent and committed nothing."""
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("committed_usd", sa.Float, nullable=True))
        batch.add_column(sa.Column("spent_usd", sa.Float, nullable=True))


def downgrade() -> None:
    """Drop the two columns."""
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("spent_usd")
        batch.drop_column("committed_usd")
