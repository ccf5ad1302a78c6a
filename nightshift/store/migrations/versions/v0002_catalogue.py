"""Key every job record and transition by catalogue too.

Rows written before this revision get catalogue ``""`` ("before catalogues"), a key no real
catalogue has (a catalogue's key is its name, else its resolved path): they stay readable in the
database but no catalogue's Ledger matches them. The server default fills them in, and files
a row inserted without a catalogue (by a Nightshift from before migrations) there too.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

BEFORE_CATALOGUES = ""


def _catalogue() -> sa.Column[str]:
    return sa.Column("catalogue", sa.String(300), nullable=False, server_default=BEFORE_CATALOGUES)


def _jobs_0001() -> sa.Table:
    """Revision 0001's jobs table for SQLite's copy, its key left to create_primary_key.

    Reflected, night and label would stay flagged primary_key next to the new key (SAWarning).
    """
    return sa.Table(
        "jobs",
        sa.MetaData(),
        sa.Column("night", sa.String(32), nullable=False),
        sa.Column("label", sa.String(200), nullable=False),
        sa.Column("backend", sa.String(64), nullable=True),
        sa.Column("external_id", sa.String(500), nullable=True),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("submitted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("detail", sa.Text, nullable=True),
        sa.Column("data", sa.Text, nullable=True),
        sa.Index("ix_jobs_label_state", "label", "state"),
    )


def upgrade() -> None:
    """Add ``catalogue`` to both tables, the jobs primary key and the lookup indexes."""
    # SQLite adds a column with a default in place; only the new primary key makes batch mode
    # copy a table, and jobs holds one row per job and night, not per transition
    with op.batch_alter_table("transitions") as batch:
        batch.add_column(_catalogue())
        batch.drop_index("ix_transitions_night_label")
        batch.create_index(
            "ix_transitions_catalogue_night_label", ["catalogue", "night", "label", "id"]
        )
    bind = op.get_bind()
    # SQLite copies the table from _jobs_0001(), which has no key to drop
    old_pk = None
    if bind.dialect.name != "sqlite":  # jobs_pkey, unless someone named it otherwise
        old_pk = sa.inspect(bind).get_pk_constraint("jobs").get("name")
    with op.batch_alter_table("jobs", recreate="auto", copy_from=_jobs_0001()) as batch:
        batch.add_column(_catalogue())
        if old_pk:
            batch.drop_constraint(old_pk, type_="primary")
        batch.create_primary_key("pk_jobs", ["catalogue", "night", "label"])
        batch.drop_index("ix_jobs_label_state")
        batch.create_index("ix_jobs_catalogue_label_state", ["catalogue", "label", "state"])


def downgrade() -> None:
    """Back to (night, label) keys; fails if two catalogues share a job label on one night."""
    with op.batch_alter_table("jobs", recreate="auto") as batch:
        batch.drop_index("ix_jobs_catalogue_label_state")
        batch.drop_constraint("pk_jobs", type_="primary")
        batch.create_primary_key("jobs_pkey", ["night", "label"])
        batch.drop_column("catalogue")
        batch.create_index("ix_jobs_label_state", ["label", "state"])
    with op.batch_alter_table("transitions") as batch:
        batch.drop_index("ix_transitions_catalogue_night_label")
        batch.drop_column("catalogue")
        batch.create_index("ix_transitions_night_label", ["night", "label", "id"])
