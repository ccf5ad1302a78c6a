"""Which night holds which Prefect concurrency slot lease.

``slot_leases`` has one row per slot lease a night took (its lease id, limit, the night's lease
owner ``host:pid:uuid8`` and catalogue, the Prefect server it was taken on). The
next night of a limit gives back the slots of holders whose night lease is gone (kill -9).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nightshift.store.db import UTCDateTime

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the table; nothing existing changes."""
    op.create_table(
        "slot_leases",
        sa.Column("lease_id", sa.String(64), primary_key=True),
        sa.Column("limit_name", sa.String(300), nullable=False),
        sa.Column("holder", sa.String(300), nullable=False),
        sa.Column("catalogue", sa.String(300), nullable=False),
        sa.Column("server", sa.String(500), nullable=False),
        sa.Column("taken_at", UTCDateTime(), nullable=False),
        sa.Index("ix_slot_leases_holder", "holder"),
    )


def downgrade() -> None:
    """Drop the table."""
    op.drop_table("slot_leases")
