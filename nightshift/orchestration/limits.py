"""Per-backend caps and rates as Prefect global concurrency limits, visible server-wide.

By default the limit is per backend, not per catalogue: two catalogues that share the job CLI
share its cap too, and the last night to start sets its size. A catalogue with
``limit_scope: catalogue`` has limits of its own, ``nightshift-<catalogue>-<backend>``.

A cap is a limit of that many slots, one held per job in flight. A rate is a second limit,
``...-<backend>-rate``, whose slots decay at that rate (Prefect's ``rate_limit``): one is taken per
submission. The night's own gate (``engine/admission.py``) enforces both first; the Prefect
limits hold them across nights and make them visible. A cap's slots are leases the night hands
from a job that ended to the next one itself (``leases.py``): no wait on Prefect's retry timer.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
import re
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from typing import Protocol

from prefect.client.orchestration import get_client
from prefect.concurrency.sync import rate_limit

from nightshift.config.catalogue import Catalogue
from nightshift.config.limits import BackendLimit
from nightshift.loop import NightLoop
from nightshift.orchestration.leases import (
    LEASE_S,
    Orphans,
    PrefectLeaseApi,
    SlotBook,
    SlotLeases,
    heal_orphans,
)

log = logging.getLogger("nightshift.limits")

__all__ = [
    "PrefectHold",
    "catalogue_scope",
    "limit_name",
    "limit_scope",
    "night_slots",
    "prefect_slots",
    "rate_limit_name",
]


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


class PrefectHold:
    """``hold(backend, timeout)``: a job's slot and submission turn on the Prefect limits.

    ``hand_on(backend)``: a job of ``backend`` was seen to end, its slot goes to the next job;
    ``close()``: the night is over, every slot it holds is released.
    """

    def __init__(
        self, caps: dict[str, int], rates: dict[str, float], scope: str | None, leases: SlotLeases
    ) -> None:
        self._caps, self._rates, self._scope, self._leases = caps, rates, scope, leases

    def __call__(self, backend: str, timeout_s: float) -> AbstractContextManager[object]:
        if backend not in self._caps and backend not in self._rates:
            return nullcontext()
        return self._hold(backend, max(timeout_s, 0.1))

    @contextmanager
    def _hold(self, backend: str, timeout_s: float) -> Iterator[None]:
        end = time.monotonic() + timeout_s
        with ExitStack() as held:
            if backend in self._caps:
                held.enter_context(self._leases.hold(limit_name(backend, self._scope), timeout_s))
            if backend in self._rates:
                left = max(end - time.monotonic(), 0.1)
                name = rate_limit_name(backend, self._scope)
                rate_limit(name, occupy=1, timeout_seconds=left, strict=False)
            yield

    async def slot(self, backend: str, timeout_s: float) -> AbstractContextManager[object]:
        """On the night's loop: ``hold`` awaited, holding no thread while a full limit is asked
        again; what gives the slot back (TimeoutError as ``hold``)."""
        if backend not in self._caps and backend not in self._rates:
            return nullcontext()
        timeout_s = max(timeout_s, 0.1)
        end = time.monotonic() + timeout_s
        held = ExitStack()
        try:
            if backend in self._caps:
                name = limit_name(backend, self._scope)
                held.enter_context(await self._leases.take(name, timeout_s))
            if backend in self._rates:  # Prefect's own wait for a rate slot, on a thread
                left = max(end - time.monotonic(), 0.1)
                name = rate_limit_name(backend, self._scope)
                wait = functools.partial(
                    rate_limit, name, occupy=1, timeout_seconds=left, strict=False
                )
                await self._leases.blocking(wait)
        except BaseException:
            held.close()
            raise
        return held

    def hand_on(self, backend: str) -> None:
        if backend in self._caps:
            self._leases.hand_on(limit_name(backend, self._scope))

    def interrupt(self) -> None:
        """The night stops: jobs waiting for a slot give up now."""
        self._leases.interrupt()

    def close(self) -> None:
        self._leases.close()


def upsert_limits(
    limits: Mapping[str, int | BackendLimit], scope: str | None = None
) -> tuple[dict[str, int], dict[str, float]]:
    """Create or resize the limits on the Prefect server; the caps and the rates.

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
    return caps, rates


def prefect_slots(
    limits: Mapping[str, int | BackendLimit],
    scope: str | None = None,
    leases: SlotLeases | None = None,
    lease_s: float = LEASE_S,
    *,
    loop: NightLoop | None = None,
) -> PrefectHold:
    """The limits made (``upsert_limits``); the night's ``PrefectHold`` on them, its leases
    renewed on ``loop`` (the night's) unless ``leases`` are handed over.

    A cap's slots are leases the night hands on itself (``leases.py``), not strict: a limit
    deleted under a night only warns, and the night's own gate still caps the backend.
    """
    caps, rates = upsert_limits(limits, scope)
    if leases is None:  # ``lease_s``: how long a slot outlives a night that died holding it
        if loop is None:
            raise ValueError("slot leases are renewed on a night's loop: pass leases= or loop=")
        leases = SlotLeases(PrefectLeaseApi(lease_s), renew_every=lease_s * 0.75, loop=loop)
    if caps:  # before the first submit: the night's first lease costs what the later ones do
        leases.open()
    return PrefectHold(caps, rates, scope, leases)


class _Book(SlotBook, Orphans, Protocol):
    """A book of slot leases that also finds dead nights' ones (``store.slot_holders``)."""


def night_slots(
    limits: Mapping[str, int | BackendLimit],
    scope: str | None,
    lease_s: float,
    book_for: Callable[[str], _Book],
    loop: NightLoop,
) -> PrefectHold:
    """``prefect_slots`` for a night: each slot lease written down in ``book_for(server)``,
    and the slots of nights that died holding them given back first; renewed on ``loop``."""
    api = PrefectLeaseApi(lease_s)
    book = book_for(api.server())
    leases = SlotLeases(api, renew_every=lease_s * 0.75, book=book, loop=loop)
    hold = prefect_slots(limits, scope, leases)
    try:
        heal_orphans(book, api)
    except Exception as exc:  # the ledger is down: the dead night's slots expire on their own
        log.warning("could not look for slots of nights that died: %s", exc)
    return hold


def limit_scope(catalogue: Catalogue) -> str | None:
    """The scope of a catalogue's limits: None (shared) unless it asks for its own."""
    if catalogue.limit_scope != "catalogue":
        return None
    stem = catalogue.path.stem if catalogue.path is not None else None
    return catalogue_scope(catalogue.name, catalogue.key, stem)
