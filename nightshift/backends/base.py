"""The one protocol every backend speaks (submit -> id, status, cancel, logs), and its options.

A backend may also have optional abilities, each a small protocol: ``ListsStatus`` (many
states in one call), ``Collects`` (results once final), ``FallsBack`` (give up on a batch and
answer its rows another way), ``Closeable`` (clients to close at the night's end) and ``Streams``
(jobs that push their changes).
``capabilities(backend)`` checks them all in one place; callers use its record, never getattr.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from nightshift.states import JobState

if TYPE_CHECKING:
    from nightshift.errors import BackendError

__all__ = [
    "COST_USD",
    "FINAL_STATES",
    "AwaitsStatus",
    "Backend",
    "Capabilities",
    "Closeable",
    "Collects",
    "ExternalState",
    "FallsBack",
    "JobSpec",
    "JobStatus",
    "ListsSome",
    "ListsStatus",
    "Streams",
    "capabilities",
]

# the key of what a job cost, in USD, in a final status's ``extra`` and in the job's results
COST_USD = "cost_usd"


class ExternalState(StrEnum):
    """Lifecycle of an external job as Nightshift sees it."""

    QUEUED = JobState.QUEUED.value
    RUNNING = JobState.RUNNING.value
    SUCCEEDED = JobState.SUCCEEDED.value
    FAILED = JobState.FAILED.value
    CANCELLED = JobState.CANCELLED.value

    @property
    def final(self) -> bool:
        """A state the job never leaves: it is not asked about again."""
        return self in FINAL_STATES


# the one definition of "final" for external states
FINAL_STATES = frozenset({ExternalState.SUCCEEDED, ExternalState.FAILED, ExternalState.CANCELLED})


@dataclass(frozen=True)
class JobSpec:
    """What a backend needs to start one job; ``options`` holds backend-specific fields."""

    label: str
    backend: str
    options: dict[str, Any] = field(default_factory=dict)
    # the W3C traceparent of the try's span when the night is traced: a command and the job
    # CLI get it as TRACEPARENT, an http job's submit as its traceparent header
    trace: str | None = None


@dataclass(frozen=True)
class JobStatus:
    """One observation of an external job.

    Times are the backend's own (aware UTC), None where it does not say: ``created_at`` when
    it took the job (queued since), ``started_at`` when the job began running, ``finished_at``
    when it reached its final state. ``since`` picks the one for ``state``; the night dates a
    transition by it (kept after the job's previous transition and not after now, for clocks
    that disagree), else by when its poll happened to see the change.
    """

    state: ExternalState
    exit_code: int | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    detail: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    created_at: datetime | None = None

    @property
    def since(self) -> datetime | None:
        """When the job entered ``state``, by the backend: queued ``created_at``, running
        ``started_at``, final ``finished_at`` (a time without a zone taken as UTC); None:
        unknown."""
        if self.state.final:
            at = self.finished_at
        elif self.state is ExternalState.RUNNING:
            at = self.started_at
        else:
            at = self.created_at
        return at.replace(tzinfo=UTC) if at is not None and at.tzinfo is None else at


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


@runtime_checkable
class ListsStatus(Protocol):
    """A backend that answers for many jobs in one call (``agy jobs list``, ``batches.list``)."""

    def status_many(self, external_ids: Iterable[str]) -> dict[str, JobStatus | BackendError]:
        """States by id from one listing; an id it could not read maps to its error.

        An id the listing does not show may be left out: the watcher then asks it with
        ``status`` on a call of its own, so one hung call never holds another job's answer.
        """
        ...


@runtime_checkable
class Collects(Protocol):
    """A backend with results to fetch once a job is final (files, reconciliation)."""

    def collect(self, spec: JobSpec, external_id: str) -> dict[str, Any]:
        """What the job made of its work: ``ok``, ``summary`` and backend-specific fields."""
        ...


@runtime_checkable
class FallsBack(Protocol):
    """A backend that can give up on a slow job and finish its work another way (the SLA)."""

    def fallback(self, spec: JobSpec, external_id: str) -> dict[str, Any]:
        """Cancel the job, keep what it made, do the rest another way; like ``collect``."""
        ...


@runtime_checkable
class Closeable(Protocol):
    """A backend holding clients (HTTP connections) to close at the end of a night."""

    def close(self) -> None:
        """Release the clients; later calls fail with a PermanentBackendError."""
        ...


@runtime_checkable
class Streams(Protocol):
    """A backend whose jobs push their changes (Server-Sent Events, a command job's files):
    listened to, not polled."""

    def streams(self, external_id: str) -> bool:
        """Whether this job has a stream to listen to: asked on the night's loop, so answered
        from what the backend knows (its configuration, a local look), never its service."""
        ...

    def stream(self, external_id: str) -> AsyncIterator[JobStatus]:
        """The job's statuses as they come, up to its final one (the current one first); a
        stream that ends early raises."""
        ...

    async def aclose(self) -> None:
        """Close the streams' clients, on the loop that used them."""
        ...


@runtime_checkable
class ListsSome(Protocol):
    """A backend that lists only some of its jobs (an http API with a ``list`` URL): the others
    are asked one by one, each on a call of its own."""

    def listable(self, external_id: str) -> bool:
        """Whether one listing can answer for this job."""
        ...


@runtime_checkable
class AwaitsStatus(Protocol):
    """A backend whose status calls are awaited on the night's loop (its own async client): a
    call in flight holds no thread."""

    async def astatus(self, external_id: str) -> JobStatus:
        """``Backend.status``, awaited."""
        ...

    async def aclose(self) -> None:
        """Close the async client, on the loop that used it."""
        ...


@dataclass(frozen=True)
class Capabilities:
    """A backend's optional abilities: each is the backend itself, typed, or None."""

    lists_status: ListsStatus | None = None
    collects: Collects | None = None
    falls_back: FallsBack | None = None
    closeable: Closeable | None = None
    streams: Streams | None = None
    awaits_status: AwaitsStatus | None = None
    lists_some: ListsSome | None = None


def capabilities(backend: object) -> Capabilities:
    """The one place a backend's optional abilities are looked up."""
    return Capabilities(
        lists_status=backend if isinstance(backend, ListsStatus) else None,
        collects=backend if isinstance(backend, Collects) else None,
        falls_back=backend if isinstance(backend, FallsBack) else None,
        closeable=backend if isinstance(backend, Closeable) else None,
        streams=backend if isinstance(backend, Streams) else None,
        awaits_status=backend if isinstance(backend, AwaitsStatus) else None,
        lists_some=backend if isinstance(backend, ListsSome) else None,
    )
