"""What each run of a night expected of itself when it started: one row per run.

Written only by the night, at its start (``save``), and forgotten by retention (``prune``); read
by the night report and by ``nightshift plan --accuracy``, which hold it against the ledger's
transitions of that run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from nightshift.store.db import UTCDateTime

__all__ = ["Forecasts", "StoredForecast"]

_metadata = sa.MetaData()

_forecasts = sa.Table(
    "forecasts",
    _metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("catalogue", sa.String(300), nullable=False),
    sa.Column("night", sa.String(32), nullable=False),
    sa.Column("run_id", sa.String(64), nullable=False),
    sa.Column("made_at", UTCDateTime(), nullable=False),
    sa.Column("start", UTCDateTime(), nullable=False),
    sa.Column("finish_p50", UTCDateTime(), nullable=False),
    sa.Column("finish_p95", UTCDateTime(), nullable=False),
    sa.Column("critical_path", sa.Text, nullable=False),  # JSON list of labels
    sa.Column("body", sa.Text, nullable=False),  # JSON object: the jobs' forecasts
    sa.Index("ix_forecasts_catalogue_night", "catalogue", "night", "id"),
)

_FIELDS = [c for c in _forecasts.c if c.name not in ("id", "catalogue")]


@dataclass(frozen=True)
class StoredForecast:
    """One run's forecast of its night, as kept."""

    night: str
    run_id: str
    made_at: datetime
    start: datetime
    finish_p50: datetime
    finish_p95: datetime
    critical_path: list[str]
    body: dict[str, Any] = field(default_factory=dict)


class Forecasts:
    """The forecasts of one catalogue, in the ledger's database."""

    def __init__(self, engine: sa.Engine, catalogue: str) -> None:
        self.engine = engine
        self.catalogue = catalogue

    def save(self, forecast: StoredForecast) -> None:
        """Keep a run's forecast (one insert)."""
        row = {
            "catalogue": self.catalogue,
            "night": forecast.night,
            "run_id": forecast.run_id[:64],
            "made_at": forecast.made_at.astimezone(UTC),
            "start": forecast.start.astimezone(UTC),
            "finish_p50": forecast.finish_p50.astimezone(UTC),
            "finish_p95": forecast.finish_p95.astimezone(UTC),
            "critical_path": json.dumps(forecast.critical_path),
            "body": json.dumps(forecast.body, sort_keys=True),
        }
        with self.engine.begin() as conn:
            conn.execute(sa.insert(_forecasts), [row])

    def of_night(self, night: str) -> list[StoredForecast]:
        """Every forecast of ``night``, oldest first (one per run)."""
        query = (
            sa.select(*_FIELDS)
            .where(_forecasts.c.catalogue == self.catalogue, _forecasts.c.night == night)
            .order_by(_forecasts.c.id)
        )
        with self.engine.begin() as conn:
            return [_stored(row._asdict()) for row in conn.execute(query)]

    def prune(
        self, before: datetime, *, every_catalogue: bool = False, dry_run: bool = False
    ) -> int:
        """Forget the forecasts made before ``before`` (this catalogue's, or ``every_catalogue``'s):
        retention's, as for the ledger's rows; how many (would) go."""
        where = [_forecasts.c.made_at < before.astimezone(UTC)]
        if not every_catalogue:
            where.append(_forecasts.c.catalogue == self.catalogue)
        with self.engine.begin() as conn:
            if dry_run:
                count = sa.select(sa.func.count()).select_from(_forecasts).where(*where)
                return int(conn.execute(count).scalar_one())
            return int(conn.execute(sa.delete(_forecasts).where(*where)).rowcount)

    def nights(self) -> list[str]:
        """The nights with a forecast, newest first."""
        query = (
            sa.select(_forecasts.c.night)
            .where(_forecasts.c.catalogue == self.catalogue)
            .group_by(_forecasts.c.night)
            .order_by(_forecasts.c.night.desc())
        )
        with self.engine.begin() as conn:
            return [str(night) for night in conn.execute(query).scalars()]


def _stored(values: dict[str, Any]) -> StoredForecast:
    values["critical_path"] = json.loads(values["critical_path"])
    values["body"] = json.loads(values["body"])
    return StoredForecast(**values)
