"""The ledger as a night-event sink: every job state change becomes a transition row."""

from __future__ import annotations

from collections.abc import Callable

from nightshift.engine.events import JobChanged, NightEvent
from nightshift.store.ledger import Ledger

__all__ = ["LedgerSink"]


class LedgerSink:
    """Writes each ``JobChanged`` to the dwell ledger while this night still owns its lease."""

    def __init__(
        self, ledger: Ledger, run_id: str, owns_night: Callable[[], bool] = lambda: True
    ) -> None:
        self._ledger = ledger
        self._run_id = run_id
        self._owns_night = owns_night

    def __call__(self, event: NightEvent) -> None:
        # a night that lost its lease writes nothing: the rows belong to the night holding it
        if isinstance(event, JobChanged) and self._owns_night():
            self._ledger.transition(
                event.night,
                self._run_id,
                event.label,
                event.backend,
                event.external_id,
                event.state,
                at=event.at,
                attempt=event.attempt,
            )
