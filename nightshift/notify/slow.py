"""Tonight's slow jobs, as a digest names them (pure: the budgets are handed in).

A job is slow when it ran tonight and its whole duration (submit to end) is past the watch line
of its learned whole-job budget: its p95, the floor under it (``budgets.lookup.classify``), so a
job that usually takes a second is not slow at its third. By the quiet rule a slow job alone sends
nothing; a digest sent anyway (a partial or failed night) names them in one line, worst ratio
first: ``slow: extract:orders 14s, usual 3s (4.4× p95)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from nightshift.budgets.lookup import Budget, classify
from nightshift.config.durations import format_duration
from nightshift.engine.outcomes import JobOutcome, NightSummary, Outcome

__all__ = ["MAX_SLOW", "SlowJob", "slow_jobs", "slow_line"]

MAX_SLOW = 5  # named in the line; the rest counted ("and 2 more")


@dataclass(frozen=True)
class SlowJob:
    """A job that took ``duration_s`` tonight; usually ``usual_s`` (its p50), at most ``p95_s``."""

    label: str
    duration_s: float
    usual_s: float
    p95_s: float

    @property
    def ratio(self) -> float:
        """Tonight's duration over the job's p95."""
        return self.duration_s / self.p95_s

    def named(self) -> str:
        """``extract:orders 14s, usual 3s (4.4× p95)``."""
        took, usual = format_duration(self.duration_s), format_duration(self.usual_s)
        return f"{self.label} {took}, usual {usual} ({self.ratio:.1f}× p95)"


def slow_jobs(summary: NightSummary, budget_of: Callable[[str], Budget | None]) -> list[SlowJob]:
    """The jobs that ran tonight past their whole-job budget's watch line, worst ratio first.

    ``budget_of`` gives a label's whole-job budget (``Budgets.job``), None while learning.
    """
    slow = []
    for job in summary.jobs:
        budget = budget_of(job.label) if _ran(job) else None
        if budget is None or budget.p95 <= 0 or classify(job.duration_s, budget) == "ok":
            continue
        slow.append(SlowJob(job.label, job.duration_s, budget.p50, budget.p95))
    return sorted(slow, key=lambda job: -job.ratio)


def slow_line(slow: Sequence[SlowJob], most: int = MAX_SLOW) -> str | None:
    """``slow: extract:orders 14s, usual 3s (4.4× p95); ...`` (None: no slow job)."""
    if not slow:
        return None
    line = "slow: " + "; ".join(job.named() for job in slow[:most])
    return f"{line}; and {len(slow) - most} more" if len(slow) > most else line


def _ran(job: JobOutcome) -> bool:
    """Ran tonight: not kept from an earlier run of the night, not skipped, submitted."""
    if job.kept or job.state is Outcome.SKIPPED:
        return False
    return job.attempts > 0 or job.external_id is not None
