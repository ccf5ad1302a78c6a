"""The ledger's schema migrations (Alembic), applied on first use from the package itself.

``upgrade(engine)`` brings a database to ``HEAD``. Already there, it costs one small query; else
it takes the database's upgrade lock (PostgreSQL: a transaction-level advisory lock; SQLite: the
``BEGIN IMMEDIATE`` write lock every transaction of ``nightshift.store.db.make_engine`` takes),
reads the revision again and runs what is missing in that one transaction, so two processes starting
together upgrade once and the loser just waits. No alembic.ini: the scripts are found next to
this file.
"""

from __future__ import annotations

import threading
from pathlib import Path

import sqlalchemy as sa

from nightshift.errors import NightshiftError

__all__ = ["HEAD", "SchemaTooNewError", "current_revision", "upgrade"]

HEAD = "0005"  # the newest revision under versions/; a test checks they agree
KNOWN = (
    None,
    "0001",
    "0002",
    "0003",
    "0004",
    HEAD,
)  # oldest first; None: no alembic_version (new, or before migrations)

_SCRIPTS = Path(__file__).resolve().parent
# pg_advisory_xact_lock key: any constant bigint every Nightshift agrees on ("nightshf" in ASCII)
_PG_LOCK = int.from_bytes(b"nightshf", "big") & 0x7FFF_FFFF_FFFF_FFFF
# Alembic's context and op are module globals: one migration at a time per process
_process_lock = threading.Lock()


class SchemaTooNewError(NightshiftError):
    """The database was upgraded by a newer Nightshift than this one."""

    def __init__(self, revision: str) -> None:
        super().__init__(
            f"ledger schema is at revision {revision}, newer than this Nightshift knows "
            f"(up to {HEAD}): upgrade Nightshift"
        )
        self.revision = revision


def current_revision(engine: sa.Engine) -> str | None:
    """The database's revision, or None when it has no alembic_version table."""
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
    except sa.exc.ProgrammingError:  # PostgreSQL: undefined table
        return None
    except sa.exc.OperationalError as exc:  # SQLite: no such table; anything else is real
        if "no such table" in str(exc.orig):
            return None
        raise


def upgrade(engine: sa.Engine) -> tuple[str | None, str] | None:
    """Bring the schema to HEAD; (from, to) if this call upgraded it, None if it already was."""
    if current_revision(engine) == HEAD:
        return None
    # imported here: Alembic takes most of a second to import, and most Ledgers never need it
    from alembic import command
    from alembic.config import Config
    from alembic.runtime.migration import MigrationContext

    with _process_lock, engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            # held until this transaction ends, i.e. until the upgrade is committed
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK})
        before = MigrationContext.configure(conn).get_current_revision()
        if before == HEAD:
            return None  # someone else upgraded it while we waited for the lock
        if before not in KNOWN:
            raise SchemaTooNewError(before)
        config = Config()
        config.set_main_option("script_location", str(_SCRIPTS))
        config.attributes["connection"] = conn
        command.upgrade(config, HEAD)
    return before, HEAD
