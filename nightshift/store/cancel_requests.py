"""What ``nightshift cancel`` asked of a night: one row per job, with why and when.

Written only by ``nightshift cancel`` (``add``); read by the live night, which ends a job it sees
cancelled with the request's reason and submits no job a request names.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa

from nightshift.store.db import UTCDateTime

__all__ = ["CancelRequest", "CancelRequests"]

_metadata = sa.MetaData()

_requests = sa.Table(
    "cancel_requests",
    _metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("catalogue", sa.String(300), nullable=False),
    sa.Column("night", sa.String(32), nullable=False),
    sa.Column("label", sa.String(200), nullable=False),
    sa.Column("external_id", sa.String(500), nullable=True),  # None: not submitted yet
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("requested_at", UTCDateTime(), nullable=False),
    sa.Index("ix_cancel_requests_catalogue_night", "catalogue", "night", "label"),
)


@dataclass(frozen=True)
class CancelRequest:
    """One job of a night someone asked to cancel."""

    label: str
    external_id: str | None
    reason: str
    requested_at: datetime


class CancelRequests:
    """The cancel requests of one catalogue, in the ledger's database."""

    def __init__(self, engine: sa.Engine, catalogue: str) -> None:
        self.engine = engine
        self.catalogue = catalogue

    def add(self, night: str, requests: Iterable[CancelRequest]) -> None:
        """Record requests (one transaction)."""
        rows = [
            {
                "catalogue": self.catalogue,
                "night": night,
                "label": r.label,
                "external_id": r.external_id,
                "reason": r.reason,
                "requested_at": r.requested_at.astimezone(UTC),
            }
            for r in requests
        ]
        if rows:
            with self.engine.begin() as conn:
                conn.execute(sa.insert(_requests), rows)

    def of_night(self, night: str) -> dict[str, CancelRequest]:
        """The latest request per label of ``night``."""
        query = (
            sa.select(
                _requests.c.label,
                _requests.c.external_id,
                _requests.c.reason,
                _requests.c.requested_at,
            )
            .where(_requests.c.catalogue == self.catalogue, _requests.c.night == night)
            .order_by(_requests.c.id)
        )
        with self.engine.begin() as conn:
            return {row.label: CancelRequest(*row) for row in conn.execute(query)}
