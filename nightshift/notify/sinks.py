"""The notifier as a listener: the night's events and the watchdog's findings, into Slack.

``NoticeSink`` is a night-event sink: a Gemini batch handed to its SLA fallback, a job stuck in
its queue, timed out or kept from its submit by a spend cap go to the ``alert`` route, in the
night's thread, as they happen (dwell alerts come through ``SlackAlertSink``).
``IncidentSink`` tells the alert route about an incident (several jobs of one backend stalled
together): one top-level message, then its later levels, its jobs' ends and its own end as
replies in its thread. A job of an incident has its end said there, not as a notice.
``SlackFindingSink`` is the watchdog's ``FindingSink``.
Neither raises: the notifier logs what it could not send and keeps it in the outbox.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from nightshift.engine.alerts import Alert
from nightshift.engine.events import IncidentChanged, JobChanged, JobFinished, NightEvent
from nightshift.engine.incidents import Closed, Incident, Joined, Left, Opened
from nightshift.engine.spend import SPEND_REFUSED
from nightshift.notify.notifier import Notifier
from nightshift.notify.render import render_incident, render_incident_reply
from nightshift.states import JobState, Outcome
from nightshift.store.alert_log import AlertRecord

__all__ = ["FALLBACK_LINE", "IncidentSink", "NoticeSink", "SlackFindingSink"]

FALLBACK_LINE = "reached 80 % of its SLA: the batch was cancelled, missing rows answered on demand"
_FINAL_NOTICES = {Outcome.TIMEOUT: "timeout", Outcome.STUCK_QUEUED: "stuck in queue"}


class NoticeSink:
    """Tells the alert route about a fallback firing, a stuck queue, a timeout and a paid job
    a spend cap kept from its submit."""

    def __init__(
        self, notifier: Notifier, grouped: Callable[[str], bool] = lambda _label: False
    ) -> None:
        self.notifier = notifier
        self._grouped = grouped  # the job was in an incident tonight: its thread says its end

    def __call__(self, event: NightEvent) -> None:
        if (
            isinstance(event, JobFinished)
            and event.outcome.state in _FINAL_NOTICES
            and self._grouped(event.outcome.label)
        ):
            return  # its incident's thread says its end
        if isinstance(event, JobChanged) and event.state == JobState.FALLBACK:
            self.notifier.notice(
                event.night, event.label, FALLBACK_LINE, backend=event.backend, kind="fallback"
            )
        elif isinstance(event, JobFinished) and event.outcome.state in _FINAL_NOTICES:
            outcome, kind = event.outcome, _FINAL_NOTICES[event.outcome.state]
            # the notice names the job: the line says only what happened to it
            line = f"{kind} after {outcome.took()}"
            line += f": {outcome.detail}" if outcome.detail else ""
            self.notifier.notice(
                event.night, outcome.label, line, backend=outcome.backend, kind=kind
            )
        elif isinstance(event, JobFinished) and event.outcome.data.get(SPEND_REFUSED):
            # a cap kept a paid job from its submit: said at once, the night goes on
            outcome = event.outcome
            line = f"not submitted: {outcome.detail}"
            self.notifier.notice(
                event.night, outcome.label, line, backend=outcome.backend, kind="spend cap"
            )


class IncidentSink:
    """An incident into the alert route: its opening once one of its levels is sent
    (``notify.alert_levels``), everything after it as a reply in its thread."""

    def __init__(self, notifier: Notifier) -> None:
        self.notifier = notifier
        self._opened: set[str] = set()  # incidents whose opening message went out

    def __call__(self, event: NightEvent) -> None:
        if not isinstance(event, IncidentChanged):
            return
        change, config = event.change, self.notifier.config
        incident, night = change.incident, event.night
        if isinstance(change, Opened):
            # once: a join heard first (news out of order) opened it already
            if incident.level in config.alert_levels and incident.key not in self._opened:
                self._open(incident, night, change.alerts)
            return
        if isinstance(change, Joined) and incident.key not in self._opened:
            if change.alert.level in config.alert_levels:  # the first of its levels sent
                self._open(incident, night, (change.alert,))
            return
        if incident.key not in self._opened:
            return  # nothing of it was said: its jobs' ends are in the digest
        if isinstance(change, Joined):
            if change.alert.level in config.alert_levels:
                alert = change.alert
                line = f"{alert.state} for {alert.measure()}, {alert.level}"
                self._reply(incident, night, line, alert.label)
        elif isinstance(change, Left) and change.final:
            self._reply(incident, night, f"ended {change.state}", change.label)
        elif isinstance(change, Closed):
            held = incident.hold_line()
            end = f"incident {incident.end_line()}" + (f"; {held}" if held else "")
            self._reply(incident, night, end)

    def _open(self, incident: Incident, night: str, alerts: Sequence[Alert]) -> None:
        message = render_incident(
            incident, alerts, self.notifier.config, night=night, catalogue=self.notifier.name
        )
        if message is not None:
            self._opened.add(incident.key)
            self.notifier.post(message, night)

    def _reply(self, incident: Incident, night: str, line: str, label: str | None = None) -> None:
        message = render_incident_reply(incident, line, self.notifier.config, label=label)
        if message is not None:
            self.notifier.post(message, night)


class SlackFindingSink:
    """The watchdog's new alerts (overstaying job, stopped night, stale label, streak)."""

    def __init__(self, notifier: Notifier) -> None:
        self.notifier = notifier

    def send(self, alert: AlertRecord) -> None:
        """One notice in the alert route, in that night's thread."""
        line = alert.detail or f"{alert.kind} {alert.level}"
        self.notifier.notice(
            alert.night, alert.label or "(night)", line, kind=f"watchdog {alert.kind}"
        )
