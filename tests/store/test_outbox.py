"""The notification outbox on SQLite and PostgreSQL: order, claims, marking, threads."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from nightshift.store.ledger import Ledger
from nightshift.store.outbox import Outbox, OutboxItem
from tests.support import FakeClock

NIGHT = "2026-11-29"


@dataclass(frozen=True)
class Said:
    ok: bool
    ts: str | None = None
    error: str | None = None
    permanent: bool = False


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2026, 11, 29, 1, tzinfo=UTC))


@pytest.fixture
def outbox(db_url: str, clock: FakeClock) -> Iterator[Outbox]:
    ledger = Ledger(db_url)
    yield Outbox(ledger.engine, clock=clock)
    ledger.close()


def _add(outbox: Outbox, text: str, channel: str = "#a", claim_s: float = 0.0) -> int:
    return outbox.add(
        catalogue="nightly", night=NIGHT, route="partial", destination={"channel": channel},
        slack={"token": "SLACK_BOT_TOKEN"}, kind="digest", label=None, thread=False, text=text,
        blocks=[{"type": "section", "text": {"type": "mrkdwn", "text": text}}], claim_s=claim_s,
    )  # fmt: skip


def test_flush_delivers_oldest_first_and_marks_each_sent_once(outbox: Outbox) -> None:
    ids = [_add(outbox, f"m{i}") for i in range(3)]
    seen: list[str] = []

    def deliver(item: OutboxItem) -> Said:
        seen.append(item.text)
        return Said(True, ts=f"1.{item.id}")

    report = outbox.flush(deliver)
    again = outbox.flush(deliver)

    assert report.sent == ids and again.sent == []
    assert seen == ["m0", "m1", "m2"]
    assert [item.ts for item in outbox.items()] == [f"1.{i}" for i in ids]
    assert outbox.items()[0].blocks[0]["text"]["text"] == "m0"


def test_a_transient_failure_stops_the_flush_and_keeps_the_order(outbox: Outbox) -> None:
    first, second = _add(outbox, "m0"), _add(outbox, "m1")

    report = outbox.flush(lambda item: Said(False, error="cannot reach Slack"))

    assert report.kept == [(first, "cannot reach Slack")] and report.sent == []
    [a, b] = outbox.pending()
    assert (a.id, a.attempts, a.last_error) == (first, 1, "cannot reach Slack")
    assert (b.id, b.attempts) == (second, 0)


def test_a_permanent_failure_skips_its_destination_only(outbox: Outbox) -> None:
    bad1, good, bad2 = _add(outbox, "m0", "#gone"), _add(outbox, "m1"), _add(outbox, "m2", "#gone")
    calls: list[int] = []

    def deliver(item: OutboxItem) -> Said:
        calls.append(item.id)
        if item.destination["channel"] == "#gone":
            return Said(False, error="no channel", permanent=True)
        return Said(True)

    report = outbox.flush(deliver)

    assert calls == [bad1, good] and report.sent == [good]
    assert [item.id for item in outbox.pending()] == [bad1, bad2]


def test_a_claim_keeps_a_flush_away_until_it_expires(outbox: Outbox, clock: FakeClock) -> None:
    item = _add(outbox, "m0", claim_s=300)

    assert outbox.flush(lambda i: Said(True)).sent == []
    clock.advance(301)  # the writer crashed: its claim ran out
    assert outbox.claim(item, 60) is True
    assert outbox.claim(item, 60) is False  # a second flusher loses
    outbox.mark_sent(item, "9.9")
    clock.advance(120)
    assert outbox.claim(item, 60) is False  # sent: never again


def test_a_nights_thread_is_the_first_ts_kept(outbox: Outbox) -> None:
    assert outbox.thread_ts("nightly", NIGHT, "#a") is None

    assert outbox.start_thread("nightly", NIGHT, "#a", "1.1") == "1.1"
    assert outbox.start_thread("nightly", NIGHT, "#a", "2.2") == "1.1"  # a racer joins it
    assert outbox.thread_ts("nightly", NIGHT, "#b") is None
    assert outbox.thread_ts("other", NIGHT, "#a") is None


def test_the_nights_first_digest_is_the_first_one_slack_accepted(outbox: Outbox) -> None:
    assert outbox.first_digest("nightly", NIGHT) is None
    waiting = _add(outbox, "never sent")
    first, second = _add(outbox, "first"), _add(outbox, "the retry's")
    outbox.mark_sent(first, "100.1")
    outbox.mark_sent(second, "100.2")
    found = outbox.first_digest("nightly", NIGHT)
    assert found is not None and (found.id, found.ts) == (first, "100.1")
    assert outbox.first_digest("nightly", NIGHT, before=first) is None
    assert outbox.first_digest("nightly", "2026-11-30") is None
    assert waiting < first


def test_a_nights_job_rows_are_read_together(db_url: str) -> None:
    ledger = Ledger(db_url, "nightly")
    other = Ledger(db_url, "other")
    at = datetime(2026, 11, 29, 2, tzinfo=UTC)
    ledger.record_submit(NIGHT, "b", "command", "c-2", 1, at=at)
    ledger.record_submit(NIGHT, "a", "command", "c-1", 1, at=at)
    ledger.record_state(NIGHT, "a", "succeeded", finished_at=at)
    other.record_submit(NIGHT, "z", "command", "c-9", 1, at=at)
    rows = ledger.jobs_of(NIGHT)
    assert [(r.label, r.state, r.external_id) for r in rows] == [
        ("a", "succeeded", "c-1"),
        ("b", "queued", "c-2"),  # a submit records the job as queued
    ]
    assert ledger.jobs_of("2026-11-30") == []
    ledger.close()
    other.close()
