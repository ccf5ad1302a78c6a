"""What a catalogue says about money: a job's declared cost, a spend cap, a finish-by time.

``cost: {usd: 4.10}`` is a job's estimate where nothing is learned yet (a job whose results say
what it cost learns it: Gemini tokens x the price table, an ``http`` job's ``cost_path``);
``defaults.spend: {usd: 50, per: night}`` caps what one night may spend or commit, and a job's own
``spend: {usd: ...}`` caps that job. ``defaults.finish_by: "07:00"`` is when the night should be
done, in the schedule's timezone (``nightshift plan`` says which jobs would end after it).
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

__all__ = ["Cost", "FinishBy", "JobSpend", "NightSpend", "Usd", "parse_finish_by"]

_CLOCK = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)$")


def _usd(value: Any) -> Any:
    # `usd: yes` and `usd: "$5"` are slips; a number of US dollars, never inf or NaN
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"a number of US dollars (like 4.10), not {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"a finite number of US dollars, not {value!r}")
    return float(value)


Usd = Annotated[float, BeforeValidator(_usd), Field(ge=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Dollars(_Strict):
    usd: Usd

    @model_validator(mode="before")
    @classmethod
    def _bare_number(cls, data: Any) -> Any:
        # `cost: 4.10` says the same as `cost: {usd: 4.10}`
        return {"usd": data} if isinstance(data, int | float) else data


class Cost(_Dollars):
    """A job's declared cost per run, used until its own results have taught one."""


class JobSpend(_Dollars):
    """A cap on one job: not submitted when its expected cost passes it."""

    usd: Annotated[Usd, Field(gt=0)]


class NightSpend(JobSpend):
    """A cap on what one night spends and commits."""

    per: Literal["night"] = "night"


def parse_finish_by(value: str) -> tuple[int, int]:
    """``"07:00"`` -> (7, 0); ValueError otherwise."""
    found = _CLOCK.match(value.strip()) if isinstance(value, str) else None
    if found is None:
        raise ValueError(f'a time of day as "HH:MM" (like "07:00"), not {value!r}')
    return int(found[1]), int(found[2])


def _finish_by(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        # YAML 1.1 reads an unquoted 07:00 as the sexagesimal 420
        raise ValueError(f'quote the time: finish_by: "{value // 60:02d}:{value % 60:02d}"')
    hours, minutes = parse_finish_by(value)
    return f"{hours:02d}:{minutes:02d}"


FinishBy = Annotated[str, BeforeValidator(_finish_by)]
