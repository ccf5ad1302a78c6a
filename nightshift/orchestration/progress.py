"""The night's progress artifact on the flow run, as a sink of the night's events."""

from __future__ import annotations

import threading
from typing import Any

from prefect.artifacts import create_progress_artifact, update_progress_artifact

from nightshift.engine.events import JobFinished, NightEvent

__all__ = ["PROGRESS_KEY", "ProgressSink"]

PROGRESS_KEY = "nightly-progress"


class ProgressSink:
    """Jobs of the night finished, out of its total: created now, moved on each finished job."""

    def __init__(self, total: int, key: str = PROGRESS_KEY) -> None:
        self._total = total
        self._done: set[str] = set()
        self._lock = threading.Lock()
        self._id: Any = create_progress_artifact(
            0.0, key=key, description=f"Jobs of the night finished: 0 of {total}"
        )

    def __call__(self, event: NightEvent) -> None:
        if not isinstance(event, JobFinished):
            return
        with self._lock:
            self._done.add(event.outcome.label)
            count = len(self._done)
        update_progress_artifact(
            self._id,
            100.0 * count / max(1, self._total),
            description=f"Jobs of the night finished: {count} of {self._total}",
        )
