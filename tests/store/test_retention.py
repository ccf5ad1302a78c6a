"""Retention: ledger and job rows older than the window go; newer ones, other catalogues stay."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from nightshift.store.ledger import Ledger
from nightshift.store.retention import prune_ledger

NOW = datetime(2026, 11, 29, 6, 0, tzinfo=UTC)
CUTOFF = NOW - timedelta(days=90)


def _job(ledger: Ledger, night: str, at: datetime) -> None:
    """One job that ran and finished at ``at``: two transitions and a job row."""
    ledger.transition(night, "r", "a", "cli", "x", "submitted", at=at - timedelta(seconds=1))
    ledger.transition(night, "r", "a", "cli", "x", "succeeded", at=at)
    ledger.record_submit(night, "a", "cli", "x", 1, at=at - timedelta(seconds=1))
    ledger.record_state(night, "a", "succeeded", finished_at=at)


def _nights(url: str, catalogue: str) -> list[str]:
    ledger = Ledger(url, catalogue)
    try:
        with ledger.engine.begin() as conn:
            rows = conn.execute(
                sa.text("SELECT night FROM jobs WHERE catalogue = :c ORDER BY night"),
                {"c": catalogue},
            )
            return [r[0] for r in rows]
    finally:
        ledger.close()


def _fill(url: str, catalogue: str) -> None:
    ledger = Ledger(url, catalogue)
    try:
        _job(ledger, "old", CUTOFF - timedelta(days=1))
        _job(ledger, "new", CUTOFF + timedelta(days=1))
    finally:
        ledger.close()


def test_prune_ledger_deletes_older_rows_of_every_catalogue(db_url: str) -> None:
    _fill(db_url, "cat-a")
    _fill(db_url, "cat-b")
    assert prune_ledger(db_url, CUTOFF, dry_run=True) == (4, 2)
    assert _nights(db_url, "cat-a") == ["new", "old"]  # a dry run deletes nothing
    assert prune_ledger(db_url, CUTOFF) == (4, 2)
    assert _nights(db_url, "cat-a") == ["new"] and _nights(db_url, "cat-b") == ["new"]
    ledger = Ledger(db_url, "cat-a")
    try:
        assert [t.to_state for t in ledger.dwells("new")] == ["submitted", "succeeded"]
        assert ledger.dwells("old") == []
    finally:
        ledger.close()


def test_prune_ledger_with_a_catalogue_leaves_the_others(db_url: str) -> None:
    _fill(db_url, "cat-a")
    _fill(db_url, "cat-b")
    assert prune_ledger(db_url, CUTOFF, catalogue="cat-a") == (2, 1)
    assert _nights(db_url, "cat-a") == ["new"]
    assert _nights(db_url, "cat-b") == ["new", "old"]


def test_prune_ledger_boundary_a_row_at_the_cutoff_stays(db_url: str) -> None:
    ledger = Ledger(db_url, "cat-a")
    try:
        ledger.transition("n", "r", "a", "cli", "x", "submitted", at=CUTOFF - timedelta(seconds=1))
        ledger.transition("n", "r", "a", "cli", "x", "succeeded", at=CUTOFF)
        ledger.record_submit("n", "a", "cli", "x", 1, at=CUTOFF - timedelta(seconds=1))
        ledger.record_state("n", "a", "succeeded", finished_at=CUTOFF)
        # a job that never got a submit has no time: kept
        ledger.record_state("unsubmitted", "b", "failed")
    finally:
        ledger.close()
    # the transition 1 s before goes; the one at the cutoff and the job finished at it stay
    assert prune_ledger(db_url, CUTOFF) == (1, 0)
    assert _nights(db_url, "cat-a") == ["n", "unsubmitted"]
