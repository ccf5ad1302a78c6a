"""Per-backend caps as Prefect global concurrency limits, visible and enforced server-wide.

The limit is per backend, not per catalogue: two catalogues that share the job CLI share its
cap too, and the last night to start sets its size.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

from prefect.client.orchestration import get_client
from prefect.concurrency.sync import concurrency

__all__ = ["limit_name", "prefect_slots"]


def limit_name(backend: str) -> str:
    """The Prefect global concurrency limit that caps one backend."""
    return f"nightshift-{backend}"


def prefect_slots(
    limits: dict[str, int],
) -> Callable[[str, float], AbstractContextManager[object]]:
    """Create or resize the limits; return ``hold(backend)`` that occupies one slot."""
    if limits:
        with get_client(sync_client=True) as client:
            for backend, cap in limits.items():
                client.upsert_global_concurrency_limit_by_name(limit_name(backend), cap)

    def hold(backend: str, timeout_s: float) -> AbstractContextManager[object]:
        if backend not in limits:
            return nullcontext()
        # not strict: a strict slot whose lease renewal fails (a Prefect API blip) cancels the
        # job's thread at a random instruction. A limit deleted under us only warns; the
        # night's own admission gate still caps the backend. The wait ends at the night's
        # deadline (TimeoutError) instead of outliving it.
        return concurrency(
            limit_name(backend), occupy=1, strict=False, timeout_seconds=max(timeout_s, 0.1)
        )

    return hold
