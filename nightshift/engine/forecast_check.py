"""A night's forecast against what happened (pure: no I/O).

A run's actuals come from its own ledger rows (its ``run_id``): a job started at its first
transition in the run and ended at its last when that is an outcome (or ``lost``: the night gave
up on it). The night finished when its last job ended; a run that did not end every job it
forecast (interrupted, ended early) has no finish.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from nightshift.states import FINAL, JobState
from nightshift.store.forecasts import StoredForecast

__all__ = ["Accuracy", "JobCheck", "NightCheck", "accuracy", "check_night", "run_spans", "worst"]

_ENDS = {str(s) for s in FINAL} | {str(JobState.LOST)}


class _Row(Protocol):
    """A ledger transition, as far as a check reads it."""

    @property
    def run_id(self) -> str: ...
    @property
    def label(self) -> str: ...
    @property
    def to_state(self) -> str: ...
    @property
    def at(self) -> datetime: ...


@dataclass(frozen=True)
class JobCheck:
    """One job: its expected end (p50) and span against its actual end and time taken."""

    label: str
    expected_end: datetime
    end: datetime
    expected_s: float  # its p50 span, start to end
    took_s: float

    @property
    def late_s(self) -> float:
        """Seconds past its expected end (negative: early)."""
        return (self.end - self.expected_end).total_seconds()

    @property
    def ratio(self) -> float | None:
        """Time taken over its usual (p50) span; None with nothing learned."""
        return self.took_s / self.expected_s if self.expected_s > 0 else None


@dataclass(frozen=True)
class NightCheck:
    """A run's forecast finish against its actual finish, and its jobs'."""

    night: str
    run_id: str
    start: datetime
    expected: datetime  # p50 finish
    expected_p95: datetime
    finished: datetime | None  # None: the run did not end every job it forecast
    critical_path: list[str]
    jobs: list[JobCheck]

    @property
    def error_s(self) -> float | None:
        """Actual minus forecast finish in seconds (positive: later than forecast)."""
        return None if self.finished is None else (self.finished - self.expected).total_seconds()

    @property
    def error_pct(self) -> float | None:
        """The error as a share of the forecast night's length, in percent."""
        length = (self.expected - self.start).total_seconds()
        error = self.error_s
        return None if error is None or length <= 0 else 100.0 * error / length


def run_spans(rows: Iterable[_Row], run_id: str) -> dict[str, tuple[datetime, datetime | None]]:
    """Each job's first transition in run ``run_id`` and its end (None: not ended there)."""
    first: dict[str, datetime] = {}
    last: dict[str, _Row] = {}
    for row in rows:
        if row.run_id != run_id:
            continue
        first.setdefault(row.label, row.at)
        last[row.label] = row
    return {
        label: (at, last[label].at if str(last[label].to_state) in _ENDS else None)
        for label, at in first.items()
    }


def check_night(forecast: StoredForecast, rows: Iterable[_Row]) -> NightCheck:
    """``forecast`` (a run's) against the run's ledger ``rows`` (the night's, any run)."""
    spans = run_spans(rows, forecast.run_id)
    kept = set(forecast.body.get("kept", []))
    jobs: list[JobCheck] = []
    ended = True
    for job in forecast.body.get("jobs", []):
        label = job["label"]
        if label in kept:
            continue
        started, end = spans.get(label, (None, None))
        if started is None or end is None:
            ended = False
            continue
        start_p50, end_p50 = (datetime.fromisoformat(job[k]) for k in ("start_p50", "end_p50"))
        expected_s = (end_p50 - start_p50).total_seconds()
        jobs.append(JobCheck(label, end_p50, end, expected_s, (end - started).total_seconds()))
    finished = max((j.end for j in jobs), default=None) if ended else None
    return NightCheck(
        night=forecast.night,
        run_id=forecast.run_id,
        start=forecast.start,
        expected=forecast.finish_p50,
        expected_p95=forecast.finish_p95,
        finished=finished,
        critical_path=list(forecast.critical_path),
        jobs=jobs,
    )


def worst(check: NightCheck, *, at_least_s: float = 60.0, ratio: float = 2.0) -> list[JobCheck]:
    """The jobs that ended ``at_least_s`` past their expected end, or took ``ratio`` times
    their usual or more: latest first."""
    out = [
        j
        for j in check.jobs
        if j.late_s >= at_least_s or (j.ratio is not None and j.ratio >= ratio and j.took_s > 1)
    ]
    return sorted(out, key=lambda j: (-j.late_s, j.label))


@dataclass(frozen=True)
class Accuracy:
    """The forecast over nights: median, p90 and worst absolute error of the finish, and the
    jobs most often late against their forecast (label, nights late), most first."""

    nights: list[NightCheck]  # newest first, each with a finish
    median_abs_s: float
    worst: NightCheck
    p90_abs_s: float = 0.0
    often_late: list[tuple[str, int]] = field(default_factory=list)

    @property
    def median_abs_pct(self) -> float:
        """The median absolute error as a share of each night's forecast length."""
        return statistics.median(abs(c.error_pct or 0.0) for c in self.nights)


def accuracy(checks: Sequence[NightCheck]) -> Accuracy | None:
    """Median and worst absolute finish error over the ``checks`` with a finish; None if none."""
    done = [c for c in checks if c.error_s is not None]
    if not done:
        return None
    errors = [abs(c.error_s or 0.0) for c in done]
    worst_one = max(done, key=lambda c: abs(c.error_s or 0.0))
    late: dict[str, int] = {}
    for check in done:
        for job in worst(check):
            late[job.label] = late.get(job.label, 0) + 1
    often = sorted(late.items(), key=lambda x: (-x[1], x[0]))[:5]
    return Accuracy(done, statistics.median(errors), worst_one, _p90(errors), often)


def _p90(values: Sequence[float]) -> float:
    """The 90th percentile, nearest rank (one night: itself)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]
