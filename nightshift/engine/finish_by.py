"""When a night should be done (``defaults.finish_by``): which forecast jobs end after it is
``engine.forecast.past``, as for the deadline.

Pure: no I/O. ``finish_by`` is a time of day in the schedule's timezone: the first such time at
or after the night's start (a night starting 23:00 with ``finish_by: "07:00"`` has until 07:00
the next day).
"""

from __future__ import annotations

from datetime import datetime, timedelta, tzinfo

from nightshift.config.spend import parse_finish_by

__all__ = ["finish_by_at"]


def finish_by_at(start: datetime, finish_by: str, zone: tzinfo) -> datetime:
    """The first ``finish_by`` (``"07:00"``, in ``zone``) at or after ``start``."""
    hours, minutes = parse_finish_by(finish_by)
    local = start.astimezone(zone)
    at = local.replace(hour=hours, minute=minutes, second=0, microsecond=0)
    if at < local:
        # the same wall time the next day (a DST change moves it by the hour, as a clock does)
        at = (at.replace(tzinfo=None) + timedelta(days=1)).replace(tzinfo=zone)
    return at
