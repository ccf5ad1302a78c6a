"""A database lease: at most one live holder per key, taken over once its holder stops renewing.

One row per key in ``leases(key, owner, expires_at)``. Acquire and renew are one atomic
``INSERT ... ON CONFLICT (key) DO UPDATE ... WHERE expires_at < now OR owner = me`` on both
SQLite (3.35+) and PostgreSQL; no row returned means someone else holds a live lease.

``now`` is the clock the hosts share: PostgreSQL's ``now()`` inside the statement, so a host
whose wall clock runs ahead can neither find a live lease expired nor write one that the
others find expired; on SQLite (one host) the host's clock. The host's own clock only measures
how long ago it last renewed (when it must stop acting as the holder).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any

from sqlalchemy import (
    Column,
    Connection,
    Engine,
    Interval,
    MetaData,
    String,
    Table,
    bindparam,
    delete,
    func,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import SQLAlchemyError

from nightshift.errors import LockHeldError
from nightshift.loop import NightLoop
from nightshift.store.db import UTCDateTime, db_now, make_engine, shares_clock
from nightshift.store.lease_owner import default_owner, described, gone_here

__all__ = ["LEASES_TABLE", "Clock", "Lease"]

Clock = Callable[[], datetime]

_log = logging.getLogger(__name__)

_metadata = MetaData()

_leases = Table(
    "leases",
    _metadata,
    Column("key", String(300), primary_key=True),
    Column("owner", String(300), nullable=False),
    Column("expires_at", UTCDateTime(), nullable=False),
)

LEASES_TABLE = _leases  # for readers (store/slot_holders.py); writes go through Lease

_INSERTS: dict[str, Any] = {"sqlite": sqlite.insert, "postgresql": postgresql.insert}


def _now() -> datetime:
    return datetime.now(UTC)


class Lease:
    """A renewable lease on ``key``; as a context manager it renews itself every ttl/3."""

    def __init__(
        self,
        engine_or_url: Engine | str,
        key: str,
        owner: str | None = None,
        ttl_s: float = 60.0,
        *,
        clock: Clock = _now,
        loop: NightLoop | None = None,
    ) -> None:
        if ttl_s <= 0:
            raise ValueError(f"ttl_s must be positive, got {ttl_s!r}")
        self.engine = (
            make_engine(engine_or_url) if isinstance(engine_or_url, str) else engine_or_url
        )
        if self.engine.dialect.name not in _INSERTS:
            raise ValueError(f"leases need SQLite or PostgreSQL, not {self.engine.dialect.name}")
        self.key = key
        self.owner = owner or default_owner()
        self.ttl_s = float(ttl_s)
        self._clock = clock
        # renewed while held (``with``) by a task on ``loop`` (the night's: a lease never makes
        # a loop of its own), each renewal on a thread of its pool; read alone, it needs none
        self._loop = loop
        self._renewer: Future[None] | None = None
        self._renewing = threading.Lock()  # a renewal in flight; none starts once released
        self._held = False
        self._lost: LockHeldError | None = None
        # on self._clock: when a renewal last succeeded, and why the lease can't be trusted
        self._renewed_at: datetime | None = None
        self._lapsed: str | None = None
        self.last_error: str | None = None
        with self.engine.begin() as conn:
            _metadata.create_all(conn)

    @property
    def lost(self) -> LockHeldError | None:
        """Why background renewal stopped because another holder took the lease, if it did."""
        return self._lost

    @property
    def lost_reason(self) -> str | None:
        """Why the holder must stop acting as one: taken over, or not renewed within the ttl.

        A lapse is for good: another holder may have come and gone while we could not renew.
        """
        if self._lost is not None:
            return str(self._lost)
        renewed_at = self._renewed_at
        if self._lapsed is None and self._held and renewed_at is not None:
            age = (self._clock() - renewed_at).total_seconds()
            if age >= self.ttl_s:
                self._lapsed = (
                    f"the lease on {self.key!r} was not renewed for {age:.0f}s (ttl "
                    f"{self.ttl_s:g}s), so another night may hold it; last error: "
                    f"{self.last_error or 'none'}"
                )
        return self._lapsed

    def acquire(self) -> None:
        """Take the lease; raises LockHeldError while another owner's lease is unexpired, unless
        that owner was a process of this machine that is gone (killed: ``lease_owner.py``)."""
        self._claim(take_over=True)

    def renew(self) -> None:
        """Push our expiry ttl_s into the future; raises LockHeldError if someone took over (a
        renewal never takes the lease back from another holder, gone or not)."""
        self._claim(take_over=False)

    def release(self) -> None:
        """Give the lease up if we still hold it."""
        with self.engine.begin() as conn:
            conn.execute(
                delete(_leases).where(_leases.c.key == self.key, _leases.c.owner == self.owner)
            )

    def holder(self) -> tuple[str, datetime] | None:
        """The current row's owner and expiry (expired or not), or None when nobody has one."""
        with self.engine.begin() as conn:
            return self._holder(conn)

    def __enter__(self) -> Lease:
        if self._loop is None:
            raise RuntimeError(
                f"a held lease renews on the night's loop: Lease({self.key!r}, loop=...)"
            )
        night = self._loop
        self.acquire()
        self._lost = None
        self._lapsed = None
        self.last_error = None
        self._held = True
        try:
            self._renewer = night.submit(self._renew_until_stopped(night))
        except BaseException:  # no renewals (the loop closed): not held to its ttl either
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with self._renewing:  # a renewal in flight ends first: none comes after the release
            self._held = False
        if self._renewer is not None:
            self._renewer.cancel()
            self._renewer = None
        self._release_when_answered()

    def _release_when_answered(self) -> None:
        """Give the lease back; while the database does not answer, try again until the lease
        would have run out on its own (the next night need not wait out the ttl)."""
        renewed_at = self._renewed_at
        end = renewed_at + timedelta(seconds=self.ttl_s) if renewed_at else self._clock()
        delay = 0.2
        while True:
            try:
                self.release()
                return
            except SQLAlchemyError as error:
                left = (end - self._clock()).total_seconds()
                if left <= 0:
                    # it has run out on its own; the night's own error wins
                    _log.warning("releasing the lease on %r failed: %s", self.key, _one_line(error))
                    return
                time.sleep(min(delay, left))
                delay = min(delay * 2, 5.0)

    def _claim(self, *, take_over: bool) -> None:
        # a row deleted between our failed upsert and the holder lookup (PostgreSQL, read
        # committed) is simply free again: try once more
        for _ in range(3):
            asked_at = self._clock()  # before the statement: a lapse is never seen late
            now, expires_at = self._now_in_sql(asked_at)
            with self.engine.begin() as conn:
                insert = _INSERTS[self.engine.dialect.name](_leases).values(
                    key=self.key, owner=self.owner, expires_at=expires_at
                )
                upsert = insert.on_conflict_do_update(
                    index_elements=[_leases.c.key],
                    set_={"owner": insert.excluded.owner, "expires_at": insert.excluded.expires_at},
                    where=or_(_leases.c.expires_at < now, _leases.c.owner == self.owner),
                )
                # RETURNING, not rowcount: drivers disagree on rowcount for an upsert
                if conn.execute(upsert.returning(_leases.c.owner)).first() is not None:
                    self._renewed_at = asked_at
                    return
                holder = self._holder(conn)
                then = db_now(conn, lambda at=asked_at: at)
                if take_over and holder is not None and gone_here(holder[0]):
                    if self._take_from(conn, holder[0], expires_at):
                        self._renewed_at = asked_at
                        return
                    continue  # another night took it first, or its holder renewed: look again
            if holder is not None:
                owner, expires_at = holder
                left = max(0.0, (expires_at - then).total_seconds())
                raise LockHeldError(self.key, owner, left, who=described(owner))
        raise LockHeldError(self.key, "unknown", self.ttl_s)

    def _take_from(self, conn: Connection, gone: str, expires_at: Any) -> bool:
        """Take the lease from ``gone``, a holder of this machine whose process is dead: only
        while the row is still its (of two reruns, one takes it)."""
        taken = conn.execute(
            update(_leases)
            .where(_leases.c.key == self.key, _leases.c.owner == gone)
            .values(owner=self.owner, expires_at=expires_at)
            .returning(_leases.c.owner)
        ).first()
        if taken is not None:
            _log.warning(
                "took over the lease on %r from %s: its process is gone (killed?)",
                self.key,
                described(gone),
            )
        return taken is not None

    def _now_in_sql(self, host_now: datetime) -> tuple[Any, Any]:
        """Now and our expiry as the statement sees them: on the server's clock where hosts
        share one."""
        ttl = timedelta(seconds=self.ttl_s)
        if shares_clock(self.engine):
            return func.now(), func.now() + literal(ttl, Interval())
        return (
            bindparam("now", host_now, type_=UTCDateTime()),
            bindparam("expires_at", host_now + ttl, type_=UTCDateTime()),
        )

    def _holder(self, conn: Connection) -> tuple[str, datetime] | None:
        row = conn.execute(
            select(_leases.c.owner, _leases.c.expires_at).where(_leases.c.key == self.key)
        ).first()
        return (row.owner, row.expires_at) if row else None

    async def _renew_until_stopped(self, night: NightLoop) -> None:
        loop = asyncio.get_running_loop()
        pool = night.blocking("nightshift-lease", 1)
        while True:
            await asyncio.sleep(self.ttl_s / 3)
            if not await loop.run_in_executor(pool, self._renew_once):
                return

    def _renew_once(self) -> bool:
        """Renew while held; False once the lease is lost or given back."""
        with self._renewing:
            if not self._held:
                return False
            try:
                self.renew()
            except LockHeldError as exc:
                self._lost = exc
                _log.error("lost the lease: %s", exc)
                return False
            except Exception as exc:  # any error: say so and retry; lost_reason reports a lapse
                error = _one_line(exc)
                _log.warning("renewing the lease on %r failed: %s", self.key, error)
                self.last_error = error
        return True


def _one_line(error: BaseException) -> str:
    """An error as one short line (SQLAlchemy's own text carries the SQL and a URL)."""
    cause = getattr(error, "orig", None) or error
    text = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {text[0] if text else ''}"
