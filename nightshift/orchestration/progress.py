"""The night's progress artifact on the flow run, as a sink of the night's events.

The artifact is moved by a task of the night's loop (``nightshift/loop.py``) on Prefect's async
client, one update at a time, the latest text winning: a slow or gone Prefect API never holds a
job's end nor a thread, and 300 jobs ending at once cost a few calls. What it keeps is the
loop's: the night's events are taken there, no lock.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from prefect.artifacts import aupdate_progress_artifact, create_progress_artifact
from prefect.client.orchestration import PrefectClient, get_client

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
        percent, self._shown = self._view()
        self._latest: tuple[float, str] | None = None  # the update not posted yet
        self._loop = loop  # what it keeps is the loop's: events are taken there, no lock
        self._posting: asyncio.Task[None] | None = None
        self._try = current_try()  # read here, in the flow run: the loop's posts have no context
        self._id: Any = create_progress_artifact(
            percent, key=key, description=described(self._shown, self._try)
        )

    def __call__(self, event: NightEvent) -> None:
        self._loop.soon(self._take, event)  # on the loop already, as the night's sinks are

    def _take(self, event: NightEvent) -> None:
        self._loop.owned("the progress artifact")
        self._progress.on_event(event)
        if isinstance(event, JobFinished | ExpectedDurations):
            self._refresh()  # the text moves when a job ends (or budgets come): one pass per end

    def _refresh(self) -> None:
        """On the loop: post the text if it changed (the poster task takes the latest)."""
        percent, text = self._view()
        if text == self._shown:
            return
        self._shown = text
        self._latest = (percent, text)
        self._poster()

    def _poster(self) -> asyncio.Task[None] | None:
        """The poster of the latest text: the one in flight takes it next, unless it ended or
        is being cancelled (a closing loop cancels its tasks): then a new one."""
        posting = self._posting
        if self._latest is not None and (posting is None or posting.done() or posting.cancelling()):
            after = posting if posting is not None and not posting.done() else None
            self._posting = posting = self._loop.spawn(self._post(after), "nightshift-progress")
        return posting

    def flush(self, timeout: float) -> bool:
        """Bring the text up to date, then wait up to ``timeout`` seconds for it to be posted;
        False if it was not."""

        async def posted() -> None:
            self._refresh()
            while (posting := self._poster()) is not None and not posting.done():
                try:
                    await asyncio.shield(posting)
                except asyncio.CancelledError:
                    if (me := asyncio.current_task()) is not None and me.cancelling():
                        raise  # the flush itself ran out of time

        try:
            self._loop.run(posted(), timeout)
        except (TimeoutError, RuntimeError):  # still posting, or the night's loop is closed
            return False
        return True

    async def _post(self, after: asyncio.Task[None] | None = None) -> None:
        """Post the latest text until none is left, on one client (a new one per post builds a
        TLS context: tens of milliseconds of CPU each, 300 jobs ending at once a stopping
        night's second); ``after``: a poster being cancelled, whose end comes first (one update
        at a time, in order)."""
        if after is not None:
            await asyncio.wait([after])
        if self._latest is None:
            return
        try:
            async with get_client() as client:
                await self._post_on(client)
        except Exception as exc:  # no client: the night goes on, the next text tries again
            log.warning("could not update the progress artifact: %s", exc)

    async def _post_on(self, client: PrefectClient) -> None:
        while (latest := self._latest) is not None:
            self._latest = None
            try:
                await aupdate_progress_artifact(
                    self._id,
                    latest[0],
                    description=described(latest[1], self._try),
                    client=client,
                )
            except asyncio.CancelledError:  # the next poster posts it, unless a newer text came
                if self._latest is None and latest[1] == self._shown:
                    self._latest = latest
                raise
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
