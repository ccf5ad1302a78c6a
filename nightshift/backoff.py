"""Exponential backoff as a pure value: polling, retries and cancel settling all wait by it."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["JOB_RETRY", "Backoff", "poll_until"]


@dataclass(frozen=True)
class Backoff:
    """Wait ``initial`` seconds, ``factor`` times longer each time, never over ``max``.

    ``jitter`` adds up to that many seconds at random, before the cap (as tenacity's
    ``wait_exponential_jitter`` and google-genai's retry options do), drawn from a random
    source the caller hands in, so a fixed source makes every delay reproducible.
    """

    initial: float = 2.0
    factor: float = 2.0
    max: float = 30.0
    jitter: float = 0.0

    def __post_init__(self) -> None:
        # initial 0 is "again at once" (a catalogue's `retry_delay: 0s`); polling checks > 0
        if not (self.initial >= 0 and self.factor >= 1 and self.max >= self.initial):
            raise ValueError(f"invalid backoff (initial >= 0, factor >= 1, max >= initial): {self}")
        if not 0 <= self.jitter < math.inf:
            raise ValueError(f"invalid backoff (jitter must be >= 0 and finite): {self}")

    def delay(self, n: int, rand: Callable[[], float] = random.random) -> float:
        """Seconds to wait after ``n`` earlier waits; ``rand()`` in [0, 1) scales the jitter."""
        if n < 0:
            raise ValueError(f"a backoff counts waits from 0, not {n}")
        try:
            base = self.initial * float(self.factor) ** n
        except OverflowError:  # a long night: the cap has long been reached
            base = math.inf if self.initial else 0.0
        if self.jitter:
            draw = rand()
            if not 0 <= draw <= 1:
                raise ValueError(f"a jitter draw is in [0, 1], not {draw}")
            base += draw * self.jitter
        return min(base, self.max)

    def delays(self, count: int, rand: Callable[[], float] = random.random) -> list[float]:
        """The first ``count`` delays (Prefect's ``retry_delay_seconds``, display, tests)."""
        return [self.delay(n, rand) for n in range(count)]


# a job's retries after a transient error: the catalogue's `retry_delay` (its `initial`),
# doubling, no cap, as Prefect's exponential_backoff (which adds its own relative jitter)
JOB_RETRY = Backoff(initial=2.0, factor=2.0, max=math.inf)


def poll_until(
    done: Callable[[], bool],
    timeout_s: float,
    backoff: Backoff,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """Check ``done()``, waiting by ``backoff`` in between; False once ``timeout_s`` ran out."""
    deadline = clock() + timeout_s
    waits = 0
    while not done():
        left = deadline - clock()
        if left <= 0:
            return False
        sleep(min(backoff.delay(waits), left))
        waits += 1
    return True
