"""Waiting for a cancelled Gemini batch to settle.

Gotcha: ``batches.cancel`` is asynchronous. The batch may stay RUNNING (or CANCELLING) for a
while after it, and still finish rows meanwhile; reading it straight after the cancel reports
those rows missing (or pays for them twice through the fallback). So after a cancel the batch
is polled with a short backoff until its state is final, or a bounded wait runs out.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nightshift.backends.base import ExternalState
from nightshift.backends.gemini.client import sdk_state_name

__all__ = ["BATCH_STATES", "CancelWait", "is_final_state", "settle"]

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


@dataclass(frozen=True)
class CancelWait:
    """How long to wait for a cancelled batch to become final, and how often to look.

    Polls start ``initial_s`` apart and double up to ``max_interval_s``; after ``timeout_s``
    (60 s by default) the batch is taken as it is, with a note.
    """

    timeout_s: float = 60.0
    initial_s: float = 0.5
    max_interval_s: float = 5.0

    def __post_init__(self) -> None:
        if self.timeout_s < 0 or self.initial_s <= 0 or self.max_interval_s <= 0:
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
    started = clock()
    deadline = started + wait.timeout_s
    interval = wait.initial_s
    polls = 0
    while not is_final_state(sdk_state_name(job.state)):
        left = deadline - clock()
        if left <= 0:
            waited = clock() - started
            raw = sdk_state_name(job.state)
            return job, (
                f"batch still {raw} {waited:.1f}s after the cancel ({polls} poll(s)): "
                "collected what it had; rows it finishes later are not counted"
            )
        sleep(min(interval, left))
        interval = min(interval * 2, wait.max_interval_s)
        job = get()
        polls += 1
    return job, None
