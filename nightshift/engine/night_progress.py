"""How far the night is, from its events: jobs finished, each job's expected end, the night's.

The live table and the progress artifact both keep one ``NightProgress`` fed with the night's
events, so they say the same thing: ``7/12 finished, expected done ~02:41 UTC``. Its ``Tally``
(jobs finished, of all, the finished ones not ok) gives both the progress bar's percentage and
its words, so they cannot disagree: a finished night is 100 %, its jobs not ok said beside it.
Pure: the caller says what time it is.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
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
from nightshift.engine.outcomes import Outcome, is_final

__all__ = ["JobView", "NightProgress", "Tally"]


@dataclass(frozen=True)
class Tally:
    """Jobs finished, out of the night's; ``not_ok``: finished ones by their state, not ok."""

    finished: int
    total: int
    not_ok: Mapping[str, int]

    @property
    def percent(self) -> float:
        """The jobs finished, in percent (a night of no jobs is done: 100)."""
        return 100.0 * self.finished / self.total if self.total else 100.0

    def words(self) -> str:
        """``7 of 12, 2 not ok (1 failed, 1 timeout)``: what the percentage counts."""
        text = f"{self.finished} of {self.total}"
        if bad := sum(self.not_ok.values()):
            which = ", ".join(f"{n} {s}" for s, n in sorted(self.not_ok.items()) if n)
            text += f", {bad} not ok ({which})"
        return text


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
    """The night's jobs, fed its events. Not thread-safe: its one owner keeps it (the progress
    artifact on the night's loop; the CLI's live table under its own lock)."""

    def __init__(self, labels: list[str]) -> None:
        self._jobs = {label: _Job() for label in labels}
        self._typical: dict[str, Typical] = {}
        self._finished = 0  # kept as events come: a count per event, not a pass over the jobs
        self._not_ok: Counter[str] = Counter()  # finished jobs not ok, by their final state

    def on_event(self, event: NightEvent) -> None:
        """Take one night event (a sink); events of other jobs or kinds change nothing."""
        if isinstance(event, ExpectedDurations):
            self._typical = dict(event.jobs)
        elif isinstance(event, JobChanged):
            job = self._jobs.setdefault(event.label, _Job())
            if job.state == event.state:
                return  # a repeat keeps the state's start
            if event.state == "submitting":
                # a re-attached job is first seen later on: its start stays unknown
                job.started = event.at
            self._settle(job, event.state, is_final(event.state))
            job.since, job.level = event.at, None
        elif isinstance(event, JobFinished):
            job = self._jobs.setdefault(event.outcome.label, _Job())
            self._settle(job, event.outcome.state.value, True)
            job.level = None
        elif isinstance(event, LevelChanged):
            found = self._jobs.get(event.label)
            if found is not None and found.state == event.alert.state:
                found.level = event.alert.level

    def _settle(self, job: _Job, state: str, finished: bool) -> None:
        """``job`` is now in ``state``; the counts follow (out with its old)."""
        if job.finished:
            self._finished -= 1
            if job.state != Outcome.SUCCEEDED:
                self._not_ok[job.state] -= 1
        job.state, job.finished = state, finished
        if finished:
            self._finished += 1
            if state != Outcome.SUCCEEDED:
                self._not_ok[state] += 1

    @property
    def known(self) -> bool:
        """Whether any job has a learned p50 (else no expected times are shown at all)."""
        return bool(self._typical)

    def finished(self) -> tuple[int, int]:
        """(jobs finished, jobs of the night)."""
        return self._finished, len(self._jobs)

    def tally(self) -> Tally:
        """The jobs finished, of all, and the finished ones not ok (a copy: no pass over jobs)."""
        not_ok = {state: n for state, n in self._not_ok.items() if n}
        return Tally(self._finished, len(self._jobs), not_ok)

    def jobs(self, now: datetime) -> list[JobView]:
        """Every job, in the night's order, with its expected end (None: unknown or done)."""
        ends = self._ends(now)
        return [
            JobView(label, j.state, j.since, j.level, ends.get(label))
            for label, j in self._jobs.items()
        ]

    def expected_done(self, now: datetime) -> datetime | None:
        """When the last job should be done (never before ``now``); None if any is unknown."""
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
        """Each unfinished job's expected end, dependencies first."""
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
