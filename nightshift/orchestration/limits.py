"""Per-backend caps and rates as Prefect global concurrency limits, visible server-wide.

By default the limit is per backend, not per catalogue: two catalogues that share the job CLI
share its cap too, and the last night to start sets its size. A catalogue with
``limit_scope: catalogue`` has limits of its own, ``nightshift-<catalogue>-<backend>``.

A cap is a limit of that many slots, one held per job in flight. A rate is a second limit,
``...-<backend>-rate``, whose slots decay at that rate (Prefect's ``rate_limit``): one is taken per
submission. The night's own gate (``engine/admission.py``) enforces both first; the Prefect
limits hold them across nights and make them visible. A slot held by another job is asked for
again on a short poll of our own, not on Prefect's retry timer (``Retry-After``), so a freed
slot is taken within a fraction of a second.
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext

from prefect.client.orchestration import get_client
from prefect.concurrency.sync import concurrency, rate_limit
from prefect.exceptions import ObjectNotFound

from nightshift.config.catalogue import Catalogue
from nightshift.config.limits import BackendLimit
from nightshift.engine.backoff import Backoff

__all__ = [
    "SLOT_POLL",
    "catalogue_scope",
    "limit_name",
    "limit_scope",
    "prefect_slots",
    "rate_limit_name",
    "wait_for_room",
]

# how often a job waiting for a Prefect slot asks again: soon at first, then every half second
SLOT_POLL = Backoff(initial=0.05, factor=2.0, max=0.5)


def limit_name(backend: str, scope: str | None = None) -> str:
    """The Prefect global concurrency limit that caps one backend (of one catalogue's scope)."""
    return f"nightshift-{scope}-{backend}" if scope else f"nightshift-{backend}"


def rate_limit_name(backend: str, scope: str | None = None) -> str:
    """The Prefect global concurrency limit, with a slot decay, that paces one backend."""
    return f"{limit_name(backend, scope)}-rate"


def catalogue_scope(name: str | None, key: str, stem: str | None) -> str:
    """A limit-name-safe scope for a catalogue: its name, else its file's stem and a key hash.

    ``team-nightly`` -> ``team-nightly``; an unnamed ``/srv/a/nightshift.yaml`` ->
    ``nightshift-3f2a1c`` (the hash keeps two unnamed files called alike apart).
    """
    slug = re.sub(r"[^a-z0-9]+", "-", (name or stem or "catalogue").lower()).strip("-")
    if name:
        return slug or "catalogue"
    return f"{slug or 'catalogue'}-{hashlib.sha256(key.encode()).hexdigest()[:6]}"


def _split(limits: Mapping[str, int | BackendLimit]) -> tuple[dict[str, int], dict[str, float]]:
    caps: dict[str, int] = {}
    rates: dict[str, float] = {}
    for backend, lim in limits.items():
        if isinstance(lim, int):
            caps[backend] = lim
            continue
        if lim.concurrency:
            caps[backend] = lim.concurrency
        if lim.rate:
            rates[backend] = lim.rate
    return caps, rates


def prefect_slots(
    limits: Mapping[str, int | BackendLimit], scope: str | None = None
) -> Callable[[str, float], AbstractContextManager[object]]:
    """Create or resize the limits; return ``hold(backend, timeout)`` for one job in flight.

    ``limits``: backend -> its cap, or its ``BackendLimit`` (cap and/or rate). ``scope`` None:
    the limits every catalogue shares; else that catalogue's own.
    """
    caps, rates = _split(limits)
    if caps or rates:
        with get_client(sync_client=True) as client:
            for backend, cap in caps.items():
                client.upsert_global_concurrency_limit_by_name(limit_name(backend, scope), cap)
            for backend, rate in rates.items():
                # up to about a second's worth at once, refilled at the rate
                burst = max(1, math.ceil(rate))
                client.upsert_global_concurrency_limit_by_name(
                    rate_limit_name(backend, scope), burst, slot_decay_per_second=rate
                )

    def hold(backend: str, timeout_s: float) -> AbstractContextManager[object]:
        if backend not in caps and backend not in rates:
            return nullcontext()
        return _hold(
            limit_name(backend, scope) if backend in caps else None,
            rate_limit_name(backend, scope) if backend in rates else None,
            max(timeout_s, 0.1),
        )

    return hold


@contextmanager
def _hold(cap: str | None, rate: str | None, timeout_s: float) -> Iterator[None]:
    """Take a submission turn of ``rate`` and hold a slot of ``cap`` inside."""
    end = time.monotonic() + timeout_s
    with ExitStack() as held:
        if cap is not None:
            held.enter_context(_slot(cap, end))
        if rate is not None:
            left = max(end - time.monotonic(), 0.1)
            rate_limit(rate, occupy=1, timeout_seconds=left, strict=False)
        yield


def _slot(name: str, end: float) -> AbstractContextManager[object]:
    """A slot of ``name``, waited for on our short poll (``wait_for_room``), then taken.

    Not strict: a strict slot whose lease renewal fails (a Prefect API blip) cancels the job's
    thread at a random instruction. A limit deleted under us only warns; the night's own gate
    still caps the backend. No slot by ``end`` (the night's deadline): TimeoutError.
    """
    with get_client(sync_client=True) as client:

        def room() -> bool | None:
            try:
                found = client.read_global_concurrency_limit_by_name(name)
            except ObjectNotFound:
                return None  # deleted under us: concurrency() warns and takes nothing
            return not found.active or found.active_slots < found.limit

        wait_for_room(room, end)
    # all but always free by now; a slot taken in between is waited for on Prefect's timer
    left = max(end - time.monotonic(), 0.1)
    return concurrency(name, occupy=1, strict=False, timeout_seconds=left)


def wait_for_room(
    room: Callable[[], bool | None],
    end: float,
    poll: Backoff = SLOT_POLL,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Ask ``room()`` on ``poll`` until it is not False; TimeoutError once ``end`` has passed."""
    waits = 0
    while room() is False:
        left = end - clock()
        if left <= 0:
            raise TimeoutError("no slot of a Prefect concurrency limit before the deadline")
        sleep(min(poll.delay(waits), left))
        waits += 1


def limit_scope(catalogue: Catalogue) -> str | None:
    """The scope of a catalogue's limits: None (shared) unless it asks for its own."""
    if catalogue.limit_scope != "catalogue":
        return None
    stem = catalogue.path.stem if catalogue.path is not None else None
    return catalogue_scope(catalogue.name, catalogue.key, stem)
