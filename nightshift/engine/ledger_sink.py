"""The ledger as a night-event sink: every job state change becomes a transition row.

Group commit: a change is written before its publisher goes on (a reader sees it at once), but
changes published side by side (the start pool's submits, the watcher's answers, the finish
pool's outcomes) share one transaction instead of queueing for the database one by one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from nightshift.engine.events import JobChanged, NightEvent
from nightshift.store.ledger import Ledger, TransitionRow

__all__ = ["LedgerSink"]


class LedgerSink:
    """Writes each ``JobChanged`` to the dwell ledger while this night still owns its lease."""

    def __init__(
        self, ledger: Ledger, run_id: str, owns_night: Callable[[], bool] = lambda: True
    ) -> None:
        self._ledger = ledger
        self._run_id = run_id
        self._owns_night = owns_night
        self._cond = threading.Condition()
        self._queue: list[tuple[int, TransitionRow]] = []
        self._queued = 0  # tickets handed out
        self._written = 0  # tickets whose write is over (committed or failed)
        self._writing = False
        self._errors: dict[int, Exception] = {}

    def __call__(self, event: NightEvent) -> None:
        # a night that lost its lease writes nothing: the rows belong to the night holding it
        if isinstance(event, JobChanged) and self._owns_night():
            row: TransitionRow = (
                event.night,
                self._run_id,
                event.label,
                event.backend,
                event.external_id,
                event.state,
                event.at,
                event.attempt,
            )
            self._write(row)

    def _write(self, row: TransitionRow) -> None:
        """Queue the row; write the queue if nobody is; return once the row's write is over."""
        with self._cond:
            self._queued += 1
            ticket = self._queued
            self._queue.append((ticket, row))
            while self._written < ticket:
                if self._writing:
                    self._cond.wait()
                    continue
                batch, self._queue = self._queue, []
                self._writing = True
                self._cond.release()
                errors: dict[int, Exception] = {}
                try:
                    errors = self._commit(batch)
                finally:
                    self._cond.acquire()
                    self._writing = False
                    self._written = batch[-1][0]
                    self._errors.update(errors)
                    self._cond.notify_all()
            error = self._errors.pop(ticket, None)
        if error is not None:
            raise error  # the publisher logs it, as it did a row written on its own

    def _commit(self, batch: list[tuple[int, TransitionRow]]) -> dict[int, Exception]:
        """Write a batch in one transaction; if that fails, each row alone (one bad row fails
        only itself). Returns the tickets whose rows failed."""
        try:
            self._ledger.transitions([row for _, row in batch])
            return {}
        except Exception as exc:
            if len(batch) == 1:
                return {batch[0][0]: exc}
        errors: dict[int, Exception] = {}
        for ticket, row in batch:
            try:
                self._ledger.transitions([row])
            except Exception as exc:
                errors[ticket] = exc
        return errors
