"""Gemini batch states (ours, final or not, since when) and waiting for a cancelled batch to settle.

Gotcha: ``batches.cancel`` is asynchronous. The batch may stay RUNNING (or CANCELLING) for a
while after it, and still finish rows meanwhile; reading it straight after the cancel reports
those rows missing (or pays for them twice through the fallback). So after a cancel the batch
is polled with a short backoff until its state is final, or a bounded wait runs out.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nightshift.backends.base import ExternalState
from nightshift.backends.gemini.sdk_values import sdk_state_name
from nightshift.backoff import Backoff, poll_until

__all__ = ["BATCH_STATES", "CancelWait", "batch_started", "is_final_state", "settle"]

# REST state (without BATCH_STATE_ / JOB_STATE_) -> ours; anything else counts as running.
# Which are final is not spelled here: it is the mapped state's ExternalState.final.
BATCH_STATES = {
    "PENDING": ExternalState.QUEUED, "QUEUED": ExternalState.QUEUED,
    "RUNNING": ExternalState.RUNNING, "CANCELLING": ExternalState.RUNNING,
    "SUCCEEDED": ExternalState.SUCCEEDED, "PARTIALLY_SUCCEEDED": ExternalState.SUCCEEDED,
    "FAILED": ExternalState.FAILED, "EXPIRED": ExternalState.FAILED,
    "CANCELLED": ExternalState.CANCELLED,
}  # fmt: skip


def is_final_state(raw: str) -> bool:
    """Whether a state name (``sdk_state_name``) is one a batch never leaves."""
    return BATCH_STATES.get(raw, ExternalState.RUNNING).final


def batch_started(job: Any, state: ExternalState) -> datetime | None:
    """When a batch began running: its ``start_time`` where the API has one (Vertex), else,
    while it runs, its ``update_time``. The Gemini API gives no start time, and a batch's last
    update is at or after its start: later than the truth at worst, never before it."""
    start: datetime | None = getattr(job, "start_time", None)
    if start is not None:
        return start
    return job.update_time if state is ExternalState.RUNNING else None


_SETTLE_BACKOFF = Backoff(initial=0.5, factor=2.0, max=5.0)


@dataclass(frozen=True)
class CancelWait:
    """How long to wait for a cancelled batch to become final, and how often to look.

    Polls start half a second apart and double up to 5 s (``backoff``); after ``timeout_s``
    (60 s by default) the batch is taken as it is, with a note.
    """

    timeout_s: float = 60.0
    backoff: Backoff = _SETTLE_BACKOFF

    def __post_init__(self) -> None:
        if self.timeout_s < 0:
            raise ValueError(f"invalid {self!r}")


def settle(
    get: Callable[[], Any],
    job: Any,
    wait: CancelWait,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[Any, str | None]:
    """Poll ``get()`` (starting from ``job``) until the batch is final or ``wait`` runs out.

    Returns the last job read and, when it never became final, a note saying so.
    """
    reads = [job]

    def settled() -> bool:
        return is_final_state(sdk_state_name(reads[-1].state))

    def pause_then_read(seconds: float) -> None:
        sleep(seconds)
        reads.append(get())

    started = clock()
    if poll_until(settled, wait.timeout_s, wait.backoff, sleep=pause_then_read, clock=clock):
        return reads[-1], None
    waited, raw = clock() - started, sdk_state_name(reads[-1].state)
    return reads[-1], (
        f"batch still {raw} {waited:.1f}s after the cancel ({len(reads) - 1} poll(s)): "
        "collected what it had; rows it finishes later are not counted"
    )
