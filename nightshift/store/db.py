"""Database plumbing shared by the ledger and the lease: engines and an aware-UTC column type."""

from __future__ import annotations

import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.pool import StaticPool

__all__ = ["UTCDateTime", "db_now", "make_engine", "shares_clock", "use_wal"]

_SQLITE_BUSY_MS = 30_000


class UTCDateTime(sa.TypeDecorator[datetime]):
    """Aware UTC datetimes in and out; SQLite stores naive UTC, so text order is time order."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: pass a timezone-aware one")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def make_engine(url: str) -> sa.Engine:
    """An engine for ``url``; SQLite gets WAL, a busy timeout and BEGIN IMMEDIATE transactions."""
    parsed = sa.make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return sa.create_engine(url, pool_pre_ping=True)
    database = parsed.database or ""
    in_memory = database in ("", ":memory:")
    if not in_memory and not database.startswith("file:"):
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    engine = sa.create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": _SQLITE_BUSY_MS / 1000},
        **({"poolclass": StaticPool} if in_memory else {}),
    )

    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # hand transaction control to SQLAlchemy so our BEGIN IMMEDIATE is the only BEGIN
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {_SQLITE_BUSY_MS}")
        cursor.close()
        if not in_memory:
            use_wal(dbapi_connection, _SQLITE_BUSY_MS / 1000)

    @sa.event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        # take the write lock up front: a deferred read-then-write transaction in WAL mode can
        # fail with SQLITE_BUSY_SNAPSHOT, which the busy timeout does not retry
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def use_wal(dbapi_connection: sqlite3.Connection, wait_s: float) -> None:
    """Put a SQLite file in WAL mode (once per file: a connection that finds it there is done).
    Two connections switching a new file at once can deadlock, and SQLite then refuses one at
    once ("database is locked") without its busy handler: that one tries again, for up to
    ``wait_s`` seconds, and finds the other's switch done."""
    deadline = time.monotonic() + wait_s
    pause = 0.005
    while True:
        cursor = dbapi_connection.cursor()
        try:
            if str(cursor.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = NORMAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() + pause > deadline:
                raise
        finally:
            cursor.close()
        time.sleep(pause)
        pause = min(pause * 2, 0.25)


def shares_clock(engine: sa.Engine) -> bool:
    """Whether hosts share this database's clock: a server's (PostgreSQL's ``now()``), not a
    file's (SQLite is one host, whose own clock is the only one)."""
    return engine.dialect.name != "sqlite"


def db_now(on: sa.Engine | sa.Connection, host_clock: Any = None) -> datetime:
    """Now on the clock the hosts of a database share: the server's ``now()`` for PostgreSQL
    (read ``on`` a connection of it, or a new one), ``host_clock()`` (the host's UTC wall
    clock by default) for a SQLite file."""
    if not shares_clock(on.engine):
        return host_clock() if host_clock is not None else datetime.now(UTC)
    if isinstance(on, sa.Connection):
        value = on.execute(sa.select(sa.func.now())).scalar_one()
    else:
        with on.connect() as conn:
            value = conn.execute(sa.select(sa.func.now())).scalar_one()
    # the session's time zone is the server's setting: UTC, as every time here is
    return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)


def dialect_insert(engine: sa.Engine, table: sa.Table) -> Any:
    """The dialect's INSERT for ``table`` (SQLite's or PostgreSQL's): it has ON CONFLICT.

    Raises KeyError for another database, which the ledger does not support.
    """
    from sqlalchemy.dialects import postgresql, sqlite

    inserts: dict[str, Any] = {"sqlite": sqlite.insert, "postgresql": postgresql.insert}
    return inserts[engine.dialect.name](table)
