"""A command job's statuses as its supervisor's files change: what ``CommandBackend.stream`` reads.

Every check runs on the night's one stream loop (``engine/streams.py``): no thread per job, no
timer per job and no status read while nothing changes. One ``Ticker`` task per loop wakes every
``TICK_S`` and looks at every streamed job: a stat of its exit code file (the supervisor writes
it last), a signal 0 to its supervisor and, while it is queued, a stat of its ``started_at``
(about 2 microseconds a job); the supervisor's full identity (pid reuse, a zombie nobody reaps
yet: what ``status`` checks) every ``IDENTITY_EVERY`` of a job's ticks. Only a job a check
says changed is read in full and its stream woken; it says a status when its state changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from weakref import WeakKeyDictionary

from nightshift.backends.base import ExternalState, JobStatus
from nightshift.backends.command import supervisor as runner

__all__ = ["IDENTITY_EVERY", "TICK_S", "Tickers", "job_statuses"]

TICK_S = 0.1  # an end is seen within this (and a status read) of the supervisor's last write
IDENTITY_EVERY = 10  # a job's ticks: a supervisor signal 0 still finds, seen within a second


class _Job:
    """One streamed job's cheap checks, and the future its stream waits on."""

    __slots__ = ("ended", "ident", "queued", "started", "ticks", "waiter")

    def __init__(self, jobdir: Path) -> None:
        self.ended = os.fspath(jobdir / runner.EXIT_CODE)
        self.started = os.fspath(jobdir / runner.STARTED_AT)
        self.ident = _identity(jobdir)  # the supervisor its first look found alive
        self.queued = False
        self.ticks = 0
        self.waiter: asyncio.Future[bool] | None = None

    def check(self) -> bool | None:
        """None: nothing changed; False: its files did; True: its supervisor is gone."""
        self.ticks += 1
        if os.path.exists(self.ended):
            return False
        if not _alive(self.ident, thorough=self.ticks % IDENTITY_EVERY == 0):
            return True
        if self.queued and os.path.exists(self.started):
            return False
        return None


class Ticker:
    """Looks at every job streamed on one event loop each ``tick_s``: one task, one sleep."""

    def __init__(self, tick_s: float = TICK_S) -> None:
        self.tick_s = tick_s
        self._jobs: set[_Job] = set()
        self._task: asyncio.Task[None] | None = None

    async def changed(self, job: _Job) -> bool:
        """Wait until a check says ``job`` changed; True: its supervisor is gone."""
        loop = asyncio.get_running_loop()
        job.waiter = loop.create_future()
        self._jobs.add(job)
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._run(), name="nightshift-command-ticker")
        try:
            return await job.waiter
        finally:  # said, or its stream was forgotten (cancelled)
            self._jobs.discard(job)
            job.waiter = None

    async def _run(self) -> None:
        while self._jobs:  # ends with its last job; the next stream starts it again
            await asyncio.sleep(self.tick_s)
            for job in list(self._jobs):
                if job.waiter is None or job.waiter.done():
                    continue
                said = job.check()
                if said is not None:
                    job.waiter.set_result(said)

    async def aclose(self) -> None:
        """Stop the task (its streams were stopped before)."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


class Tickers:
    """One ``Ticker`` per event loop: a night streams on one, tests may run several."""

    def __init__(self, tick_s: float = TICK_S) -> None:
        self.tick_s = tick_s
        self._by_loop: WeakKeyDictionary[asyncio.AbstractEventLoop, Ticker] = WeakKeyDictionary()

    def here(self) -> Ticker:
        """The running loop's ticker."""
        loop = asyncio.get_running_loop()
        ticker = self._by_loop.get(loop)
        if ticker is None:
            ticker = self._by_loop[loop] = Ticker(self.tick_s)
        return ticker

    async def aclose(self) -> None:
        """Stop the running loop's ticker."""
        ticker = self._by_loop.pop(asyncio.get_running_loop(), None)
        if ticker is not None:
            await ticker.aclose()


async def job_statuses(
    look: Callable[[], JobStatus], jobdir: Path, tickers: Tickers
) -> AsyncIterator[JobStatus]:
    """The job's status now (``look``, as ``status`` reads it), then each change up to the final
    one. A supervisor found gone ends the stream with what ``look`` says then; were that not
    final, the stream ends before the job and the watcher polls it."""
    status = look()
    yield status
    if status.state.final:
        return
    job, ticker = _Job(jobdir), tickers.here()
    while True:
        job.queued = status.state is ExternalState.QUEUED
        gone = await ticker.changed(job)
        now = look()  # a gone supervisor's exit code may have come meanwhile: it looks again
        if now.state is not status.state:
            yield now
        status = now
        if status.state.final or gone:
            return


def _identity(jobdir: Path) -> dict[str, Any] | None:
    try:
        ident = json.loads((jobdir / runner.RUNNER_PID).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return ident if isinstance(ident, dict) and "pid" in ident else None


def _alive(ident: dict[str, Any] | None, *, thorough: bool) -> bool:
    """Whether the supervisor still runs: signal 0 (one syscall), or its whole identity."""
    if ident is None:
        return False
    if thorough:
        return runner.identity_alive(ident)
    try:
        os.kill(int(ident["pid"]), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else: the thorough look says whether it is ours
    return True
