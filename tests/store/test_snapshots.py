"""Budget snapshots round-trip through SQLite and PostgreSQL: the frames read back as saved."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest

from nightshift.budgets.columns import HISTORY_COLUMNS, WINDOW
from nightshift.budgets.snapshots import BudgetSnapshots, SnapshotInfo
from nightshift.budgets.table import BudgetTables, budget_tables
from nightshift.store.ledger import Ledger

NOW = datetime(2026, 11, 29, 6, 0, tzinfo=UTC)


def _history() -> pd.DataFrame:
    """Two catalogues: own budgets, a backend fallback, learning rows (NaN p50/p95) and labels
    a database could mangle (a colon, brackets, non-ASCII)."""
    rows = []
    for i in range(9):
        at = NOW - timedelta(days=i + 1)
        night = f"night-{i:02d}"
        rows.append(("team-a", night, "r", "etl", "cli", "queued", 10.0 + i, at))
        rows.append(("team-a", night, "r", "etl", "cli", "running", 100.0 + 3 * i, at))
        rows.append(("team-b", night, "r", "gen:[x]", "gemini_batch", "running", 1.5 * i, at))
    for i in range(3):
        at = NOW - timedelta(days=i + 1, hours=2)
        rows.append(("team-a", f"night-{i:02d}", "r", "report é", "cli", "queued", 5.0, at))
        rows.append(("team-b", f"night-{i:02d}", "r", "lonely", "command", "running", 7.0, at))
    frame = pd.DataFrame(rows, columns=HISTORY_COLUMNS)
    for column in frame.columns[:-2]:
        frame[column] = frame[column].astype(str)
    frame["at"] = pd.to_datetime(frame["at"], utc=True).dt.as_unit("us")
    return frame


def _assert_tables_equal(got: BudgetTables, expected: BudgetTables) -> None:
    for got_frame, expected_frame in zip(got, expected, strict=True):
        pd.testing.assert_frame_equal(got_frame, expected_frame)


def test_a_snapshot_reads_back_equal_to_what_was_saved(db_url: str) -> None:
    store = BudgetSnapshots(Ledger(db_url).engine)
    tables = budget_tables(_history(), NOW)
    # every kind of row is there: job, backend and learning sources, NaN p50/p95
    assert set(tables.states["source"]) == {"job", "backend", "learning"}
    assert tables.jobs["p95"].isna().any() and tables.states["p95"].isna().any()

    snapshot_id = store.save(tables, built_at=NOW, since=NOW - WINDOW, dwells=42)
    snapshot = store.latest()

    assert snapshot is not None
    assert snapshot.info == SnapshotInfo(snapshot_id, NOW, NOW - WINDOW, 42)
    _assert_tables_equal(snapshot.tables, tables)


def test_empty_tables_round_trip_with_their_dtypes(db_url: str) -> None:
    store = BudgetSnapshots(Ledger(db_url).engine)
    tables = budget_tables(_history(), NOW + 2 * WINDOW)  # nothing inside the window
    assert all(frame.empty for frame in tables)

    store.save(tables, built_at=NOW, since=NOW - WINDOW, dwells=0)
    snapshot = store.latest()

    assert snapshot is not None
    _assert_tables_equal(snapshot.tables, tables)


def test_one_catalogue_of_a_snapshot(db_url: str) -> None:
    store = BudgetSnapshots(Ledger(db_url).engine)
    tables = budget_tables(_history(), NOW)
    store.save(tables, built_at=NOW, since=NOW - WINDOW, dwells=1)

    snapshot = store.latest("team-b")

    assert snapshot is not None
    for got, full in zip(snapshot.tables, tables, strict=True):
        expected = full[full["catalogue"] == "team-b"].reset_index(drop=True)
        pd.testing.assert_frame_equal(got, expected)
    assert store.latest("no-such") is not None  # the snapshot exists, with no rows of it


def test_the_latest_is_the_newest_built_and_no_snapshot_is_none(db_url: str) -> None:
    store = BudgetSnapshots(Ledger(db_url).engine)
    assert store.latest() is None and store.latest_info() is None
    tables = budget_tables(_history(), NOW)

    newer = store.save(tables, built_at=NOW, since=NOW - WINDOW, dwells=2)
    store.save(tables, built_at=NOW - timedelta(days=7), since=NOW - WINDOW, dwells=1)

    info = store.latest_info()
    assert info is not None and (info.id, info.dwells) == (newer, 2)


def test_prune_keeps_the_newest_k_and_never_the_latest(db_url: str) -> None:
    ledger = Ledger(db_url)
    store = BudgetSnapshots(ledger.engine)
    tables = budget_tables(_history(), NOW)
    ids = [
        store.save(tables, built_at=NOW + timedelta(days=7 * week), since=NOW, dwells=week)
        for week in range(5)
    ]

    assert store.prune(keep=3) == 2
    assert store.prune(keep=3) == 0
    # older than the window: all but the newest would go; the newest always stays
    assert store.prune(keep=3, before=NOW + timedelta(days=100)) == 2
    info = store.latest_info()
    assert info is not None and info.id == ids[-1]
    with ledger.engine.begin() as conn:
        left = conn.exec_driver_sql("SELECT DISTINCT snapshot_id FROM budget_rows").all()
    assert [row[0] for row in left] == [ids[-1]]  # the rows of pruned snapshots went with them


@pytest.mark.parametrize("keep", [0, 1])
def test_prune_to_nothing_still_keeps_one(db_url: str, keep: int) -> None:
    store = BudgetSnapshots(Ledger(db_url).engine)
    assert store.prune(keep=keep) == 0  # no snapshots: nothing to do
    tables = budget_tables(_history(), NOW)
    store.save(tables, built_at=NOW, since=NOW, dwells=0)
    store.save(tables, built_at=NOW, since=NOW, dwells=0)

    assert store.prune(keep=keep) == 1
    assert store.latest() is not None


def test_the_budgets_read_as_rows_are_those_of_the_frames(db_url: str) -> None:
    """What a night watches with comes from the stored rows, without pandas: the same budgets
    as from the frames, learning rows (NULL p50/p95) giving none."""
    from nightshift.budgets.lookup import Budgets

    store = BudgetSnapshots(Ledger(db_url).engine)
    assert store.latest_budgets() is None
    tables = budget_tables(_history(), NOW)
    snapshot_id = store.save(tables, built_at=NOW, since=NOW - WINDOW, dwells=3)

    stored = store.latest_budgets()
    assert stored is not None
    info, budgets = stored
    assert info == SnapshotInfo(snapshot_id, NOW, NOW - WINDOW, 3)
    assert budgets == Budgets.from_frames(*tables)
    assert budgets.budget("team-a", "etl", "running") is not None  # something was learned
    assert budgets.budget("team-b", "lonely", "running") is None  # still learning
    only_b = store.latest_budgets("team-b")
    assert only_b is not None and only_b[1].budget("team-a", "etl", "running") is None
