"""Which night holds which Prefect concurrency slot lease, so the next night can heal a dead one's.

A night that dies with kill -9 keeps its slots: Prefect's temporary server keeps slot leases in
its own memory (gone with it, ``active_slots`` stays taken in its database for good); a real
server frees them only when their lease (at least 60 s) runs out. So each slot lease a night
takes is written here with its holder, the owner of the night's lease (``store/lease.py``), and
the next night of that limit gives back the slots of every holder whose night lease is gone.
This module is the only writer of ``slot_leases``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa

from nightshift.store.db import UTCDateTime, db_now
from nightshift.store.lease import LEASES_TABLE

__all__ = ["Orphan", "SlotHolders"]

_metadata = sa.MetaData()

_slots = sa.Table(
    "slot_leases",
    _metadata,
    sa.Column("lease_id", sa.String(64), primary_key=True),
    sa.Column("limit_name", sa.String(300), nullable=False),
    sa.Column("holder", sa.String(300), nullable=False),  # the night lease's owner
    sa.Column("catalogue", sa.String(300), nullable=False),  # the night lease's key
    sa.Column("server", sa.String(500), nullable=False),  # where: API URL, or temporary:HOME
    sa.Column("taken_at", UTCDateTime(), nullable=False),
    sa.Index("ix_slot_leases_holder", "holder"),
)


@dataclass(frozen=True)
class Orphan:
    """A slot lease whose night is gone."""

    lease_id: str
    limit_name: str
    holder: str


class SlotHolders:
    """One night's record of the slot leases it holds, and the healer of dead nights' ones."""

    def __init__(self, engine: sa.Engine, holder: str, catalogue: str, server: str) -> None:
        self.engine = engine
        self.holder = holder
        self.catalogue = catalogue
        self.server = server  # the Prefect API URL, or ``temporary:<PREFECT_HOME>``

    def taken(self, limit_name: str, lease_id: str) -> None:
        """This night took ``lease_id`` of ``limit_name``."""
        row = {
            "lease_id": lease_id,
            "limit_name": limit_name,
            "holder": self.holder,
            "catalogue": self.catalogue,
            "server": self.server,
            "taken_at": datetime.now(UTC),
        }
        with self.engine.begin() as conn:
            conn.execute(sa.insert(_slots).values(row))

    def given_back(self, lease_id: str) -> None:
        """This night released ``lease_id``."""
        with self.engine.begin() as conn:
            conn.execute(sa.delete(_slots).where(_slots.c.lease_id == lease_id))

    def orphans(self, now: datetime | None = None) -> list[Orphan]:
        """Slot leases on this server whose holder holds no unexpired night lease (it died),
        on the clock the night leases expire by (the database's: ``db_now``)."""
        now = now or db_now(self.engine)
        alive = sa.select(LEASES_TABLE.c.owner).where(LEASES_TABLE.c.expires_at >= now)
        query = (
            sa.select(_slots.c.lease_id, _slots.c.limit_name, _slots.c.holder)
            .where(_slots.c.server == self.server, _slots.c.holder != self.holder)
            .where(_slots.c.holder.not_in(alive))
            .order_by(_slots.c.taken_at)
        )
        with self.engine.begin() as conn:
            return [Orphan(*row) for row in conn.execute(query)]

    def claim(self, orphan: Orphan) -> bool:
        """Take ``orphan`` off the record; False if another night already did (it heals it)."""
        with self.engine.begin() as conn:
            deleted = conn.execute(sa.delete(_slots).where(_slots.c.lease_id == orphan.lease_id))
        return bool(deleted.rowcount)
