"""Which timers apply to a job, and the words that say which one ended it (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from nightshift.budgets.lookup import Budget
from nightshift.config.catalogue import AnyJob, Defaults, GeminiBatchJob
from nightshift.config.durations import format_duration

__all__ = ["JobTimers", "job_timers", "learned_limit"]


@dataclass(frozen=True)
class JobTimers:
    """A job's timers on the watcher's clock (None: no such timer), each with its explanation."""

    timeout_at: float | None = None
    timeout_why: str | None = None
    queued_timeout_at: float | None = None
    queued_why: str | None = None
    fallback_at: float | None = None
    # a job the service does not know yet is given up as lost then (never past the timeout or
    # the queue timer); the bound it was given, for the words
    visible_at: float | None = None
    visible_within: float | None = None
    # when the timeout is the learned one: the expected duration (p95) and the margin past it
    learned: tuple[float, float] | None = None

    def unseen_text(self) -> str:
        """Why a job the service never showed was given up: ``never seen at the service in
        10m (visible_within)``."""
        return f"lost: never seen at the service in {_dur(self.visible_within)} (visible_within)"

    def timeout_text(self, ran_s: float) -> str | None:
        """Why the timeout ended the job: ``ran 2h10m, expected 1h05m + 30m`` when learned."""
        if self.learned is None:
            return self.timeout_why
        expected, margin = self.learned
        return f"ran {_dur(ran_s)}, expected {_dur(expected)} + {_dur(margin)}"


def learned_limit(
    job: AnyJob, defaults: Defaults, budget: Budget | None
) -> tuple[float, float] | None:
    """(expected, margin) of a job with a learned timeout, once its whole-job budget has
    ``defaults.min_samples`` nights; None: no learned timeout (yet). ``expected + margin`` is
    never below the floor."""
    if not job.learned or budget is None:
        return None
    rule = defaults.learned_timeout
    if budget.n < defaults.min_samples:
        return None
    margin = job.over_expected if job.over_expected is not None else rule.over_expected
    margin = max(margin, rule.floor - budget.p95)
    return budget.p95, margin


def job_timers(
    job: AnyJob,
    defaults: Defaults,
    *,
    origin: float,
    deadline_at: float,
    deadline_wall: datetime,
    expected: Budget | None = None,
) -> JobTimers:
    """The timers of a job submitted at ``origin``, in a night that ends at ``deadline_at``.

    A Gemini batch's clock is its SLA: the night's deadline and the default queue timer don't
    cut it (a batch may sit PENDING for hours); only timers set on the job itself do.
    ``expected``: the job's whole-job budget, for a learned timeout (``learned_limit``); the
    fixed timeout and the deadline stay the outer bound.
    """
    batch = isinstance(job, GeminiBatchJob)
    timeout_at, timeout_why = None, None
    if not batch:
        timeout_at, timeout_why = deadline_at, f"night deadline at {deadline_wall:%H:%M} UTC"
    if job.timeout is not None and (timeout_at is None or origin + job.timeout < timeout_at):
        timeout_at, timeout_why = origin + job.timeout, f"job timeout {_dur(job.timeout)}"
    learned = learned_limit(job, defaults, expected)
    if learned is not None and (timeout_at is None or origin + sum(learned) < timeout_at):
        timeout_at, timeout_why = origin + sum(learned), None
    else:
        learned = None
    queued = job.queued_timeout if batch else job.queued_timeout or defaults.queued_timeout
    fallback_at = None
    if isinstance(job, GeminiBatchJob) and job.fallback != "none":
        sla = job.sla if job.sla is not None else defaults.sla
        fallback_at = origin + sla * defaults.sla_fallback_at
    queued_timeout_at = origin + queued if queued is not None else None
    visible = job.visible_within if job.visible_within is not None else defaults.visible_within
    bounds = [t for t in (origin + visible, timeout_at, queued_timeout_at) if t is not None]
    return JobTimers(
        timeout_at=timeout_at,
        timeout_why=timeout_why,
        queued_timeout_at=queued_timeout_at,
        visible_at=min(bounds),
        visible_within=min(bounds) - origin,
        queued_why=f"still queued after queued_timeout {_dur(queued)}" if queued else None,
        fallback_at=fallback_at,
        learned=learned,
    )


def _dur(seconds: float | None) -> str:
    return format_duration(seconds or 0.0)
