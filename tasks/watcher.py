"""One loop per night that watches every in-flight job.

Each job keeps its own backoff and timers; a due backend that can list many jobs at once
(``status_many``) is asked once per tick. A job is never asked again once it is final.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

from tasks.backends.base import Backend, ExternalState, JobStatus
from tasks.errors import BackendError, PermanentBackendError, TransientBackendError
from tasks.polling import PollPolicy

__all__ = ["WatchRequest", "WatchResult", "Watcher"]

Reason = Literal["final", "timeout", "stuck_queued", "fallback"]
OnChange = Callable[[str, ExternalState, JobStatus], None]


@dataclass(frozen=True)
class WatchResult:
    """Why watching ended, and the last status seen."""

    reason: Reason
    status: JobStatus | None
    checks: int
    cancel_error: str | None = None


@dataclass
class WatchRequest:
    """A job to watch; times are on the watcher's monotonic clock."""

    label: str
    backend: Backend
    external_id: str
    policy: PollPolicy
    timeout_at: float | None = None
    queued_timeout_at: float | None = None
    fallback_at: float | None = None
    max_errors: int = 3
    last_state: ExternalState | None = None
    # bookkeeping
    checks: int = 0
    errors: int = 0
    next_at: float = 0.0
    last_status: JobStatus | None = None
    future: Future[WatchResult] = field(default_factory=Future)

    def timer_due(self, now: float) -> Reason | None:
        if self.timeout_at is not None and now >= self.timeout_at:
            return "timeout"
        never_ran = self.last_state in (None, ExternalState.QUEUED)
        if never_ran and self.queued_timeout_at is not None and now >= self.queued_timeout_at:
            return "stuck_queued"
        if self.fallback_at is not None and now >= self.fallback_at:
            return "fallback"
        return None

    def wake_at(self) -> float:
        times = [self.next_at, self.timeout_at, self.queued_timeout_at, self.fallback_at]
        return min(t for t in times if t is not None)


class Watcher:
    """Polls all registered jobs from one thread; ``watch`` returns a future per job."""

    def __init__(self, on_change: OnChange, clock: Callable[[], float] = time.monotonic) -> None:
        self._on_change = on_change
        self._clock = clock
        self._cond = threading.Condition()
        self._entries: list[WatchRequest] = []
        self._stopped = False
        self._busy: set[int] = set()  # backends (by id) whose check is running
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="nightshift-status")
        self._thread = threading.Thread(target=self._loop, name="nightshift-watcher", daemon=True)
        self._thread.start()

    def now(self) -> float:
        """The watcher's clock."""
        return self._clock()

    def watch(self, request: WatchRequest) -> Future[WatchResult]:
        """Start watching; the first check comes after the policy's initial delay."""
        request.next_at = self._clock() + request.policy.delay(0)
        with self._cond:
            if self._stopped:
                raise RuntimeError("watcher is stopped")
            self._entries.append(request)
            self._cond.notify_all()
        return request.future

    def in_flight(self) -> list[str]:
        """Labels still being watched."""
        with self._cond:
            return [e.label for e in self._entries]

    def stop(self) -> None:
        """Stop the loop; jobs still watched get a RuntimeError on their futures."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        self._thread.join(timeout=10)
        self._pool.shutdown(wait=False, cancel_futures=True)
        for entry in self._entries:
            if not entry.future.done():
                entry.future.set_exception(RuntimeError("watcher stopped"))

    @property
    def stopped(self) -> bool:
        """True once the loop has ended (stopped, or died on a bug)."""
        return self._stopped

    # -- the loop -----------------------------------------------------------------------
    def _loop(self) -> None:
        try:
            while True:
                with self._cond:
                    if self._stopped:
                        return
                    now = self._clock()
                    # a backend still answering its last check is not asked again meanwhile
                    waiting = [e for e in self._entries if id(e.backend) not in self._busy]
                    due = [e for e in waiting if e.wake_at() <= now]
                    if not due:
                        wake = min((e.wake_at() for e in waiting), default=now + 3600)
                        self._cond.wait(timeout=max(0.0, wake - now))
                        continue
                    groups: dict[int, list[WatchRequest]] = {}
                    for entry in due:
                        groups.setdefault(id(entry.backend), []).append(entry)
                    self._busy.update(groups)
                # each backend is asked on its own thread: a slow one holds up nobody's timers
                for key, entries in groups.items():
                    self._pool.submit(self._run_group, key, entries)
        except BaseException as exc:  # a bug here must not leave every job waiting forever
            self._strand(exc)
            raise

    def _strand(self, exc: BaseException) -> None:
        with self._cond:
            self._stopped = True
            stranded, self._entries = self._entries, []
        for entry in stranded:
            if not entry.future.done():
                entry.future.set_exception(RuntimeError(f"watcher died: {exc!r}"))

    def _run_group(self, key: int, entries: list[WatchRequest]) -> None:
        try:
            statuses = self._check(entries)
            for entry in entries:
                try:
                    self._advance(entry, statuses.get(entry.external_id))
                except Exception as exc:  # e.g. the ledger write behind on_change failed
                    if not entry.future.done():
                        self._finish(entry, exc=exc)
        finally:
            with self._cond:
                self._busy.discard(key)
                self._cond.notify_all()

    def _check(self, entries: list[WatchRequest]) -> dict[str, JobStatus | BaseException]:
        backend = entries[0].backend
        many = getattr(backend, "status_many", None)
        if many is not None and len(entries) > 1:
            try:
                found: dict[str, JobStatus | BaseException] = many([e.external_id for e in entries])
            except TransientBackendError as exc:
                return {e.external_id: exc for e in entries}
            except Exception:  # listing is a convenience, not the contract: ask one by one
                return self._check_each(backend, entries)
            missing = PermanentBackendError("job not listed by its backend")
            return {e.external_id: found.get(e.external_id, missing) for e in entries}
        return self._check_each(backend, entries)

    @staticmethod
    def _check_each(
        backend: Backend, entries: list[WatchRequest]
    ) -> dict[str, JobStatus | BaseException]:
        out: dict[str, JobStatus | BaseException] = {}
        for entry in entries:
            try:
                out[entry.external_id] = backend.status(entry.external_id)
            except Exception as exc:  # anything but a transient error ends this job only
                out[entry.external_id] = exc
        return out

    def _advance(self, entry: WatchRequest, seen: JobStatus | BaseException | None) -> None:
        entry.checks += 1
        if isinstance(seen, TransientBackendError) or seen is None:
            entry.errors += 1
            if entry.errors > entry.max_errors:
                self._finish(entry, exc=seen or TransientBackendError("no status"))
                return
        elif isinstance(seen, BaseException):
            self._finish(entry, exc=seen)
            return
        else:
            entry.errors = 0
            entry.last_status = seen
            if seen.state != entry.last_state:
                entry.last_state = seen.state
                self._on_change(entry.label, seen.state, seen)
            if seen.state.final:
                self._finish(entry, result=WatchResult("final", seen, entry.checks))
                return
        now = self._clock()
        reason = entry.timer_due(now)
        if reason == "fallback":
            self._finish(entry, result=WatchResult("fallback", entry.last_status, entry.checks))
            return
        if reason is not None:
            cancel_error = self._cancel(entry)
            self._finish(
                entry, result=WatchResult(reason, entry.last_status, entry.checks, cancel_error)
            )
            return
        entry.next_at = now + entry.policy.delay(entry.checks)

    @staticmethod
    def _cancel(entry: WatchRequest) -> str | None:
        try:
            entry.backend.cancel(entry.external_id)
        except BackendError as exc:
            return str(exc)
        return None

    def _finish(
        self,
        entry: WatchRequest,
        result: WatchResult | None = None,
        exc: BaseException | Any = None,
    ) -> None:
        with self._cond:
            if entry in self._entries:
                self._entries.remove(entry)
        if entry.future.done():  # stop() got there first
            return
        if result is not None:
            entry.future.set_result(result)
        else:
            entry.future.set_exception(exc)
