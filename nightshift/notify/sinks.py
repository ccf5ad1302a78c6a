"""The notifier as a listener: the night's events and the watchdog's findings, into Slack.

``NoticeSink`` is a night-event sink: a Gemini batch handed to its SLA fallback, a job stuck in
its queue, timed out or kept from its submit by a spend cap go to the ``alert`` route, in the
night's thread, as they happen (dwell alerts come through ``SlackAlertSink``).
``SlackFindingSink`` is the watchdog's ``FindingSink``.
Neither raises: the notifier logs what it could not send and keeps it in the outbox.
"""

from __future__ import annotations

from nightshift.config.durations import format_duration
from nightshift.engine.events import JobChanged, JobFinished, NightEvent
from nightshift.engine.spend import SPEND_REFUSED
from nightshift.notify.notifier import Notifier
from nightshift.states import JobState, Outcome
from nightshift.store.alert_log import AlertRecord

__all__ = ["FALLBACK_LINE", "NoticeSink", "SlackFindingSink"]

FALLBACK_LINE = "reached 80 % of its SLA: the batch was cancelled, missing rows answered on demand"
_FINAL_NOTICES = {Outcome.TIMEOUT: "timeout", Outcome.STUCK_QUEUED: "stuck in queue"}


class NoticeSink:
    """Tells the alert route about a fallback firing, a stuck queue, a timeout and a paid job
    a spend cap kept from its submit."""

    def __init__(self, notifier: Notifier) -> None:
        self.notifier = notifier

    def __call__(self, event: NightEvent) -> None:
        if isinstance(event, JobChanged) and event.state == JobState.FALLBACK:
            self.notifier.notice(
                event.night, event.label, FALLBACK_LINE, backend=event.backend, kind="fallback"
            )
        elif isinstance(event, JobFinished) and event.outcome.state in _FINAL_NOTICES:
            outcome, kind = event.outcome, _FINAL_NOTICES[event.outcome.state]
            # the notice names the job: the line says only what happened to it
            line = f"{kind} after {format_duration(outcome.duration_s)}"
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
