"""The night's progress artifact on the flow run, as a sink of the night's events."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

from prefect.artifacts import create_progress_artifact, update_progress_artifact

from nightshift.engine.context import utcnow
from nightshift.engine.events import JobFinished, NightEvent
from nightshift.engine.expected import clock_text
from nightshift.engine.night_progress import NightProgress

__all__ = ["PROGRESS_KEY", "ProgressSink"]

PROGRESS_KEY = "nightly-progress"


class ProgressSink:
    """Jobs of the night finished, out of its total, how many of them not ok, and (with
    budgets) when it should be done. The bar counts the jobs that succeeded: a night with a
    failed job never reaches 100 %.

    Created now; moved when its text changes (a job finished, a new expected end).
    """

    def __init__(
        self,
        labels: list[str],
        key: str = PROGRESS_KEY,
        wall: Callable[[], datetime] = utcnow,
    ) -> None:
        self._progress = NightProgress(labels)
        self._wall = wall
        self._lock = threading.Lock()
        self._bad: dict[str, str] = {}  # label -> outcome, of the jobs that did not succeed
        self._shown = self._text()
        self._id: Any = create_progress_artifact(0.0, key=key, description=self._shown)

    def __call__(self, event: NightEvent) -> None:
        self._progress.on_event(event)
        with self._lock:
            if isinstance(event, JobFinished):
                if event.outcome.ok:
                    self._bad.pop(event.outcome.label, None)
                else:
                    self._bad[event.outcome.label] = event.outcome.state.value
            text = self._text()
            if text == self._shown:
                return
            self._shown = text
            bad = len(self._bad)
        done, total = self._progress.finished()
        update_progress_artifact(self._id, 100.0 * (done - bad) / max(1, total), description=text)

    def _text(self) -> str:
        """``Jobs of the night finished: 7 of 12, 2 not ok (1 failed, 1 timeout), expected done
        ~02:41 UTC``."""
        done, total = self._progress.finished()
        text = f"Jobs of the night finished: {done} of {total}"
        if self._bad:
            counts: dict[str, int] = {}
            for state in self._bad.values():
                counts[state] = counts.get(state, 0) + 1
            which = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
            text += f", {len(self._bad)} not ok ({which})"
        if (at := self._progress.expected_done(self._wall())) is not None:
            text += f", expected done {clock_text(at, self._wall())}"
        return text
