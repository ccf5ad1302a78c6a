"""The night's last task: tell Slack how it went (a digest, an alert, or nothing when all is ok).

Its own failure never changes the night: the notifier neither raises nor blocks for long, and
the flow calls this task for its state only.
"""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from nightshift.engine.outcomes import NightSummary
from nightshift.notify.notifier import Notifier
from nightshift.notify.slow import SlowJob

__all__ = ["notify"]


@task(name="notify", task_run_name="notify slack", cache_policy=NO_CACHE, tags=["nightshift"])
def notify(
    notifier: Notifier,
    summary: NightSummary,
    night: str,
    flow_run_id: str | None = None,
    slow: list[SlowJob] | None = None,
) -> int:
    """Send the night's messages (what its severity routes to); how many Slack accepted.

    Logs each message: its channel, top-level or the thread it replied in, what Slack said,
    and its first line. ``slow``: tonight's slow jobs, named by a digest that is sent.
    """
    logger = get_run_logger()
    start = len(notifier.journal)
    sent = notifier.night_end(summary, night=night, flow_run_id=flow_run_id, slow=slow or ())
    for line in notifier.journal[start:]:
        logger.info("slack: %s", line)
    if len(notifier.journal) == start:
        logger.info("slack: nothing to send (the %s route is silent)", summary.severity.value)
    return sum(1 for delivery in sent if delivery.ok)
