"""Each job's state changes tonight, as the night publishes them: the one place that dates them.

Made before the night's watcher, which reports to it (``seen``, ``poll_failed``); the runner
marks what it does itself (``mark``: submitting, submitted, the outcome). Every change is a
``JobChanged`` on the night's publisher (the ledger's sink first), dated when the backend says
it happened where it says, never before the job's previous change nor after now.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from nightshift.backends.base import ExternalState, JobStatus
from nightshift.config.catalogue import Catalogue
from nightshift.engine.events import JobChanged, PollFailed, Publisher, Since
from nightshift.engine.job_run import JobRun
from nightshift.loop import NightLoop

__all__ = ["JobMarks"]

RUNNING = ExternalState.RUNNING.value


class JobMarks:
    """The jobs' runs tonight and their state changes, published on ``events``."""

    def __init__(
        self,
        catalogue: Catalogue,
        night: str,
        events: Publisher,
        wall: Callable[[], datetime],
        loop: NightLoop | None = None,
    ) -> None:
        self.catalogue = catalogue
        self.night = night
        self.events = events
        self.wall = wall
        # each job's run: its attempt, its external id, when its end was seen
        self.runs: dict[str, JobRun] = {}
        self._since = Since()  # the loop's (``seen`` and every change are taken there)
        self._loop = loop  # None: its caller is the only thread (a test)

    def job_run(self, label: str) -> JobRun:
        """The job's run tonight, made the first time it is asked for."""
        run = self.runs.get(label)
        if run is None:  # setdefault: two threads asking at once get the same one
            run = self.runs.setdefault(label, JobRun(label, self.catalogue.job(label)))
        return run

    def mark(
        self, label: str, state: str, external_id: str | None = None, at: datetime | None = None
    ) -> None:
        """Publish a job's state change (the ledger and the live table are sinks), dated now
        unless ``at`` says when; from any thread, dated against its previous change on the
        loop (in the order the changes came)."""
        run = self.job_run(label)
        if external_id is not None:
            run.external_id = external_id
        change = (
            label,
            run.job.backend,
            run.attempt,
            run.external_id,
            str(state),
            at or self.wall(),
        )
        if self._loop is None:
            self._change(*change)
        else:
            self._loop.soon(self._change, *change)

    def _change(
        self, label: str, backend: str, attempt: int, external_id: str | None, state: str,
        at: datetime,
    ) -> None:  # fmt: skip
        """On the loop: the change published, with the time spent in the state it leaves."""
        if self._loop is not None:
            self._loop.owned("the jobs' marks")
        dwell_s = self._since.enter(label, state, at)
        self.events.publish(
            JobChanged(self.night, self.catalogue.key, label, backend, attempt, external_id,
                       state, at, dwell_s)
        )  # fmt: skip

    def seen(self, label: str, state: ExternalState, status: JobStatus | None = None) -> None:
        """The watcher saw a job change state, dated when the backend says it began (else now).
        A final state is recorded by the runner only, once it knows the true outcome (a
        SUCCEEDED batch with missing rows is ``partial``). On the loop (the watcher's)."""
        if self._loop is not None:
            self._loop.owned("the jobs' marks")
        since = status.since if status is not None else None
        if state.final:
            started = status.started_at if status is not None else None
            current = self._since.current(label)
            if started is not None and (current is None or current[0] != RUNNING):
                # no poll saw it running: the backend says when it did
                self.mark(label, RUNNING, at=self._began(label, started))
            seen = self._began(label, since)
            run = self.job_run(label)
            if run.final_seen is None:
                run.final_seen = seen
            return
        self.mark(label, state.value, at=self._began(label, since))

    def _began(self, label: str, reported: datetime | None) -> datetime:
        """When a job's new state began: as reported, kept between its previous transition
        and now (the backend's clock may disagree with ours); now if nothing was reported."""
        now = self.wall()
        if reported is None:
            return now
        previous = self._since.current(label)
        at = min(reported, now)
        return at if previous is None else max(at, previous[1])

    def poll_failed(self, label: str, error: BaseException | None) -> None:
        """The watcher could not read a job's status (it may try again)."""
        text = f"{type(error).__name__}: {error}" if error is not None else "no status"
        backend = self.catalogue.job(label).backend
        key = self.catalogue.key
        self.events.publish(PollFailed(self.night, key, label, backend, text, self.wall()))
