"""The notification outbox and the nights' alert threads.

``notify_outbox`` holds every Slack message a night or the watchdog meant to send, written before
it is sent and marked sent only after Slack accepted it; what Slack did not accept waits there for
``nightshift notify --flush``. ``notify_threads`` keeps, per (catalogue, night, channel), the
``ts`` of the night's first alert: the later ones reply to it.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nightshift.store.db import UTCDateTime

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the two tables; nothing existing changes."""
    op.create_table(
        "notify_outbox",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("catalogue", sa.String(300), nullable=False),
        sa.Column("night", sa.String(32), nullable=False),
        sa.Column("route", sa.String(16), nullable=False),
        sa.Column("destination", sa.Text, nullable=False),
        sa.Column("slack", sa.Text, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("label", sa.String(200), nullable=True),
        sa.Column("thread", sa.Boolean, nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("blocks", sa.Text, nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("claimed_until", UTCDateTime(), nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.Column("sent_at", UTCDateTime(), nullable=True),
        sa.Column("ts", sa.String(32), nullable=True),
        sa.Index("ix_notify_outbox_sent_at_id", "sent_at", "id"),
        sa.Index("ix_notify_outbox_catalogue_night", "catalogue", "night", "kind"),
    )
    op.create_table(
        "notify_threads",
        sa.Column("catalogue", sa.String(300), primary_key=True),
        sa.Column("night", sa.String(32), primary_key=True),
        sa.Column("channel", sa.String(100), primary_key=True),
        sa.Column("ts", sa.String(32), nullable=False),
        sa.Column("at", UTCDateTime(), nullable=False),
    )


def downgrade() -> None:
    """Drop the two tables."""
    op.drop_table("notify_threads")
    op.drop_table("notify_outbox")
