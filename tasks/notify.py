"""The night's last task: tell Slack how it went (a digest, an alert, or nothing when all is ok).

Its own failure never changes the night: the notifier neither raises nor blocks for long, and
the flow calls this task for its state only.
"""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from nightshift.engine.outcomes import NightSummary
from nightshift.notify.notifier import Notifier

__all__ = ["notify"]


@task(name="notify", cache_policy=NO_CACHE)
def notify(
    notifier: Notifier, summary: NightSummary, night: str, flow_run_id: str | None = None
) -> int:
    """Send the night's messages (what its severity routes to); how many Slack accepted."""
    sent = notifier.night_end(summary, night=night, flow_run_id=flow_run_id)
    return sum(1 for delivery in sent if delivery.ok)
