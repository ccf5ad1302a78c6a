"""Alembic's environment for the ledger: runs on the connection the caller hands in.

No ``fileConfig`` here on purpose: migrations run inside the app and must leave its logging alone.
"""

from __future__ import annotations

from alembic import context

from nightshift.store.migrations import VERSION_TABLE

if context.is_offline_mode():
    raise RuntimeError("the ledger's migrations run online only, on a live connection")

# the caller already holds the upgrade lock inside this connection's transaction
context.configure(
    connection=context.config.attributes["connection"],
    render_as_batch=True,  # SQLite can't ALTER most things; batch mode copies the table
    # not alembic_version: the database may be shared with another Alembic user (Prefect)
    version_table=VERSION_TABLE,
)
with context.begin_transaction():
    context.run_migrations()
