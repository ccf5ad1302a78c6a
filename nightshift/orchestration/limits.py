"""Per-backend caps as Prefect global concurrency limits, visible and enforced server-wide.

By default the limit is per backend, not per catalogue: two catalogues that share the job CLI
share its cap too, and the last night to start sets its size. A catalogue with
``limit_scope: catalogue`` has limits of its own, ``nightshift-<catalogue>-<backend>``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

from prefect.client.orchestration import get_client
from prefect.concurrency.sync import concurrency

from nightshift.config.catalogue import Catalogue

__all__ = ["catalogue_scope", "limit_name", "limit_scope", "prefect_slots"]


def limit_name(backend: str, scope: str | None = None) -> str:
    """The Prefect global concurrency limit that caps one backend (of one catalogue's scope)."""
    return f"nightshift-{scope}-{backend}" if scope else f"nightshift-{backend}"


def catalogue_scope(name: str | None, key: str, stem: str | None) -> str:
    """A limit-name-safe scope for a catalogue: its name, else its file's stem and a key hash.

    ``team-nightly`` -> ``team-nightly``; an unnamed ``/srv/a/nightshift.yaml`` ->
    ``nightshift-3f2a1c`` (the hash keeps two unnamed files called alike apart).
    """
    slug = re.sub(r"[^a-z0-9]+", "-", (name or stem or "catalogue").lower()).strip("-")
    if name:
        return slug or "catalogue"
    return f"{slug or 'catalogue'}-{hashlib.sha256(key.encode()).hexdigest()[:6]}"


def prefect_slots(
    limits: dict[str, int], scope: str | None = None
) -> Callable[[str, float], AbstractContextManager[object]]:
    """Create or resize the limits; return ``hold(backend)`` that occupies one slot.

    ``scope`` None: the limits every catalogue shares; else that catalogue's own.
    """
    if limits:
        with get_client(sync_client=True) as client:
            for backend, cap in limits.items():
                client.upsert_global_concurrency_limit_by_name(limit_name(backend, scope), cap)

    def hold(backend: str, timeout_s: float) -> AbstractContextManager[object]:
        if backend not in limits:
            return nullcontext()
        # not strict: a strict slot whose lease renewal fails (a Prefect API blip) cancels the
        # job's thread at a random instruction. A limit deleted under us only warns; the
        # night's own admission gate still caps the backend. The wait ends at the night's
        # deadline (TimeoutError) instead of outliving it.
        return concurrency(
            limit_name(backend, scope), occupy=1, strict=False, timeout_seconds=max(timeout_s, 0.1)
        )

    return hold


def limit_scope(catalogue: Catalogue) -> str | None:
    """The scope of a catalogue's limits: None (shared) unless it asks for its own."""
    if catalogue.limit_scope != "catalogue":
        return None
    stem = catalogue.path.stem if catalogue.path is not None else None
    return catalogue_scope(catalogue.name, catalogue.key, stem)
