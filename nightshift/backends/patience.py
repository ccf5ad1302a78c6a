"""Patient submits: a create the service refuses for now (429, 503, a timeout) is tried again
for a bounded time, and the job is looked up by its submission key before every resend, so
patience never costs a duplicate.

``Patience`` is a value (seconds, backoff, clock, sleep): tests hand in a fake clock whose
sleep moves it. ``submit_patiently`` is the one loop both the job CLI and Gemini run.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from nightshift.backoff import Backoff
from nightshift.errors import TransientBackendError

__all__ = ["DEFAULT_PATIENCE_S", "Patience", "retry_after_in", "submit_patiently"]

T = TypeVar("T")

DEFAULT_PATIENCE_S = 300.0  # the catalogue's `submit_patience` unless it says otherwise
# 1 s doubling to 30 s, plus up to 1 s of jitter so parallel submits spread out
_BACKOFF = Backoff(initial=1.0, factor=2.0, max=30.0, jitter=1.0)
_RETRY_AFTER = re.compile(r"retry[- ]after[:= ]\s*(\d+(?:\.\d+)?)", re.IGNORECASE)


@dataclass(frozen=True)
class Patience:
    """How long one submit keeps trying after a transient refusal, and how it waits."""

    seconds: float = 0.0  # 0: one try, as before patience
    backoff: Backoff = _BACKOFF
    clock: Callable[[], float] = field(default=time.monotonic, compare=False)
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)
    rand: Callable[[], float] = field(default=random.random, compare=False)


def retry_after_in(text: str) -> float | None:
    """The seconds a ``Retry-After: N`` (or "retry after N") in ``text`` asks for, if any."""
    found = _RETRY_AFTER.search(text)
    return float(found.group(1)) if found else None


def submit_patiently(
    send: Callable[[], T],
    look: Callable[[], T | None],
    patience: Patience,
    retry_after: Callable[[TransientBackendError], float | None] = lambda _e: None,
) -> T:
    """``send()`` until it answers; after a transient failure wait (backoff, or what the
    service's Retry-After asks), then ``look()`` for the job before sending again.

    ``look`` may raise TransientBackendError (the lookup failed: nothing is resent until a
    lookup answers). Once patience runs out the last transient error is raised, after one
    last look: the caller's retry looks again before creating.
    """
    end = patience.clock() + patience.seconds
    waits = 0
    last: TransientBackendError | None = None
    while True:
        if last is not None:
            try:
                found = look()
            except TransientBackendError as exc:
                found, last = None, exc
                if patience.clock() >= end:
                    raise
                patience.sleep(_wait(patience, waits, end, retry_after(exc)))
                waits += 1
                continue
            if found is not None:
                return found
            if patience.clock() >= end:
                raise last
        try:
            return send()
        except TransientBackendError as exc:
            last = exc
        if patience.clock() >= end:
            continue  # one last look, then give up
        patience.sleep(_wait(patience, waits, end, retry_after(last)))
        waits += 1


def _wait(patience: Patience, waits: int, end: float, asked: float | None) -> float:
    """The next wait: the backoff's, or longer if the service asked; never past the end."""
    wait = max(patience.backoff.delay(waits, patience.rand), asked or 0.0)
    return max(0.0, min(wait, end - patience.clock()))
