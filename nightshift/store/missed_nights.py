"""The nights named missed: written only here (``name``, ``announced``), read by the nightly
run's missed-night check, ``nightshift status``, the watchdog and the night report.

A night is named once: the first run to find it missed names it; a later run that finds it
named says nothing more. Whether a named night later ran (a backfill) is the ledger's jobs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa

from nightshift.store.db import UTCDateTime, dialect_insert

__all__ = ["MISSED_NIGHTS_TABLE", "MissedNight", "MissedNights"]

_metadata = sa.MetaData()

_missed = sa.Table(
    "missed_nights",
    _metadata,
    sa.Column("catalogue", sa.String(300), primary_key=True),
    sa.Column("night", sa.String(32), primary_key=True),
    sa.Column("scheduled_at", UTCDateTime(), nullable=True),
    sa.Column("named_at", UTCDateTime(), nullable=False),
    sa.Column("named_by", sa.String(300), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("announced_at", UTCDateTime(), nullable=True),
)

MISSED_NIGHTS_TABLE = _missed  # for readers (retention); writes go through MissedNights


@dataclass(frozen=True)
class MissedNight:
    """A night named missed: its slot, when and by which run, why, and when it was announced."""

    night: str
    scheduled_at: datetime | None
    named_at: datetime
    named_by: str
    reason: str
    announced_at: datetime | None


class MissedNights:
    """The missed nights of one catalogue, in the ledger's database."""

    def __init__(self, engine: sa.Engine, catalogue: str) -> None:
        self.engine = engine
        self.catalogue = catalogue

    def name(
        self,
        nights: Iterable[tuple[str, datetime | None]],
        *,
        by: str,
        reason: str,
        at: datetime | None = None,
    ) -> list[str]:
        """Name each (night, slot) missed; returns the nights newly named (a night named before
        keeps its first naming)."""
        rows = [
            {
                "catalogue": self.catalogue,
                "night": night,
                "scheduled_at": slot,
                "named_at": at or datetime.now(UTC),
                "named_by": by,
                "reason": reason,
            }
            for night, slot in nights
        ]
        if not rows:
            return []
        insert = dialect_insert(self.engine, _missed).on_conflict_do_nothing()
        new: list[str] = []
        with self.engine.begin() as conn:
            for row in rows:
                done = conn.execute(insert.values(**row).returning(_missed.c.night)).first()
                if done is not None:
                    new.append(done.night)
        return sorted(new)

    def announced(self, nights: Iterable[str], at: datetime | None = None) -> None:
        """Say that the one alert naming ``nights`` was sent (or kept in the outbox)."""
        nights = list(nights)
        if not nights:
            return
        with self.engine.begin() as conn:
            conn.execute(
                sa.update(_missed)
                .where(_missed.c.catalogue == self.catalogue, _missed.c.night.in_(nights))
                .values(announced_at=at or datetime.now(UTC))
            )

    def all(self, since: str = "") -> list[MissedNight]:
        """The nights named missed from ``since`` (a night) on, oldest first."""
        m = _missed.c
        query = (
            sa.select(m.night, m.scheduled_at, m.named_at, m.named_by, m.reason, m.announced_at)
            .where(m.catalogue == self.catalogue, m.night >= since)
            .order_by(m.night)
        )
        with self.engine.begin() as conn:
            return [MissedNight(*row) for row in conn.execute(query)]

    def prune(
        self, before: datetime, *, every_catalogue: bool = False, dry_run: bool = False
    ) -> int:
        """Forget the nights named before ``before`` (this catalogue's, or
        ``every_catalogue``'s): retention's, with the ledger's rows; how many (would) go."""
        where = [_missed.c.named_at < before.astimezone(UTC)]
        if not every_catalogue:
            where.append(_missed.c.catalogue == self.catalogue)
        with self.engine.begin() as conn:
            if dry_run:
                count = sa.select(sa.func.count()).select_from(_missed).where(*where)
                return int(conn.execute(count).scalar_one())
            return int(conn.execute(sa.delete(_missed).where(*where)).rowcount)
