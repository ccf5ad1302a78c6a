"""Human durations: ``500ms``, ``2s``, ``30m``, ``24h``, ``1d`` or plain seconds."""

from __future__ import annotations

import math
import re

__all__ = ["format_duration", "job_time", "parse_duration"]

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_LONGEST = 366 * 86400.0  # a year: anything longer is a typo, and would overflow a clock
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")


def parse_duration(value: str | int | float) -> float:
    """Seconds in ``value``; raises ValueError naming the accepted forms."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(
            f"not a duration: {value!r} (use e.g. 500ms, 2s, 30m, 24h or plain seconds)"
        )
    if isinstance(value, int | float):
        try:
            seconds = float(value)
        except OverflowError:
            seconds = math.inf
    else:
        match = _PATTERN.match(value)
        if not match:
            raise ValueError(
                f"not a duration: {value!r} (use e.g. 500ms, 2s, 30m, 24h or plain seconds)"
            )
        seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    if seconds < 0:
        raise ValueError(f"duration must not be negative: {value!r}")
    if not seconds <= _LONGEST:  # inf and nan too
        raise ValueError(f"duration too long: {value!r} (at most {_LONGEST / 86400:g} days)")
    return seconds


def format_duration(seconds: float) -> str:
    """Short human form: ``850ms``, ``42s``, ``12m``, ``1h05m``; under a millisecond with one
    significant digit (``0.3ms``): a job that ran is never ``0ms``."""
    if seconds < 0.0005 and seconds > 0:
        return f"{seconds * 1000:.1g}ms"
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    if seconds < 60:
        return f"{round(seconds)}s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def job_time(seconds: float) -> str:
    """A job's time as every page says it: ``format_duration``'s, but ``<1s`` under a second,
    whatever the clocks measured (a job that ended before its submit returned measures 0, another
    968 ms: one table showed both notations)."""
    return format_duration(seconds) if seconds >= 1 else "<1s"
