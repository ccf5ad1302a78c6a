"""A job's level change (watch or alert) as a value, and the one interface that announces it.

The detector (engine/detection.py) decides; an ``AlertSink`` tells people. The Slack notification
will implement ``AlertSink``; until then ``LogAlertSink`` writes each change to a log.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from nightshift.budgets.lookup import Level
from nightshift.config.durations import format_duration

__all__ = ["Alert", "AlertSink", "Level", "LogAlertSink", "Raised"]

Logger = logging.Logger | logging.LoggerAdapter  # type: ignore[type-arg]

"""ok: dwell <= p95; watch: > p95; alert: > 2 x p95 (of the job's learned budget for its state)."""

Raised = tuple[str, str, Level]
"""(label, state, level): what the ledger keeps of a level already announced tonight."""


@dataclass(frozen=True)
class Alert:
    """A job's time in ``state`` passed a level tonight (``watch`` or ``alert``, never ``ok``)."""

    night: str
    catalogue: str
    label: str
    backend: str
    state: str
    level: Level
    dwell_s: float  # seconds in ``state`` when the level was passed (as observed)
    p95_s: float  # the budget it was measured against: watch > p95, alert > 2 x p95
    at: datetime  # aware, UTC: the observation that saw it

    @property
    def key(self) -> Raised:
        """What makes it once per night: the ledger's (label, state, level)."""
        return (self.label, self.state, self.level)

    def line(self) -> str:
        """One line for a person: ``alert: nightly/etl queued for 2h10m (p95 41m, x3.2)``."""
        ratio = self.dwell_s / self.p95_s if self.p95_s > 0 else float("inf")
        return (
            f"{self.level}: {self.catalogue}/{self.label} ({self.backend}) {self.state} for "
            f"{format_duration(self.dwell_s)} (p95 {format_duration(self.p95_s)}, "
            f"x{ratio:.1f}) night {self.night}"
        )


class AlertSink(Protocol):
    """Where level changes go: the Slack notification implements it (and may skip ``watch``)."""

    def send(self, alert: Alert) -> None:
        """Announce one level change; called once per job, state and level per night."""
        ...


class LogAlertSink:
    """The stand-in sink: a warning for a watch, an error for an alert."""

    def __init__(self, logger: Logger | None = None) -> None:
        self._logger: Logger = logger or logging.getLogger("nightshift.alerts")

    def send(self, alert: Alert) -> None:
        """Log the change's line at a level a log reader filters on."""
        severity = logging.ERROR if alert.level == "alert" else logging.WARNING
        self._logger.log(severity, "%s", alert.line())
