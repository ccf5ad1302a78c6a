"""Cancelling a night: its external jobs still in flight, from the ledger, through their backends.

Cancelling stops the work (stopping a night only stops watching it: ``engine/stopping.py``).
Whether or not the night's process is alive: each job in flight is cancelled at its backend and
a cancel request is left for the night to see (``store/cancel_requests.py``). A live night (it
holds the catalogue's lease) ends those jobs ``cancelled`` with the request's reason and submits
none of the jobs named; with no live night, the cancel takes the lease for a moment and records
the jobs ``cancelled`` itself, as the night would have.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from nightshift.backends import build_backends, close_backends
from nightshift.backends.base import Backend
from nightshift.config.catalogue import Catalogue
from nightshift.engine.outcomes import Outcome, is_final
from nightshift.errors import BackendError, LockHeldError
from nightshift.loop import CHORE_THREADS, CHORES, NightLoop
from nightshift.states import LIVE as LIVE_STATES
from nightshift.store.cancel_requests import CancelRequest, CancelRequests
from nightshift.store.lease import Lease
from nightshift.store.ledger import Ledger
from nightshift.store.night_reads import NightJob, night_jobs

if TYPE_CHECKING:
    from nightshift.config.settings import Settings

__all__ = ["CancelWatch", "Cancelled", "NightCancel", "cancel_night"]

log = logging.getLogger("nightshift.cancel")


@dataclass(frozen=True)
class Cancelled:
    """One job the cancel dealt with: cancelled out there, or why not."""

    label: str
    backend: str | None
    external_id: str | None
    error: str | None = None  # the backend refused or could not be reached


@dataclass(frozen=True)
class NightCancel:
    """What a cancel did: the jobs it cancelled, and whether a live night will record them."""

    jobs: list[Cancelled]
    night_alive: bool  # a night held the lease: it records them (else the cancel did)
    not_submitted: list[str]  # jobs a live night will not submit now


def cancel_night(
    catalogue: Catalogue,
    settings: Settings,
    ledger: Ledger,
    night: str,
    *,
    only: Iterable[str] | None = None,
    reason: str = "cancelled by nightshift cancel",
) -> NightCancel:
    """Cancel the night's jobs still in flight (``only``: just these labels)."""
    wanted = set(only) if only is not None else None
    jobs = [
        j
        for j in night_jobs(ledger.engine, catalogue.key, night)
        if not wanted or j.label in wanted
    ]
    targets = [j for j in jobs if j.state in LIVE_STATES and j.external_id]
    lease = Lease(ledger.engine, catalogue.key, ttl_s=settings.lease_ttl)
    try:
        lease.acquire()  # no night can start while we cancel; none is running
        alive = False
    except LockHeldError:  # a live night: it sees the requests and records the ends itself
        alive = True
    try:
        at = datetime.now(UTC)
        if alive:  # asked first: the night may see a job cancelled before the next line ends
            labels = [j.label for j in catalogue.jobs if not wanted or j.label in wanted]
            seen = {j.label for j in jobs if is_final(j.state)} | {j.label for j in targets}
            waiting = [label for label in labels if label not in seen]
            asked = [CancelRequest(j.label, j.external_id, reason, at) for j in targets]
            asked += [CancelRequest(label, None, reason, at) for label in waiting]
            CancelRequests(ledger.engine, catalogue.key).add(night, asked)
        done = _cancel_all(catalogue, settings, targets)
        if alive:
            return NightCancel(done, night_alive=True, not_submitted=waiting)
        ok = [job for job, c in zip(targets, done, strict=True) if c.error is None]
        _record(ledger, night, ok, reason, at)
        return NightCancel(done, night_alive=False, not_submitted=[])
    finally:
        if not alive:
            lease.release()


def _cancel_all(
    catalogue: Catalogue, settings: Settings, targets: list[NightJob]
) -> list[Cancelled]:
    if not targets:
        return []
    built = build_backends(catalogue, settings, errors={})
    try:
        return [_cancel(built, job) for job in targets]
    finally:
        close_backends(built)


def _cancel(backends: dict[str, Backend], job: NightJob) -> Cancelled:
    assert job.external_id is not None
    backend = backends.get(job.backend or "")
    if backend is None:
        error = f"its {job.backend} backend could not be built"
        return Cancelled(job.label, job.backend, job.external_id, error)
    try:
        backend.cancel(job.external_id)
    except BackendError as exc:
        return Cancelled(job.label, job.backend, job.external_id, str(exc))
    return Cancelled(job.label, job.backend, job.external_id)


def _record(ledger: Ledger, night: str, jobs: list[NightJob], reason: str, at: datetime) -> None:
    """The jobs' ends, as the night would have written them (we hold its lease)."""
    state = Outcome.CANCELLED.value
    for job in jobs:
        backend = job.backend or ""
        ledger.transition(
            night, "cancel", job.label, backend, job.external_id, state, at, job.attempts
        )
        ledger.record_state(night, job.label, state, finished_at=at, detail=reason)


class CancelWatch:
    """A live night's view of the cancel requests: read every ``every`` seconds by a task on the
    night's loop (each read off the loop, among the night's chores).

    ``on_new`` hears the labels newly asked for (the night looks at them now), on the loop.
    Requests made before ``since`` (the night's start) were for an earlier run of the night:
    ignored. What was read is the loop's: merged there, no lock; ``reason`` may be asked from
    any thread (the requests seen are one mapping, swapped whole, never changed in place).
    """

    def __init__(
        self,
        requests: CancelRequests,
        night: str,
        on_new: Callable[[list[str]], None],
        since: datetime,
        loop: NightLoop,
        every: float = 2.0,
    ) -> None:
        self._requests, self._night, self._on_new, self._every = requests, night, on_new, every
        self._since = since
        self._seen: Mapping[str, CancelRequest] = {}
        self._loop = loop
        self._reads: Future[None] | None = None

    def start(self) -> CancelWatch:
        """Read the requests now, then every ``every`` seconds until ``stop``."""
        self.read()
        self._reads = self._loop.submit(self._read_every())
        return self

    def stop(self) -> None:
        if self._reads is not None:
            self._reads.cancel()

    def reason(self, label: str, *, fresh: bool = False) -> str | None:
        """Why the job was asked to cancel, if it was (``fresh``: read the requests first)."""
        seen = self._seen
        if fresh and (found := self._fetch()) is not None:
            self._loop.soon(self._merge, found)
            seen = {**seen, **found}
        request = seen.get(label)
        return request.reason if request is not None else None

    def read(self) -> None:
        """Read the requests now (blocking); ``on_new`` hears the labels not seen before."""
        if (found := self._fetch()) is not None:
            self._loop.soon(self._merge, found)

    def _fetch(self) -> dict[str, CancelRequest] | None:
        """This night run's requests, None when the database did not answer (the next read
        catches up)."""
        try:
            found = self._requests.of_night(self._night)
        except Exception as exc:
            log.warning("could not read the cancel requests: %s", exc)
            return None
        return {k: r for k, r in found.items() if r.requested_at >= self._since}

    def _merge(self, found: Mapping[str, CancelRequest]) -> None:
        """On the loop: the requests read, merged; the new ones told."""
        self._loop.owned("the cancel requests read")
        new = [label for label in found if label not in self._seen]
        self._seen = {**self._seen, **found}
        if new:
            self._on_new(new)

    async def _read_every(self) -> None:
        loop = asyncio.get_running_loop()
        chores = self._loop.blocking(CHORES, CHORE_THREADS)
        while True:
            await asyncio.sleep(self._every)
            if (found := await loop.run_in_executor(chores, self._fetch)) is not None:
                self._merge(found)
