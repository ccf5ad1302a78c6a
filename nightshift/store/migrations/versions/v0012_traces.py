"""Traces: a night run's trace, and the trace each job try belongs to.

``night_traces`` holds one row per run of a night that was traced: its trace id, the span it hangs
under when Prefect's own flow-run span held it (NULL: the night's span is the root), when it
began, and when its span was emitted (NULL: not yet: the run is going, or it was killed and the
next run of the night emits it). ``jobs.trace_id`` and ``jobs.trace_parent`` are the trace of the
run that began the job's try and the span it hangs under: a rerun that re-attaches to it emits
its span in that trace, with the same ids (``nightshift/engine/trace_ids.py``). NULL: untraced.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nightshift.store.db import UTCDateTime

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the table and add the nullable column; nothing existing changes."""
    op.create_table(
        "night_traces",
        sa.Column("catalogue", sa.String(300), primary_key=True),
        sa.Column("night", sa.String(32), primary_key=True),
        sa.Column("run_id", sa.String(64), primary_key=True),
        sa.Column("trace_id", sa.String(32), nullable=False),
        sa.Column("parent_span", sa.String(16), nullable=True),
        sa.Column("sampled", sa.Boolean, nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=False),
        sa.Column("emitted_at", UTCDateTime(), nullable=True),
    )
    op.add_column("jobs", sa.Column("trace_id", sa.String(32), nullable=True))
    op.add_column("jobs", sa.Column("trace_parent", sa.String(16), nullable=True))


def downgrade() -> None:
    """Drop the column and the table."""
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("trace_parent")
        batch.drop_column("trace_id")
    op.drop_table("night_traces")
