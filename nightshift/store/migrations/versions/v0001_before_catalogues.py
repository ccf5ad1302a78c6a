"""The schema as it was before migrations: transitions, jobs (keyed by night, label), leases.

Ledgers made before migrations already have some or all of these tables (``leases`` appears only
once a night took a lease), so each is created only when missing: running this revision on such
a ledger creates nothing and stamps it at 0001.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create whichever of today's tables are missing, exactly as create_all made them."""
    existing = set(sa.inspect(op.get_bind()).get_table_names())
    if "transitions" not in existing:
        op.create_table(
            "transitions",
            sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
            sa.Column("night", sa.String(32), nullable=False),
            sa.Column("run_id", sa.String(64), nullable=False),
            sa.Column("label", sa.String(200), nullable=False),
            sa.Column("backend", sa.String(64), nullable=False),
            sa.Column("external_id", sa.String(500), nullable=True),
            sa.Column("from_state", sa.String(32), nullable=True),
            sa.Column("to_state", sa.String(32), nullable=False),
            sa.Column("at", sa.DateTime(timezone=True), nullable=False),
            sa.Column("dwell_s", sa.Float, nullable=True),
        )
        op.create_index("ix_transitions_night_label", "transitions", ["night", "label", "id"])
        op.create_index("ix_transitions_at", "transitions", ["at"])
    if "jobs" not in existing:
        op.create_table(
            "jobs",
            sa.Column("night", sa.String(32), primary_key=True),
            sa.Column("label", sa.String(200), primary_key=True),
            sa.Column("backend", sa.String(64), nullable=True),
            sa.Column("external_id", sa.String(500), nullable=True),
            sa.Column("state", sa.String(32), nullable=False),
            sa.Column("attempts", sa.Integer, nullable=False),
            sa.Column("submitted_at", sa.DateTime(timezone=True), nullable=True),
            sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
            sa.Column("detail", sa.Text, nullable=True),
            sa.Column("data", sa.Text, nullable=True),
        )
        op.create_index("ix_jobs_label_state", "jobs", ["label", "state"])
    if "leases" not in existing:
        op.create_table(
            "leases",
            sa.Column("key", sa.String(300), primary_key=True),
            sa.Column("owner", sa.String(300), nullable=False),
            sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        )


def downgrade() -> None:
    """Drop every table (the ledger's whole history goes with them)."""
    for table in ("leases", "jobs", "transitions"):
        op.drop_table(table)
