"""The ledger's revisions, oldest first (Alembic skips this file)."""
