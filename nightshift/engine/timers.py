"""Which timers apply to a job, and the words that say which one ended it (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from nightshift.config.catalogue import AnyJob, Defaults, GeminiBatchJob
from nightshift.config.durations import format_duration

__all__ = ["JobTimers", "job_timers"]


@dataclass(frozen=True)
class JobTimers:
    """A job's timers on the watcher's clock (None: no such timer), each with its explanation."""

    timeout_at: float | None = None
    timeout_why: str | None = None
    queued_timeout_at: float | None = None
    queued_why: str | None = None
    fallback_at: float | None = None


def job_timers(
    job: AnyJob,
    defaults: Defaults,
    *,
    origin: float,
    deadline_at: float,
    deadline_wall: datetime,
) -> JobTimers:
    """The timers of a job submitted at ``origin``, in a night that ends at ``deadline_at``.

    A Gemini batch's clock is its SLA: the night's deadline and the default queue timer don't
    cut it (a batch may sit PENDING for hours); only timers set on the job itself do.
    """
    batch = isinstance(job, GeminiBatchJob)
    timeout_at, timeout_why = None, None
    if not batch:
        timeout_at, timeout_why = deadline_at, f"night deadline at {deadline_wall:%H:%M} UTC"
    if job.timeout is not None and (timeout_at is None or origin + job.timeout < timeout_at):
        timeout_at, timeout_why = origin + job.timeout, f"job timeout {_dur(job.timeout)}"
    queued = job.queued_timeout if batch else job.queued_timeout or defaults.queued_timeout
    fallback_at = None
    if isinstance(job, GeminiBatchJob) and job.fallback != "none":
        sla = job.sla if job.sla is not None else defaults.sla
        fallback_at = origin + sla * defaults.sla_fallback_at
    return JobTimers(
        timeout_at=timeout_at,
        timeout_why=timeout_why,
        queued_timeout_at=origin + queued if queued is not None else None,
        queued_why=f"still queued after queued_timeout {_dur(queued)}" if queued else None,
        fallback_at=fallback_at,
    )


def _dur(seconds: float | None) -> str:
    return format_duration(seconds or 0.0)
