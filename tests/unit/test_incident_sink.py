"""An incident's opening reaches Slack once, whatever order its news comes in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from nightshift.config.notify import NotifyConfig
from nightshift.engine.alerts import Alert
from nightshift.engine.events import IncidentChanged
from nightshift.engine.incidents import Incident, Joined, Opened
from nightshift.notify.notifier import Notifier
from nightshift.notify.send import Delivery
from nightshift.notify.sinks import IncidentSink

NIGHT = "2026-12-07"
AT = datetime(2026, 12, 7, 2, 0, tzinfo=UTC)
CONFIG = NotifyConfig.model_validate(
    {"env": "test", "alert_levels": ["watch", "alert"], "routes": {"alert": {"channel": "#a"}}}
)


class Posted:
    """A Slack sender that keeps what it was asked to post (top-level, or a reply)."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, str | None]] = []

    def post(self, _route: Any, _to: Any, text: str, _blocks: Any, thread: str | None) -> Delivery:
        self.posts.append((text, thread))
        return Delivery(True, ts=f"1.{len(self.posts)}")


def _alert(label: str) -> Alert:
    return Alert(NIGHT, "outage", label, "cli", "queued", "alert", 10.0, 0.3, AT, 5.0, "outage")


def test_an_incident_joined_before_its_opening_is_heard_opens_it_once() -> None:
    sender = Posted()
    sink = IncidentSink(Notifier(CONFIG, catalogue="outage", sender=sender))  # type: ignore[arg-type]
    since = AT - timedelta(seconds=10)
    two = Incident("cli", "queued", 1, AT, since, ("a", "b"), "alert")
    three = Incident("cli", "queued", 1, AT, since, ("a", "b", "c"), "alert")
    # the join heard first opens it (its first level sent), the opening after it says nothing
    sink(IncidentChanged(NIGHT, "outage", Joined(three, _alert("c"))))
    sink(IncidentChanged(NIGHT, "outage", Opened(two, (_alert("a"), _alert("b")))))
    tops = [text for text, thread in sender.posts if thread is None]
    assert len(tops) == 1, sender.posts
    assert "cli: 3 jobs stalled in queued" in tops[0]
