"""Polling policy: exponential backoff between status checks, as a pure value."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PollPolicy"]


@dataclass(frozen=True)
class PollPolicy:
    """Wait ``initial`` seconds, then ``factor`` times longer each check, never over ``max``."""

    initial: float = 2.0
    factor: float = 2.0
    max: float = 30.0

    def __post_init__(self) -> None:
        if self.initial <= 0 or self.factor < 1 or self.max < self.initial:
            raise ValueError(f"invalid poll policy: {self}")

    def delay(self, checks_done: int) -> float:
        """Seconds to wait before the check after ``checks_done`` earlier ones."""
        # cap the exponent so a long night cannot overflow the float
        exponent = min(checks_done, 64)
        return min(self.initial * self.factor**exponent, self.max)

    def schedule(self, count: int) -> list[float]:
        """The first ``count`` delays (for display and tests)."""
        return [self.delay(i) for i in range(count)]
