"""The notification outbox: nothing a night meant to say is lost while Slack is down.

Every message is written here before it is sent (``add``, claimed by its writer for a while so a
concurrent flush leaves it alone), and marked sent only after Slack accepted it (``mark_sent``).
A message Slack did not accept is released with its error and waits for ``flush``, which delivers
what is waiting oldest first, claiming each row atomically so two flushers never both send it.

The window: a crash after Slack accepted a message but before ``mark_sent`` committed leaves the
row unsent; once its claim expires the next flush sends it again. So a message arrives at least
once, and at most once more than that per such crash (never silently dropped).

``notify_threads`` keeps each night's alert thread: the ``ts`` of its first alert per channel.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import sqlalchemy as sa

from nightshift.store.db import UTCDateTime, dialect_insert

__all__ = ["FlushReport", "Outbox", "OutboxItem", "Result"]

_metadata = sa.MetaData()

_outbox = sa.Table(
    "notify_outbox",
    _metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("catalogue", sa.String(300), nullable=False),
    sa.Column("night", sa.String(32), nullable=False),
    sa.Column("route", sa.String(16), nullable=False),  # failed | partial | ok | alert
    sa.Column("destination", sa.Text, nullable=False),  # the Route as JSON: names, no secrets
    sa.Column("slack", sa.Text, nullable=False),  # notify.slack as JSON: names, no secrets
    sa.Column("kind", sa.String(16), nullable=False),  # digest | alert | recovered
    sa.Column("label", sa.String(200), nullable=True),
    sa.Column("thread", sa.Boolean, nullable=False),  # a reply in the night's alert thread
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("blocks", sa.Text, nullable=False),
    sa.Column("created_at", UTCDateTime(), nullable=False),
    sa.Column("claimed_until", UTCDateTime(), nullable=True),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("last_error", sa.Text, nullable=True),
    sa.Column("sent_at", UTCDateTime(), nullable=True),
    sa.Column("ts", sa.String(32), nullable=True),
    # the incident it belongs to (``cli/queued#1``): its opening message, or a reply in its thread
    sa.Column("incident", sa.String(120), nullable=True),
    sa.Index("ix_notify_outbox_sent_at_id", "sent_at", "id"),
    sa.Index("ix_notify_outbox_catalogue_night", "catalogue", "night", "kind"),
)

_threads = sa.Table(
    "notify_threads",
    _metadata,
    sa.Column("catalogue", sa.String(300), primary_key=True),
    sa.Column("night", sa.String(32), primary_key=True),
    sa.Column("channel", sa.String(100), primary_key=True),
    sa.Column("ts", sa.String(32), nullable=False),
    sa.Column("at", UTCDateTime(), nullable=False),
)


@dataclass(frozen=True)
class OutboxItem:
    """One message as the outbox keeps it (``destination`` and ``slack`` hold names only)."""

    id: int
    catalogue: str
    night: str
    route: str
    destination: dict[str, Any]
    slack: dict[str, Any]
    kind: str
    label: str | None
    thread: bool
    text: str
    blocks: list[dict[str, Any]]
    created_at: datetime
    attempts: int = 0
    last_error: str | None = None
    sent_at: datetime | None = None
    ts: str | None = None
    incident: str | None = None  # the incident's key: its opening message, or a reply to it


class Result(Protocol):
    """What a delivery said (``nightshift.notify.send.Delivery``): ok with a ``ts``, or why not."""

    @property
    def ok(self) -> bool: ...
    @property
    def ts(self) -> str | None: ...
    @property
    def error(self) -> str | None: ...
    @property
    def permanent(self) -> bool: ...


@dataclass
class FlushReport:
    """What one flush did: ids sent, and (id, error) of those still waiting."""

    sent: list[int] = field(default_factory=list)
    kept: list[tuple[int, str]] = field(default_factory=list)


class Outbox:
    """The outbox behind an engine (the ledger's: a ``Ledger`` on the URL upgrades the schema)."""

    def __init__(self, engine: sa.Engine, clock: Callable[[], datetime] | None = None) -> None:
        self.engine = engine
        self._now = clock or (lambda: datetime.now(UTC))

    def add(self, *, claim_s: float = 0.0, **values: Any) -> int:
        """Keep a new message (``OutboxItem`` fields but id), claimed ``claim_s`` by its writer."""
        now = self._now()
        row = {**values, "destination": json.dumps(values["destination"]),
               "slack": json.dumps(values["slack"]), "blocks": json.dumps(values["blocks"]),
               "created_at": now, "attempts": 0,
               "claimed_until": now + timedelta(seconds=claim_s) if claim_s else None}  # fmt: skip
        with self.engine.begin() as conn:
            return int(
                conn.execute(_outbox.insert().values(**row).returning(_outbox.c.id)).one()[0]
            )

    def claim(self, item_id: int, for_s: float = 300.0) -> bool:
        """Take a waiting message for ``for_s``; False when it is sent or someone else holds it."""
        o = _outbox.c
        now = self._now()
        statement = (
            _outbox.update()
            .where(o.id == item_id, o.sent_at.is_(None))
            .where(sa.or_(o.claimed_until.is_(None), o.claimed_until < now))
            .values(claimed_until=now + timedelta(seconds=for_s))
        )
        with self.engine.begin() as conn:
            return conn.execute(statement).rowcount == 1

    def mark_sent(self, item_id: int, ts: str | None = None) -> None:
        """Slack accepted it: never send it again."""
        values = {"sent_at": self._now(), "ts": ts, "claimed_until": None, "last_error": None}
        with self.engine.begin() as conn:
            conn.execute(_outbox.update().where(_outbox.c.id == item_id).values(**values))

    def release(self, item_id: int, error: str) -> None:
        """Slack did not accept it: count the attempt, keep the error, let a flush take it."""
        o = _outbox.c
        values = {"claimed_until": None, "last_error": error[:2000], "attempts": o.attempts + 1}
        with self.engine.begin() as conn:
            conn.execute(_outbox.update().where(o.id == item_id).values(**values))

    def pending(self, catalogue: str | None = None) -> list[OutboxItem]:
        """Messages not sent yet, oldest first."""
        return self._items(_outbox.c.sent_at.is_(None), catalogue)

    def items(self, catalogue: str | None = None) -> list[OutboxItem]:
        """Every message kept, sent or not, oldest first."""
        return self._items(sa.true(), catalogue)

    def labels(self, catalogue: str, night: str, kind: str) -> set[str]:
        """The labels of one night's messages of ``kind`` (e.g. who was alerted), sent or not."""
        o = _outbox.c
        query = sa.select(o.label).where(o.catalogue == catalogue, o.night == night, o.kind == kind)
        with self.engine.begin() as conn:
            return {row.label for row in conn.execute(query) if row.label}

    def thread_ts(self, catalogue: str, night: str, channel: str) -> str | None:
        """The ``ts`` of the night's first alert in ``channel``, when one was posted."""
        t = _threads.c
        query = sa.select(t.ts).where(t.catalogue == catalogue, t.night == night)
        with self.engine.begin() as conn:
            return conn.execute(query.where(t.channel == channel)).scalar()

    def incident_ts(self, catalogue: str, night: str, incident: str) -> str | None:
        """The ``ts`` of the incident's opening message, once Slack accepted it."""
        o = _outbox.c
        query = sa.select(o.ts).where(
            o.catalogue == catalogue, o.night == night, o.incident == incident,
            o.kind == "incident", o.ts.is_not(None),
        ).order_by(o.id)  # fmt: skip
        with self.engine.begin() as conn:
            return conn.execute(query).scalars().first()

    def first_digest(
        self, catalogue: str, night: str, before: int | None = None
    ) -> OutboxItem | None:
        """The night's first digest Slack accepted in a channel (with its ``ts``): a retry's
        digest replies in its thread. ``before``: only items older than that id."""
        o = _outbox.c
        where = sa.and_(
            o.night == night, o.kind == "digest", o.sent_at.is_not(None), o.ts.is_not(None)
        )
        if before is not None:
            where = sa.and_(where, o.id < before)
        for item in self._items(where, catalogue):
            if item.destination.get("channel"):
                return item
        return None

    def start_thread(self, catalogue: str, night: str, channel: str, ts: str) -> str:
        """Remember ``ts`` as the night's thread unless one is there; return the thread's ``ts``."""
        row = {"catalogue": catalogue, "night": night, "channel": channel, "ts": ts,
               "at": self._now()}  # fmt: skip
        insert = dialect_insert(self.engine, _threads).values(**row)
        with self.engine.begin() as conn:
            conn.execute(insert.on_conflict_do_nothing())
        return self.thread_ts(catalogue, night, channel) or ts

    def flush(
        self,
        deliver: Callable[[OutboxItem], Result],
        catalogue: str | None = None,
        claim_s: float = 300.0,
    ) -> FlushReport:
        """Deliver what waits, oldest first; each marked sent only once ``deliver`` says ok.

        A failure that is not ``permanent`` (Slack down, rate limited) stops the flush: the rest
        would fail alike, and order is kept. A permanent one (a bad token or channel) skips the
        other messages to the same destination and goes on with the rest.
        """
        report = FlushReport()
        blocked: set[str] = set()
        for item in self.pending(catalogue):
            key = json.dumps([item.slack, item.destination], sort_keys=True)
            if key in blocked or not self.claim(item.id, claim_s):
                continue
            result = deliver(item)
            if result.ok:
                self.mark_sent(item.id, result.ts)
                report.sent.append(item.id)
                continue
            error = result.error or "not accepted"
            self.release(item.id, error)
            report.kept.append((item.id, error))
            if not result.permanent:
                break
            blocked.add(key)
        return report

    def _items(self, where: Any, catalogue: str | None) -> list[OutboxItem]:
        query = sa.select(_outbox).where(where).order_by(_outbox.c.id)
        if catalogue is not None:
            query = query.where(_outbox.c.catalogue == catalogue)
        with self.engine.begin() as conn:
            return [_item(row._asdict()) for row in conn.execute(query)]


def _item(row: dict[str, Any]) -> OutboxItem:
    row.pop("claimed_until", None)
    for name in ("destination", "slack", "blocks"):
        row[name] = json.loads(row[name])
    return OutboxItem(**row)
