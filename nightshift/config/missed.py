"""``defaults.missed``: what a night does about the earlier nights of its schedule never run."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["MAX_NIGHTS", "Missed"]

MAX_NIGHTS = 3  # the missed nights `run: all` catches up by default, the newest of them


class Missed(BaseModel):
    """``run``: ``latest`` (the default) runs only the latest night due and names the earlier
    ones it finds missed, with the command that runs them; ``all`` runs every missed night of
    the last ``max_nights`` first, one at a time (``order``: oldest first, or newest), naming
    older ones; ``none`` runs only the latest night due and names the others as left by choice.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    run: Literal["latest", "all", "none"] = "latest"
    max_nights: int = Field(MAX_NIGHTS, ge=1, le=31)
    order: Literal["oldest", "newest"] = "oldest"

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        # `missed: all` says `missed: {run: all}`
        return {"run": data} if isinstance(data, str) else data
