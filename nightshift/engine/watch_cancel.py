"""The cancel the watcher asks when it gives up on a job that may still run out there: awaited on
the night's loop with a deadline of its own, the call itself on the loop's cancel pool, so one
that hangs holds neither the watch nor a status thread. Its outcome is said, never raised."""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor

from nightshift.backends.base import Backend
from nightshift.engine.watch_request import CancelAsked, Reason, WatchRequest, WatchResult
from nightshift.errors import BackendError, CannotCancelError

__all__ = ["cancel_job", "given_up"]


async def cancel_job(
    pool: Executor, backend: Backend, external_id: str, deadline_s: float
) -> tuple[CancelAsked, str | None]:
    """Ask the service to cancel the job, waiting ``deadline_s`` at most: how it went, and why
    it did not (None when it was accepted)."""
    try:
        call = pool.submit(backend.cancel, external_id)
    except RuntimeError:  # the night's loop closed: no one waits for this job any more
        return "unanswered", "the night stopped before the cancel was sent"
    try:
        await asyncio.wait_for(asyncio.wrap_future(call), deadline_s)
    except CannotCancelError as exc:
        return "unsupported", str(exc)
    except TimeoutError:
        return "unanswered", f"no answer within {deadline_s:g}s"
    except Exception as exc:  # a backend's error (or its bug): said, never raised here
        return "failed", str(exc) if isinstance(exc, BackendError) else repr(exc)
    return "accepted", None


async def given_up(
    pool: Executor,
    entry: WatchRequest,
    reason: Reason,
    deadline_s: float,
    error: BaseException | None = None,
) -> WatchResult:
    """Stop watching a job that may still run out there: cancel it, and say how that went."""
    cancel, cancel_error = await cancel_job(pool, entry.backend, entry.external_id, deadline_s)
    return WatchResult(
        reason,
        entry.last_status,
        entry.checks,
        cancel_error,
        error=None if error is None else str(error),
        cancel=cancel,
    )
