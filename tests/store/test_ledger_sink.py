"""The ledger sink's group commit: changes published side by side share a transaction, each is
written before its publisher goes on, and a bad row fails only itself."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from nightshift.engine.events import JobChanged
from nightshift.engine.ledger_sink import LedgerSink
from nightshift.loop import NightLoop
from nightshift.store.ledger import Ledger, TransitionRow
from tests.support import wait_until

T0 = datetime(2026, 11, 29, 1, 0, tzinfo=UTC)
NIGHT = "2026-11-29"
THREADS = 16


class FirstWriteWaits(Ledger):
    """A ledger whose first write waits until every publisher has queued behind it. ``batches``:
    the transactions the writer began, a failed one's rows written again one by one not
    counted (the bad row may be in the first batch, when a loaded machine queued it early)."""

    sink: LedgerSink
    bad_label: str | None = None
    batches: list[int]
    _again = 0  # rows of a failed batch still to be written again, one by one

    def transitions(self, rows: Iterable[TransitionRow]) -> None:
        rows = list(rows)
        if self._again:
            self._again -= 1
        else:
            self.batches.append(len(rows))
        if not getattr(self, "_opened", False):
            self._opened = True
            wait_until(lambda: self.sink._queued >= THREADS, what="every publisher queued")
        if any(row[2] == self.bad_label for row in rows):
            if len(rows) > 1:
                self._again = len(rows)
            raise ValueError(f"bad row for {self.bad_label}")
        super().transitions(rows)


def change(label: str, state: str, seconds: float) -> JobChanged:
    at = T0 + timedelta(seconds=seconds)
    return JobChanged(NIGHT, "nightly.yaml", label, "cli", 1, f"x-{label}", state, at, None)


def publish_night(sink: LedgerSink, label: str, seen: dict[str, list[str]], ledger: Ledger) -> None:
    for state, seconds in [("queued", 0), ("running", 10), ("succeeded", 70)]:
        try:
            sink(change(label, state, seconds))
        except ValueError:
            continue
        # written before the publisher goes on: a reader sees it at once
        seen[label].append(ledger.dwells(NIGHT, label)[-1].to_state)


@pytest.mark.parametrize("bad", [None, "job-03"])
def test_changes_published_side_by_side_share_transactions(
    db_url: str, bad: str | None, night_loop: NightLoop
) -> None:
    ledger = FirstWriteWaits(db_url, "nightly.yaml")
    ledger.bad_label = bad
    ledger.batches = []
    sink = LedgerSink(ledger, "run-1", loop=night_loop)
    ledger.sink = sink
    labels = [f"job-{i:02d}" for i in range(THREADS)]
    seen: dict[str, list[str]] = {x: [] for x in labels}
    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(lambda x: publish_night(sink, x, seen, ledger), labels))
    # the first write took what had queued when the writer began (a row or two); the others'
    # first changes, queued meanwhile, share the next transaction (a batch with the bad row
    # among them is written again one by one, not counted; its publisher goes on to its next
    # change, which may join them too): sixteen first changes, two transactions; or one, when
    # every publisher had queued before the writer began (CI, a loaded machine)
    first, second = ledger.batches[:2]
    assert first == THREADS or first + second >= THREADS, ledger.batches
    for label in labels:
        chain = [(t.from_state, t.to_state, t.dwell_s) for t in ledger.dwells(NIGHT, label)]
        if label == bad:
            assert chain == [] and seen[label] == []  # its rows failed, alone
            continue
        assert chain == [
            (None, "queued", None),
            ("queued", "running", 10.0),
            ("running", "succeeded", 60.0),
        ]
        assert seen[label] == ["queued", "running", "succeeded"]
    ledger.close()


def test_a_lone_change_is_written_at_once(db_url: str, night_loop: NightLoop) -> None:
    ledger = Ledger(db_url, "nightly.yaml")
    sink = LedgerSink(ledger, "run-1", loop=night_loop)
    sink(change("etl", "queued", 0))
    assert [t.to_state for t in ledger.dwells(NIGHT)] == ["queued"]
    ledger.close()


class FullDisk(Ledger):
    """A ledger whose writes fail as SQLite's do on a full disk, until ``room`` is set."""

    room = False

    def transitions(self, rows: Iterable[TransitionRow]) -> None:
        if not self.room:
            import sqlite3

            import sqlalchemy as sa

            raise sa.exc.OperationalError("INSERT", {}, sqlite3.OperationalError(
                "database or disk is full"
            ))  # fmt: skip
        super().transitions(rows)


def test_a_full_disk_is_named_at_once_and_a_stopped_night_stops_waiting_for_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, night_loop: NightLoop
) -> None:
    import logging
    import threading

    path = tmp_path / "ledger.sqlite3"
    ledger = FullDisk(f"sqlite:///{path}", "nightly.yaml")
    sink = LedgerSink(ledger, "run-1", loop=night_loop)
    done = threading.Event()

    def publish() -> None:
        with contextlib.suppress(Exception):  # the publisher logs a row it could not write
            sink(change("etl", "queued", 0))
        done.set()

    with caplog.at_level(logging.ERROR, logger="nightshift.ledger"):
        threading.Thread(target=publish, daemon=True).start()
        # one line at once: which database, what it said
        wait_until(lambda: "is full" in caplog.text, what="the full disk named", timeout=10)
        assert (
            f"the ledger's disk ({path}) is full: OperationalError: database or disk is full"
            in (caplog.text)
        )
        assert not done.is_set()  # still waiting: space may come back
        sink.abandon("the night was stopped")
        assert done.wait(5)  # the stop ends the wait at once
    assert sink.unwritten == 1 and sink.write_problem is not None
    ledger.room = True  # space again: the next write goes through
    sink(change("etl", "running", 10))
    assert [d.to_state for d in ledger.dwells(NIGHT, "etl")] == ["running"]
    ledger.close()
