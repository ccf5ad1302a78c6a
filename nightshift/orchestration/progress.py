"""The night's progress artifact on the flow run, as a sink of the night's events.

The artifact is moved by a task of the night's loop (``nightshift/loop.py``) on Prefect's async
client, one update at a time, the latest text winning: a slow or gone Prefect API never holds a
job's end nor a thread, and 300 jobs ending at once cost a few calls.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, wait
from datetime import datetime
from typing import Any

from prefect.artifacts import aupdate_progress_artifact, create_progress_artifact

from nightshift.engine.context import utcnow
from nightshift.engine.events import ExpectedDurations, JobFinished, NightEvent
from nightshift.engine.expected import clock_text
from nightshift.engine.night_progress import NightProgress
from nightshift.loop import NightLoop
from nightshift.orchestration.artifact_tries import current_try, described

__all__ = ["PROGRESS_KEY", "ProgressSink"]

PROGRESS_KEY = "nightly-progress"

log = logging.getLogger("nightshift.progress")


class ProgressSink:
    """Jobs of the night finished, out of its total, how many of them not ok, and (with
    budgets) when it should be done. The bar counts the jobs finished, as the words do: a
    finished night is 100 %, its jobs not ok said beside it.

    Created now; moved when its text changes (a job finished, a new expected end).
    """

    def __init__(
        self,
        labels: list[str],
        loop: NightLoop,
        key: str = PROGRESS_KEY,
        wall: Callable[[], datetime] = utcnow,
    ) -> None:
        self._progress = NightProgress(labels)
        self._wall = wall
        self._lock = threading.Lock()
        percent, self._shown = self._view()
        self._latest: tuple[float, str] | None = None  # the update not posted yet
        self._loop = loop
        self._posting: Future[None] | None = None
        self._try = current_try()  # read here, in the flow run: the loop's posts have no context
        self._id: Any = create_progress_artifact(
            percent, key=key, description=described(self._shown, self._try)
        )

    def __call__(self, event: NightEvent) -> None:
        self._progress.on_event(event)
        if not isinstance(event, JobFinished | ExpectedDurations):
            return  # the text moves when a job ends (or budgets come): one pass per end
        with self._lock:
            self._refresh()

    def _refresh(self) -> None:
        """Under the lock: post the text if it changed (the poster task takes the latest)."""
        percent, text = self._view()
        if text == self._shown:
            return
        self._shown = text
        self._latest = (percent, text)
        if self._posting is not None and not self._posting.done():
            return  # the poster in flight takes the latest text next (one dropped unrun: not)
        try:
            self._posting = self._loop.submit(self._post())
        except RuntimeError:  # the night's loop is closed: the night is over
            self._latest = None

    def flush(self, timeout: float) -> bool:
        """Bring the text up to date, then wait up to ``timeout`` seconds for it to be posted;
        False if it was not."""
        with self._lock:
            self._refresh()
            posting = self._posting
        if posting is not None:
            done, _ = wait([posting], timeout)
            return bool(done)
        return True

    async def _post(self) -> None:
        while True:
            with self._lock:
                latest, self._latest = self._latest, None
                if latest is None:
                    self._posting = None
                    return
            try:
                await aupdate_progress_artifact(
                    self._id, latest[0], description=described(latest[1], self._try)
                )
            except Exception as exc:  # the artifact is a view: the night goes on without it
                log.warning("could not update the progress artifact: %s", exc)

    def _view(self) -> tuple[float, str]:
        """The bar's percentage and its words, from one tally: ``Jobs of the night finished:
        7 of 12, 2 not ok (1 failed, 1 timeout), expected done ~02:41 UTC``."""
        tally = self._progress.tally()
        text = f"Jobs of the night finished: {tally.words()}"
        if (at := self._progress.expected_done(self._wall())) is not None:
            text += f", expected done {clock_text(at, self._wall())}"
        return tally.percent, text
