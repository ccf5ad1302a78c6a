"""One job's run tonight: what it is, and what the night knows of it so far (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from nightshift.backends.base import Backend, JobSpec
from nightshift.config.catalogue import AnyJob
from nightshift.engine.timers import JobTimers

__all__ = ["JobRun"]


@dataclass
class JobRun:
    """A job of the night and its run: one per job, kept by the night's context.

    ``attempt``, ``external_id`` and ``final_seen`` last the whole night (the job's events name
    them; a job that is interrupted, or whose ledger is away, is ended from them). The rest
    belongs to the current try of the job and is set again by each one (``begin``).
    """

    label: str
    job: AnyJob  # its catalogue entry
    attempt: int = 0  # its attempt tonight, for its events (0: none yet)
    external_id: str | None = None  # its job out there, once submitted or re-attached
    # when the watcher first saw its final state: the ledger's time for its final row
    final_seen: datetime | None = None
    # the current try
    backend: Backend | None = None
    spec: JobSpec | None = None
    # its duration counts from here: its submission (a re-attached job's, by an earlier run)
    started: datetime | None = None
    timers: JobTimers | None = None  # on the watcher's clock, once it is out there
    # the try reached its job out there (watched it, or resumed its fallback): a bad end keeps
    # the tail of its log
    watched: bool = False
    # the trace its try belongs to and the span it hangs under (hex; the night run that began
    # it; None: untraced)
    trace_id: str | None = None
    trace_parent: str | None = None

    def begin(self, backend: Backend) -> None:
        """A new try of the job, on ``backend``: what the last try set for itself is gone."""
        self.backend = backend
        self.spec = None
        self.started = None
        self.timers = None
        self.watched = False

    def take_final_seen(self) -> datetime | None:
        """When its final state was first seen (None: not seen), forgotten once taken."""
        seen, self.final_seen = self.final_seen, None
        return seen
