"""``incident:``: when several jobs of one backend stall together, and what the night then does.

``defaults.incident`` holds for every backend; ``limits.<backend>.incident`` overrides it for one
(``limits: {cli: {incident: {hold_submits: true}}}``). An incident opens when ``jobs`` jobs of
one backend pass a level (watch or alert) in the same state within ``window`` of each other, or
at least two and more than half of that backend's jobs in flight do (engine/incidents.py).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from nightshift.config.durations import parse_duration

__all__ = ["GATHER_S", "IncidentSettings"]

# a level of a job whose backend has others in the same state waits this long for them, so an
# outage that starts a second apart is one message, not a first lone one and then the incident
GATHER_S = 5.0
_POLL_TICKS = 2  # the window's default: two of the night's longest polls


class IncidentSettings(BaseModel):
    """``jobs``: how many stalled jobs of one backend make an incident; ``window``: how close
    together their levels come (None: two poll ticks, ``2 x defaults.poll.max``);
    ``hold_submits``: submit nothing more to that backend while it lasts (a paid job is held
    whatever this says)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    jobs: int = Field(3, ge=2, le=1000)
    window: Annotated[float, BeforeValidator(parse_duration), Field(gt=0)] | None = None
    hold_submits: bool = False

    def window_s(self, poll_max_s: float) -> float:
        """The window in seconds: its own, else two of the night's longest polls."""
        return self.window if self.window is not None else _POLL_TICKS * max(poll_max_s, 1.0)
