"""How far the night is, from its events: jobs finished, each job's expected end, the night's.

The live table and the progress artifact both keep one ``NightProgress`` fed with the night's
events, so they say the same thing: ``7/12 finished, expected done ~02:41 UTC``. Pure: the
caller says what time it is.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime, timedelta

from nightshift.engine.events import (
    ExpectedDurations,
    JobChanged,
    JobFinished,
    LevelChanged,
    NightEvent,
)
from nightshift.engine.expected import Typical, clock_text, state_end
from nightshift.engine.outcomes import is_final

__all__ = ["JobView", "NightProgress"]


@dataclass(frozen=True)
class JobView:
    """One job as the night stands: its state, since when, its level and expected end."""

    label: str
    state: str
    since: datetime | None
    level: str | None  # "watch" | "alert" in its current state, or None
    expected_end: datetime | None


@dataclass
class _Job:
    state: str = "waiting"
    since: datetime | None = None
    started: datetime | None = None  # this attempt's first state tonight (submitting)
    level: str | None = None
    finished: bool = False


class NightProgress:
    """The night's jobs, fed its events from any thread."""

    def __init__(self, labels: list[str]) -> None:
        self._lock = threading.Lock()
        self._jobs = {label: _Job() for label in labels}
        self._typical: dict[str, Typical] = {}
        self._finished = 0  # kept as events come: a count per event, not a pass over the jobs

    def on_event(self, event: NightEvent) -> None:
        """Take one night event (a sink); events of other jobs or kinds change nothing."""
        with self._lock:
            if isinstance(event, ExpectedDurations):
                self._typical = dict(event.jobs)
            elif isinstance(event, JobChanged):
                job = self._jobs.setdefault(event.label, _Job())
                if job.state == event.state:
                    return  # a repeat keeps the state's start
                if event.state == "submitting":
                    # a re-attached job is first seen later on: its start stays unknown
                    job.started = event.at
                job.state, job.since, job.level = event.state, event.at, None
                self._set_finished(job, is_final(event.state))
            elif isinstance(event, JobFinished):
                job = self._jobs.setdefault(event.outcome.label, _Job())
                job.state, job.level = event.outcome.state.value, None
                self._set_finished(job, True)
            elif isinstance(event, LevelChanged):
                found = self._jobs.get(event.label)
                if found is not None and found.state == event.alert.state:
                    found.level = event.alert.level

    def _set_finished(self, job: _Job, finished: bool) -> None:
        self._finished += int(finished) - int(job.finished)
        job.finished = finished

    @property
    def known(self) -> bool:
        """Whether any job has a learned p50 (else no expected times are shown at all)."""
        with self._lock:
            return bool(self._typical)

    def finished(self) -> tuple[int, int]:
        """(jobs finished, jobs of the night)."""
        with self._lock:
            return self._finished, len(self._jobs)

    def jobs(self, now: datetime) -> list[JobView]:
        """Every job, in the night's order, with its expected end (None: unknown or done)."""
        with self._lock:
            ends = self._ends(now)
            return [
                JobView(label, j.state, j.since, j.level, ends.get(label))
                for label, j in self._jobs.items()
            ]

    def expected_done(self, now: datetime) -> datetime | None:
        """When the last job should be done (never before ``now``); None if any is unknown."""
        with self._lock:
            if not self._typical:  # nothing learned: no estimate, and no pass over the jobs
                return None
            ends = self._ends(now)
            left = [label for label, j in self._jobs.items() if not j.finished]
        if not left:
            return None
        if any(ends.get(label) is None for label in left):
            return None
        return max(max(ends[label] for label in left), now)  # type: ignore[type-var]

    def line(self, now: datetime) -> str:
        """``7/12 finished, expected done ~02:41 UTC`` (no estimate: the count alone)."""
        done, total = self.finished()
        text = f"{done}/{total} finished"
        if (at := self.expected_done(now)) is not None:
            text += f", expected done {clock_text(at, now)}"
        return text

    def _ends(self, now: datetime) -> dict[str, datetime | None]:
        """Under the lock: each unfinished job's expected end, dependencies first."""
        ends: dict[str, datetime | None] = {}

        def end(label: str, seen: frozenset[str]) -> datetime | None:
            if label in ends:
                return ends[label]
            job, typical = self._jobs.get(label), self._typical.get(label)
            result: datetime | None = None
            if job is None or job.finished:
                result = now  # done (or not tonight's): nothing to wait for
            elif typical is None:
                result = None
            elif job.started is not None and typical.job_p50 is not None:
                result = job.started + timedelta(seconds=typical.job_p50)
            elif job.since is not None and job.state != "waiting":
                result = state_end(typical, job.state, job.since)
            elif (total := typical.total()) is not None and label not in seen:
                deps = [end(d, seen | {label}) for d in typical.after if d in self._jobs]
                if all(d is not None for d in deps):
                    start = max([now, *(d for d in deps if d is not None)])
                    result = start + timedelta(seconds=total)
            ends[label] = result
            return result

        for label in self._jobs:
            end(label, frozenset())
        return {label: ends[label] for label, j in self._jobs.items() if not j.finished}
