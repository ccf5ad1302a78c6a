"""The one protocol every backend speaks: submit -> id, status, cancel, logs."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

__all__ = ["Backend", "ExternalState", "JobSpec", "JobStatus"]


class ExternalState(StrEnum):
    """Lifecycle of an external job as Nightshift sees it."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def final(self) -> bool:
        return self in _FINAL


_FINAL = frozenset({ExternalState.SUCCEEDED, ExternalState.FAILED, ExternalState.CANCELLED})


@dataclass(frozen=True)
class JobSpec:
    """What a backend needs to start one job; ``options`` holds backend-specific fields."""

    label: str
    backend: str
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class JobStatus:
    """One observation of an external job."""

    state: ExternalState
    exit_code: int | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    detail: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Backend(Protocol):
    """An external job system. Raise TransientBackendError / PermanentBackendError only."""

    name: str

    def submit(self, spec: JobSpec) -> str:
        """Start the job; return its external id (enough to re-attach from a new process)."""
        ...

    def status(self, external_id: str) -> JobStatus:
        """Current state of the job."""
        ...

    def cancel(self, external_id: str) -> None:
        """Ask the job to stop; a job already final is left alone."""
        ...

    def logs(self, external_id: str, tail: int = 40) -> str:
        """The last ``tail`` lines of the job's output."""
        ...
