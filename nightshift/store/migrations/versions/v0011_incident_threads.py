"""Incident threads: a message that belongs to an incident says which.

``notify_outbox.incident`` holds the incident's key (``cli/queued#1``) on its opening message and on
every reply in its thread, so a flush after Slack came back puts each reply in the thread of the
opening message (its ``ts``), not in the night's thread. NULL: not an incident's.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add the nullable column; every message kept so far is no incident's."""
    op.add_column("notify_outbox", sa.Column("incident", sa.String(120), nullable=True))


def downgrade() -> None:
    """Drop the column."""
    with op.batch_alter_table("notify_outbox") as batch:
        batch.drop_column("incident")
