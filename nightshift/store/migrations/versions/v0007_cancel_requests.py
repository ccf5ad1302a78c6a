"""Cancel requests: what ``nightshift cancel`` asked of a night, for the night to see.

``cancel_requests`` holds one row per job ``nightshift cancel`` cancelled (or asked the live night
not to submit: ``external_id`` None), with why and when. The live night reads them: a job it sees
cancelled ends ``cancelled`` with that reason, a job not yet submitted is not submitted.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nightshift.store.db import UTCDateTime

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the table; nothing existing changes."""
    op.create_table(
        "cancel_requests",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("catalogue", sa.String(300), nullable=False),
        sa.Column("night", sa.String(32), nullable=False),
        sa.Column("label", sa.String(200), nullable=False),
        sa.Column("external_id", sa.String(500), nullable=True),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("requested_at", UTCDateTime(), nullable=False),
        sa.Index("ix_cancel_requests_catalogue_night", "catalogue", "night", "label"),
    )


def downgrade() -> None:
    """Drop the table."""
    op.drop_table("cancel_requests")
