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
from nightshift.config.names import shown_name

__all__ = ["Alert", "AlertSink", "Level", "LogAlertSink", "NoAlertSink", "Raised", "seconds_text"]

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
    floor_s: float = 0.0  # the floor under p95: no level before max(p95, floor)
    name: str | None = None  # the catalogue as people know it (its name; else ``catalogue``)
    # where the budget comes from: the job's own nights, its backend's pooled ones (a job with
    # fewer nights than min_samples), or its declared `expect:` (none yet of either)
    source: str = "job"

    @property
    def pooled(self) -> bool:
        """Its level is its backend's pooled budget's."""
        return self.source == "backend"

    @property
    def shown(self) -> str:
        """The catalogue's name for messages: never a local path."""
        return self.name or shown_name(self.catalogue)

    @property
    def limit_s(self) -> float:
        """The dwell this level passed: p95 (or the floor) for a watch, twice it for an alert."""
        watch = max(self.p95_s, self.floor_s)
        return watch if self.level == "watch" else 2 * watch

    @property
    def key(self) -> Raised:
        """What makes it once per night: the ledger's (label, state, level)."""
        return (self.label, self.state, self.level)

    def line(self) -> str:
        """One line for a person: ``alert: nightly/etl queued for 2h10m (p95 41m, x3.2)``."""
        return (
            f"{self.level}: {self.shown}/{self.label} ({self.backend}) {self.state} for "
            f"{self.measure()} night {self.night}"
        )

    def measure(self) -> str:
        """``2h10m (p95 41m, x3.2)``; with ``floor 6s`` when the floor, not p95, set the limit;
        ``p95 41m pooled from cli`` when the job's own nights are too few yet."""
        # a state that is normally instant (p95 0) has no ratio to speak of: its floor says it
        ratio = f", x{self.dwell_s / self.p95_s:.1f}" if self.p95_s > 0 else ""
        floored = f", floor {seconds_text(self.floor_s)}" if self.floor_s > self.p95_s else ""
        said = {"backend": f" pooled from {self.backend}", "declared": " declared (expect:)"}
        p95 = f"p95 {seconds_text(self.p95_s)}{said.get(self.source, '')}"
        return f"{seconds_text(self.dwell_s)} ({p95}{ratio}{floored})"


def seconds_text(seconds: float) -> str:
    """A duration for an alert line: tenths below a minute (``1.4s``: never "1s vs 1s")."""
    return f"{seconds:.1f}s" if seconds < 60 else format_duration(seconds)


class AlertSink(Protocol):
    """Where level changes go: the Slack notification implements it (and may skip ``watch``)."""

    def send(self, alert: Alert) -> None:
        """Announce one level change; called once per job, state and level per night."""
        ...


class LogAlertSink:
    """The stand-in sink: a watch at INFO, an alert at ERROR."""

    def __init__(self, logger: Logger | None = None) -> None:
        self._logger: Logger = logger or logging.getLogger("nightshift.alerts")

    def send(self, alert: Alert) -> None:
        """Log the change's line at a level a log reader filters on."""
        severity = logging.ERROR if alert.level == "alert" else logging.INFO
        self._logger.log(severity, "%s", alert.line())


class NoAlertSink:
    """Announces nothing: where the night's log sink already logs every level once."""

    def send(self, alert: Alert) -> None:
        """Nothing to do."""
