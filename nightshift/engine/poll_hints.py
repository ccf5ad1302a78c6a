"""How long each job usually runs once submitted: where the watcher looks for its end.

Tonight's ``Usual`` (p10, p50, p95 of its nights of the last 30 days, ``nightshift/usual.py``)
per job, read from the ledger's dwells. A poll schedule needs no seven nights of history as an
alert does: with one night it looks at that night's end, and an early end is still seen within
the schedule's relaxed cap (``engine/poll_schedule.py``).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from nightshift.usual import Usual, usual_after_submit

if TYPE_CHECKING:
    from nightshift.config.catalogue import Catalogue
    from nightshift.engine.events import Logger
    from nightshift.store.ledger import Ledger

__all__ = ["HINT_DAYS", "ledger_poll_hints"]

HINT_DAYS = 30


def ledger_poll_hints(
    catalogue: Catalogue, ledger: Ledger, now: datetime, logger: Logger | None = None
) -> dict[str, Usual]:
    """Tonight's usual durations from the recent nights; none (one warning) if unreadable."""
    try:
        rows = ledger.dwell_rows(now - timedelta(days=HINT_DAYS))
        labels = {job.label for job in catalogue.jobs}
        return {k: v for k, v in usual_after_submit(rows).items() if k in labels}
    except Exception as exc:
        (logger or logging.getLogger("nightshift")).warning(
            "no poll hints tonight (jobs are polled on their backoff only): %s: %s",
            type(exc).__name__,
            exc,
        )
        return {}
