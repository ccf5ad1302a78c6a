"""A job's states: every name a night records for a job (ledger rows, events, the live table).

    waiting -> submitting -> submitted -> queued -> running -> an outcome (FINAL)
                                     (lost, fallback: on the way too)

``Outcome`` is the final part of the same vocabulary, typed: what a job ended as tonight. The
values are what the ledger stores: never rename one. A backend's view (``ExternalState``:
queued, running, succeeded, failed, cancelled) uses the same names.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["FINAL", "LIVE", "PATH", "JobState", "Outcome", "is_final"]


class JobState(StrEnum):
    """Every state a night records or shows for a job."""

    WAITING = "waiting"  # planned, not submitted yet (shown only, never stored)
    SUBMITTING = "submitting"
    SUBMITTED = "submitted"
    QUEUED = "queued"
    RUNNING = "running"
    LOST = "lost"  # failed tonight, kept live so a rerun re-attaches to the external job
    FALLBACK = "fallback"  # the batch was given up on; its missing rows answered on demand
    SUCCEEDED = "succeeded"
    PARTIAL = "partial"  # the job ran but some of its rows failed or went missing
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"
    STUCK_QUEUED = "stuck_queued"
    SKIPPED = "skipped"
    # shown and summed up only, never stored: an interrupted night stopped watching the job,
    # which still runs out there (in flight in the ledger, with its id; a rerun re-attaches)
    LEFT_RUNNING = "left_running"

    @property
    def final(self) -> bool:
        """An outcome: the job's last state tonight (a rerun may still re-attach)."""
        return self in FINAL


class Outcome(StrEnum):
    """The final word on one job: the final ``JobState``s, as their own type."""

    SUCCEEDED = JobState.SUCCEEDED.value
    PARTIAL = JobState.PARTIAL.value
    FAILED = JobState.FAILED.value
    CANCELLED = JobState.CANCELLED.value
    TIMEOUT = JobState.TIMEOUT.value
    STUCK_QUEUED = JobState.STUCK_QUEUED.value
    SKIPPED = JobState.SKIPPED.value
    # not an outcome: the night was interrupted while the job ran out there
    LEFT_RUNNING = JobState.LEFT_RUNNING.value

    @property
    def final(self) -> bool:
        """An outcome is a job's last state tonight (a rerun may still re-attach); a job left
        running is not final."""
        return self.value in FINAL


# The one definition of "final" for the state names a night records and shows: the outcomes.
FINAL: frozenset[JobState] = frozenset(
    JobState(outcome.value) for outcome in Outcome if outcome is not Outcome.LEFT_RUNNING
)
# An external job may still be out there: a rerun re-attaches to a job left in one of these.
LIVE: frozenset[JobState] = frozenset(
    {JobState.SUBMITTED, JobState.QUEUED, JobState.RUNNING, JobState.LOST, JobState.FALLBACK}
)
# the states a job passes on its way, in order (a backend may skip some)
PATH: tuple[str, ...] = (
    JobState.SUBMITTING,
    JobState.SUBMITTED,
    JobState.QUEUED,
    JobState.RUNNING,
)


def is_final(state: str) -> bool:
    """Whether a recorded or shown state name is a job's outcome (the job is done tonight)."""
    return state in FINAL
