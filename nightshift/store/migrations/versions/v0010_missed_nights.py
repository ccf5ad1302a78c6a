"""Missed nights: the nights of a schedule that never ran, named once.

``missed_nights`` holds one row per (catalogue, night) that a run of the nightly deployment
named missed (its slot passed while nothing ran it, and the missed-night policy did not run
it): when its slot was, when and by which run it was named, why, and when the one alert that
named it was sent (None: not yet).

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nightshift.store.db import UTCDateTime

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the table; nothing existing changes."""
    op.create_table(
        "missed_nights",
        sa.Column("catalogue", sa.String(300), primary_key=True),
        sa.Column("night", sa.String(32), primary_key=True),
        sa.Column("scheduled_at", UTCDateTime(), nullable=True),
        sa.Column("named_at", UTCDateTime(), nullable=False),
        sa.Column("named_by", sa.String(300), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("announced_at", UTCDateTime(), nullable=True),
    )


def downgrade() -> None:
    """Drop the table."""
    op.drop_table("missed_nights")
