"""When a night should be done (``defaults.finish_by``), and which forecast jobs end after it.

Pure: no I/O. ``finish_by`` is a time of day in the schedule's timezone: the first such time at
or after the night's start (a night starting 23:00 with ``finish_by: "07:00"`` has until 07:00
the next day).
"""

from __future__ import annotations

from datetime import datetime, timedelta, tzinfo
from typing import TYPE_CHECKING

from nightshift.config.spend import parse_finish_by
from nightshift.engine.forecast import Late

if TYPE_CHECKING:
    from nightshift.engine.forecast import JobForecast

__all__ = ["finish_by_at", "past"]


def finish_by_at(start: datetime, finish_by: str, zone: tzinfo) -> datetime:
    """The first ``finish_by`` (``"07:00"``, in ``zone``) at or after ``start``."""
    hours, minutes = parse_finish_by(finish_by)
    local = start.astimezone(zone)
    at = local.replace(hour=hours, minute=minutes, second=0, microsecond=0)
    if at < local:
        # the same wall time the next day (a DST change moves it by the hour, as a clock does)
        at = (at.replace(tzinfo=None) + timedelta(days=1)).replace(tzinfo=zone)
    return at


def past(jobs: list[JobForecast], at: datetime, *, p95: bool = False) -> list[Late]:
    """Jobs whose expected (or ``p95``) end is after ``at``, latest first, with how late."""
    late = []
    for job in jobs:
        end, start = (job.end_p95, job.start_p95) if p95 else (job.end_p50, job.start_p50)
        if (seconds := (end - at).total_seconds()) > 0:
            late.append(Late(job.label, seconds, start <= at))
    return sorted(late, key=lambda x: -x.seconds)
