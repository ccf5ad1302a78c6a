"""A backend's limits in the catalogue: a concurrency cap, a submission rate, or both.

``limits: {cli: 4}`` caps the job CLI at four jobs in flight; ``limits: {cli: {concurrency: 4,
rate: 2/s}}`` also paces its submissions at two a second. A backend with no ``rate`` is paced by
``defaults.stagger`` (the gap between two submissions to one backend).
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from nightshift.config.incident import IncidentSettings

__all__ = ["BackendLimit", "format_rate", "parse_rate"]

_PER = {"s": 1.0, "sec": 1.0, "second": 1.0, "min": 60.0, "minute": 60.0, "h": 3600.0}
_PER["hour"] = 3600.0
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*([a-z]+)\s*$")


def parse_rate(value: Any) -> float:
    """Submissions per second in ``2/s``, ``30/min`` or ``100/h``; ValueError otherwise."""
    match = _RATE.match(value) if isinstance(value, str) else None
    if match is None or match.group(2) not in _PER:
        raise ValueError(f"not a rate: {value!r} (use e.g. 2/s, 30/min or 100/h)")
    per_s = float(match.group(1)) / _PER[match.group(2)]
    if per_s <= 0:
        raise ValueError(f"a rate must be more than 0: {value!r}")
    return per_s


def format_rate(per_s: float) -> str:
    """``2/s``, ``30/min``, ``100/h``: the unit that keeps the number whole if one does."""
    for unit, seconds in (("s", 1.0), ("min", 60.0), ("h", 3600.0)):
        count = per_s * seconds
        if abs(count - round(count)) < 1e-9 and round(count) >= 1:
            return f"{round(count)}/{unit}"
    return f"{per_s:g}/s"


Rate = Annotated[float, BeforeValidator(parse_rate)]


class BackendLimit(BaseModel):
    """At most ``concurrency`` jobs in flight, submitted at most ``rate`` a second."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    concurrency: int | None = Field(None, ge=1)
    rate: Rate | None = None
    # this backend's own `incident:` (over `defaults.incident`): nightshift.config.incident
    incident: IncidentSettings | None = None

    @model_validator(mode="before")
    @classmethod
    def _plain_number(cls, value: Any) -> Any:
        # the plain number stays what it always was: the concurrency
        if isinstance(value, int) and not isinstance(value, bool):
            return {"concurrency": value}
        if not isinstance(value, dict):
            raise ValueError("a limit is a number (the concurrency) or {concurrency: N, rate: N/s}")
        return value

    @model_validator(mode="after")
    def _something(self) -> BackendLimit:
        if self.concurrency is None and self.rate is None and self.incident is None:
            raise ValueError("give a concurrency, a rate, an incident: setting, or several")
        return self
