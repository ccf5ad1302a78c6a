"""current_budgets: builds a snapshot when there is none, then reads that one until a rebuild."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from nightshift.budgets import Budget
from nightshift.budgets.current import (
    MAX_AGE,
    build_snapshot,
    current_budgets,
    latest_snapshot,
    refresh_budgets,
    starting_budgets,
)
from nightshift.budgets.lookup import Budgets
from nightshift.budgets.snapshots import BudgetSnapshots
from nightshift.store.ledger import Ledger

NOW = datetime(2026, 11, 29, 6, 0, tzinfo=UTC)


def _nights(ledger: Ledger, queued: float, *, first: int = 0, count: int = 7) -> None:
    """``count`` nights of ``etl`` queued for ``queued`` s then running 60 s, through the Ledger."""
    for i in range(first, first + count):
        start = NOW - timedelta(days=30) + timedelta(days=i)
        night = f"night-{i:02d}"
        for state, offset in [("queued", 0.0), ("running", queued), ("succeeded", queued + 60)]:
            at = start + timedelta(seconds=offset)
            ledger.transition(night, "run", "etl", "cli", "x", state, at=at, attempt=1)


def test_the_first_call_builds_and_stores_then_later_calls_reuse_it(db_url: str) -> None:
    ledger = Ledger(db_url, "team-a")
    _nights(ledger, 100.0)
    assert latest_snapshot(ledger) is None

    first = current_budgets(ledger, NOW)

    assert first.budget("team-a", "etl", "queued") == Budget(100.0, 100.0, 7, "job")
    stored = latest_snapshot(ledger)
    assert stored is not None
    assert (stored.info.built_at, stored.info.since) == (NOW, NOW - timedelta(days=30))
    assert stored.info.dwells == 14  # queued and running of seven nights

    # a week of much slower nights later, the stored snapshot still stands
    _nights(ledger, 1000.0, first=7, count=20)
    later = NOW + MAX_AGE
    assert current_budgets(ledger, later) == first
    assert BudgetSnapshots(ledger.engine).latest_info() == stored.info

    # until a rebuild: the budgets flow's, or `nightshift budgets --rebuild`
    rebuilt = build_snapshot(ledger, later)
    assert rebuilt.info.id != stored.info.id
    after = current_budgets(ledger, later)
    assert after.budget("team-a", "etl", "queued") == Budget(1000.0, 1000.0, 20, "job")
    ledger.close()


def test_a_snapshot_holds_every_catalogue(db_url: str) -> None:
    team_a, team_b = Ledger(db_url, "team-a"), Ledger(db_url, "team-b")
    _nights(team_a, 100.0)
    _nights(team_b, 5.0)

    budgets = current_budgets(team_a, NOW)  # whichever catalogue's night asks first

    assert budgets.budget("team-b", "etl", "queued") == Budget(5.0, 5.0, 7, "job")
    assert current_budgets(team_b, NOW) == budgets
    snapshot = latest_snapshot(team_b, "team-b")
    assert snapshot is not None and set(snapshot.tables.states["catalogue"]) == {"team-b"}
    team_a.close()
    team_b.close()


def test_a_build_keeps_only_the_newest_snapshots(db_url: str) -> None:
    ledger = Ledger(db_url, "team-a")
    _nights(ledger, 100.0)

    ids = [build_snapshot(ledger, NOW + timedelta(days=d), keep=2).info.id for d in range(4)]

    store = BudgetSnapshots(ledger.engine)
    assert store.prune(keep=2) == 0  # the builds already pruned down to two
    info = store.latest_info()
    assert info is not None and info.id == ids[-1]
    ledger.close()


def test_a_snapshot_older_than_a_week_is_rebuilt_by_the_night_that_asks(db_url: str) -> None:
    ledger = Ledger(db_url, "team-a")
    _nights(ledger, 100.0)
    current_budgets(ledger, NOW)
    _nights(ledger, 1000.0, first=7, count=20)
    stale = NOW + MAX_AGE + timedelta(seconds=1)

    budgets = current_budgets(ledger, stale)

    info = BudgetSnapshots(ledger.engine).latest_info()
    assert info is not None and info.built_at == stale
    assert budgets.budget("team-a", "etl", "queued") == Budget(1000.0, 1000.0, 20, "job")
    ledger.close()


def test_a_night_starts_with_the_snapshot_it_finds_and_its_end_learns_a_stale_one_again(
    db_url: str,
) -> None:
    ledger = Ledger(db_url, "team-a")
    # a new ledger: nothing to learn, nothing stored, no pandas
    assert starting_budgets(ledger, NOW) == Budgets()
    assert latest_snapshot(ledger) is None
    assert refresh_budgets(ledger, NOW) is None

    _nights(ledger, 100.0)
    first = starting_budgets(ledger, NOW)  # history and no snapshot: learned once, at the start
    assert first.budget("team-a", "etl", "queued") == Budget(100.0, 100.0, 7, "job")
    stored = latest_snapshot(ledger)
    assert stored is not None

    # a month on, the snapshot is stale: the night starts with it all the same
    _nights(ledger, 1000.0, first=7, count=20)
    stale = NOW + MAX_AGE + timedelta(days=1)
    assert starting_budgets(ledger, stale) == first
    assert BudgetSnapshots(ledger.engine).latest_info() == stored.info
    # and its end learns again, so the next night starts with the new one
    built = refresh_budgets(ledger, stale)
    assert built is not None and built.id != stored.info.id
    again = starting_budgets(ledger, stale).budget("team-a", "etl", "queued")
    assert again is not None and (again.p50, again.p95) == (1000.0, 1000.0)
    assert refresh_budgets(ledger, stale) is None  # fresh now: nothing to do
    ledger.close()
