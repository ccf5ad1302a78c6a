"""The ledger's schema migrations (Alembic), applied on first use from the package itself.

``upgrade(engine)`` brings a database to ``HEAD``. Already there, it costs one small query; else
it takes the database's upgrade lock (PostgreSQL: a transaction-level advisory lock; SQLite: the
``BEGIN IMMEDIATE`` write lock every transaction of ``nightshift.store.db.make_engine`` takes),
reads the revision again and runs what is missing in that one transaction, so two processes starting
together upgrade once and the loser just waits. No alembic.ini: the scripts are found next to
this file.

The revision is kept in ``nightshift_alembic_version``, not Alembic's default ``alembic_version``:
a ledger may share its database with another Alembic user (a Prefect server on the same
PostgreSQL database keeps its own revision there). A ledger from before this rule, whose revision
is in ``alembic_version``, is adopted: the revision moves to the ledger's table on first use.
"""

from __future__ import annotations

import threading
from pathlib import Path

import sqlalchemy as sa

from nightshift.errors import NightshiftError

__all__ = ["HEAD", "VERSION_TABLE", "SchemaTooNewError", "current_revision", "upgrade"]

HEAD = "0012"  # the newest revision under versions/; a test checks they agree
KNOWN = (
    None,
    "0001",
    "0002",
    "0003",
    "0004",
    "0005",
    "0006",
    "0007",
    "0008",
    "0009",
    "0010",
    "0011",
    HEAD,
)  # oldest first; None: no revision kept (new, or before migrations)
VERSION_TABLE = "nightshift_alembic_version"  # where the ledger keeps its revision
_SHARED_TABLE = "alembic_version"  # where it kept it up to 0004, and where others keep theirs

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
    """The ledger's revision, or None when none is kept (a new ledger, or one from before)."""
    ours = _select_revisions(engine, VERSION_TABLE)
    if ours:
        return ours[0]
    return _adoptable(_select_revisions(engine, _SHARED_TABLE))


def _select_revisions(engine: sa.Engine, table: str) -> list[str]:
    """The revisions in ``table`` (each query on a connection of its own), [] without it."""
    try:
        with engine.connect() as conn:
            return list(conn.execute(sa.text(f"SELECT version_num FROM {table}")).scalars())
    except sa.exc.ProgrammingError:  # PostgreSQL: undefined table
        return []
    except sa.exc.OperationalError as exc:  # SQLite: no such table; anything else is real
        if "no such table" in str(exc.orig):
            return []
        raise


def _adoptable(shared: list[str]) -> str | None:
    """Our revision among ``alembic_version``'s (another app's there is not ours)."""
    ours = [revision for revision in shared if revision in KNOWN]
    return ours[0] if ours else None


def _adopt(conn: sa.Connection) -> str | None:
    """Move a revision of ours from ``alembic_version`` to the ledger's table; the revision."""
    if not sa.inspect(conn).has_table(_SHARED_TABLE):
        return None
    shared = sa.table(_SHARED_TABLE, sa.column("version_num"))
    found = _adoptable(list(conn.execute(sa.select(shared.c.version_num)).scalars()))
    if found is None:
        return None
    version = sa.Table(
        VERSION_TABLE,
        sa.MetaData(),
        sa.Column("version_num", sa.String(32), primary_key=True),
    )
    version.create(conn)
    conn.execute(sa.insert(version).values(version_num=found))
    conn.execute(sa.delete(shared).where(shared.c.version_num == found))
    if conn.execute(sa.select(sa.func.count()).select_from(shared)).scalar() == 0:
        conn.execute(sa.text(f"DROP TABLE {_SHARED_TABLE}"))
    return found


def upgrade(engine: sa.Engine) -> tuple[str | None, str] | None:
    """Bring the schema to HEAD; (from, to) if this call upgraded it, None if it already was."""
    if _select_revisions(engine, VERSION_TABLE) == [HEAD]:
        return None  # the one query of every Ledger made on an up-to-date database
    # imported here: Alembic takes most of a second to import, and most Ledgers never need it
    from alembic import command
    from alembic.config import Config
    from alembic.runtime.migration import MigrationContext

    with _process_lock, engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            # held until this transaction ends, i.e. until the upgrade is committed
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK})
        opts = {"version_table": VERSION_TABLE}
        before = MigrationContext.configure(conn, opts=opts).get_current_revision()
        if before is None:
            before = _adopt(conn)
        if before == HEAD:
            return None  # someone else upgraded it while we waited for the lock
        if before not in KNOWN:
            raise SchemaTooNewError(before)
        config = Config()
        config.set_main_option("script_location", str(_SCRIPTS))
        config.attributes["connection"] = conn
        command.upgrade(config, HEAD)
    return before, HEAD
