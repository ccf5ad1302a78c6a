"""The budgets a night (or the watchdog) watches with: the latest snapshot's, built if none.

A snapshot is built from the ledger's last 30 days (every catalogue's) and stored in the ledger
database (``nightshift.budgets.snapshots``); the ``budgets`` flow (weekly, deployed) and
``nightshift budgets --rebuild`` build a fresh one. Until then every night reads the same stored
budgets; one older than ``MAX_AGE`` (a week: the budgets flow's cadence) is rebuilt by the next
night that asks, so a team that runs nights without the budgets deployment still learns.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from nightshift.budgets.columns import MIN_SAMPLES
from nightshift.budgets.lookup import Budgets
from nightshift.budgets.snapshots import KEEP, BudgetSnapshots, Snapshot, SnapshotInfo
from nightshift.store.ledger import Ledger

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "MAX_AGE",
    "STORED_MIN_SAMPLES",
    "build_snapshot",
    "current_budgets",
    "latest_snapshot",
    "refresh_budgets",
    "starting_budgets",
    "window_history",
]

MAX_AGE = timedelta(days=7)  # an older snapshot is rebuilt before a night watches with it
# a snapshot keeps every job's own budget, from however few samples: each reader applies its
# catalogue's `defaults.min_samples` (``at_least``, ``Budgets.from_records``)
STORED_MIN_SAMPLES = 1


def current_budgets(ledger: Ledger, now: datetime, min_samples: int = MIN_SAMPLES) -> Budgets:
    """The budgets of every catalogue in ``ledger``'s database: the latest snapshot's, of at
    least ``min_samples`` samples (the catalogue's ``defaults.min_samples``).

    With no snapshot yet, or one built more than ``MAX_AGE`` before ``now``, one is built from
    the window ending at ``now`` and stored first.
    """
    stored = BudgetSnapshots(ledger.engine).latest_budgets(min_samples=min_samples)
    if stored is not None and now - stored[0].built_at <= MAX_AGE:
        return stored[1]  # read as rows: no pandas in a night that only looks budgets up
    snapshot = build_snapshot(ledger, now)
    return Budgets.from_frames(*snapshot.tables, min_samples=min_samples)


def starting_budgets(ledger: Ledger, now: datetime, min_samples: int = MIN_SAMPLES) -> Budgets:
    """The budgets a night starts with, before its first submit: the latest snapshot's, however
    old (the night's end refreshes a stale one: ``refresh_budgets``); with none stored, nothing
    when the window holds no dwell to learn from (a new ledger: no pandas, no snapshot), else
    one built now (the first night after history came in, once)."""
    from nightshift.budgets.columns import WINDOW

    stored = BudgetSnapshots(ledger.engine).latest_budgets(min_samples=min_samples)
    if stored is not None:
        return stored[1]
    if not ledger.has_dwells(now - WINDOW):
        return Budgets()
    snapshot = build_snapshot(ledger, now)
    return Budgets.from_frames(*snapshot.tables, min_samples=min_samples)


def refresh_budgets(ledger: Ledger, now: datetime) -> SnapshotInfo | None:
    """Build a snapshot when the latest is older than ``MAX_AGE`` (or there is none and the
    window has dwells): at a night's end, so the next night starts without learning first.
    The new snapshot's info; None when the latest is fresh or nothing was learned."""
    from nightshift.budgets.columns import WINDOW

    info = BudgetSnapshots(ledger.engine).latest_info()
    if info is not None and now - info.built_at <= MAX_AGE:
        return None
    if info is None and not ledger.has_dwells(now - WINDOW):
        return None
    return build_snapshot(ledger, now).info


def latest_snapshot(ledger: Ledger, catalogue: str | None = None) -> Snapshot | None:
    """The newest stored snapshot (only ``catalogue``'s rows if given), None if there is none;
    its tables as stored (every job's own budget: ``at_least`` shows them as a catalogue sees
    them)."""
    return BudgetSnapshots(ledger.engine).latest(catalogue)


def window_history(ledger: Ledger, now: datetime) -> pd.DataFrame:
    """Every catalogue's dwells of the window ending at ``now``: what a snapshot is built from."""
    from nightshift.budgets.columns import WINDOW

    return ledger.history(now - WINDOW, all_catalogues=True)


def build_snapshot(
    ledger: Ledger,
    now: datetime,
    *,
    history: pd.DataFrame | None = None,
    keep: int = KEEP,
) -> Snapshot:
    """Learn the budgets of every catalogue as of ``now``, store them, and return the snapshot.

    ``history``: the window's dwells if the caller read them already (``window_history``).
    Afterwards only the ``keep`` newest snapshots stay. Every job's own budget is kept, from
    however few samples (``STORED_MIN_SAMPLES``); readers apply their ``min_samples``.
    """
    from nightshift.budgets.columns import WINDOW
    from nightshift.budgets.table import budget_tables

    if history is None:
        history = window_history(ledger, now)
    tables = budget_tables(history, now, min_samples=STORED_MIN_SAMPLES)
    store = BudgetSnapshots(ledger.engine)
    since = (now - WINDOW).astimezone(UTC)
    snapshot_id = store.save(tables, built_at=now, since=since, dwells=len(history))
    store.prune(keep=keep)
    return Snapshot(SnapshotInfo(snapshot_id, now.astimezone(UTC), since, len(history)), tables)
