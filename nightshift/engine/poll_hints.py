"""How long each job usually runs once submitted: when the watcher should look for its end.

The p50, over the job's nights of the last 30 days, of its time from the submit's answer to its
end (its dwells in ``submitted``, ``queued`` and ``running``, dated by the backend where it tells
them), the quantity the budgets' state p50s add up to. A polling hint needs no seven nights of
history as an alert does: it only ever makes the watcher look sooner, so one night is enough.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from nightshift.states import PATH, JobState

if TYPE_CHECKING:
    from nightshift.config.catalogue import Catalogue
    from nightshift.engine.events import Logger
    from nightshift.store.ledger import Ledger

__all__ = ["AFTER_SUBMIT", "ledger_poll_hints", "usual_after_submit"]

AFTER_SUBMIT = PATH[PATH.index(JobState.SUBMITTED) :]
HINT_DAYS = 30


def usual_after_submit(dwells: Iterable[tuple[str, str, str, float]]) -> dict[str, float]:
    """Label -> median seconds after submit, from ``(night, label, state, dwell_s)`` rows."""
    per_night: dict[tuple[str, str], float] = {}
    for night, label, state, dwell_s in dwells:
        if state in AFTER_SUBMIT:
            per_night[(night, label)] = per_night.get((night, label), 0.0) + dwell_s
    by_label: dict[str, list[float]] = {}
    for (_night, label), seconds in per_night.items():
        by_label.setdefault(label, []).append(seconds)
    return {label: float(statistics.median(values)) for label, values in by_label.items()}


def ledger_poll_hints(
    catalogue: Catalogue, ledger: Ledger, now: datetime, logger: Logger | None = None
) -> dict[str, float]:
    """Tonight's hints from the ledger's recent nights; none (one warning) if unreadable."""
    try:
        frame = ledger.history(now - timedelta(days=HINT_DAYS))
        labels = {job.label for job in catalogue.jobs}
        rows = zip(frame["night"], frame["label"], frame["state"], frame["dwell_s"], strict=True)
        return {k: v for k, v in usual_after_submit(rows).items() if k in labels}
    except Exception as exc:
        (logger or logging.getLogger("nightshift")).warning(
            "no poll hints tonight (jobs are polled on their backoff only): %s: %s",
            type(exc).__name__,
            exc,
        )
        return {}
