"""The budgets a night (or the watchdog) watches with: the latest snapshot's, built if none.

For now they are computed from the ledger's last 30 days on each call and not stored; the
budgets flow replaces this with the stored snapshot (``budget_snapshots``), building one first
when there is none.
"""

from __future__ import annotations

from datetime import datetime

from nightshift.budgets.lookup import Budgets
from nightshift.store.ledger import Ledger

__all__ = ["current_budgets"]


def current_budgets(ledger: Ledger, now: datetime) -> Budgets:
    """The budgets of every catalogue in ``ledger``'s database, as of ``now``."""
    from nightshift.budgets.columns import WINDOW
    from nightshift.budgets.table import budget_tables

    tables = budget_tables(ledger.history(now - WINDOW, all_catalogues=True), now)
    return Budgets.from_frames(tables.states, tables.backends, tables.jobs)
