"""When to look at a job next: rarely far from its usual end, densely around it (pure).

Without history a job is looked at on its poll's backoff (``initial`` doubling to ``max``). With
its usual duration (``nightshift/usual.py``, seconds from the start of watching):

- before its p10 (far from the usual end) it is looked at once after the poll's ``initial`` (a
  job that fails at once is seen as soon as before), then a *relaxed cap* apart, ``RELAX`` times
  the poll's ``max`` (2 min for the default 30 s), landing on the p10: a job that fails early
  is seen at most one relaxed cap after it ended;
- from its p10 to its p95 (the usual end) it is looked at on the poll's own backoff, at most
  ``max`` apart, landing on the p95;
- past its p95 (late) it is looked at again soon (a twentieth of its p50, at most the poll's
  ``initial``, at least 0.1 s), backing off anew up to ``max``; never later than the plain
  backoff would look.

The watcher counts every look at a job, its own status call or a listing that answered for it
(``looks``), and the looks since its p95 passed (``late``).
"""

from __future__ import annotations

from dataclasses import dataclass

from nightshift.backoff import Backoff
from nightshift.usual import Usual

__all__ = ["RELAX", "PollSchedule"]

RELAX = 4.0  # far from its usual end a job is looked at up to this many poll maxima apart
_EPS = 1e-6  # a look scheduled to land on a boundary counts as on it (float sums)


@dataclass(frozen=True)
class PollSchedule:
    """A job's poll policy and usual duration (None: no history): the gap to its next look."""

    policy: Backoff
    usual: Usual | None = None
    relax: float = RELAX

    def __post_init__(self) -> None:
        if not self.relax >= 1:
            raise ValueError(f"a relaxed cap is at least the poll's max (relax >= 1): {self}")

    @property
    def relaxed_cap(self) -> float:
        """The longest gap between two looks far from the usual end (the early-failure bound)."""
        return self.relax * self.policy.max

    def late(self, elapsed: float) -> bool:
        """Whether ``elapsed`` seconds of watching are past the usual end (its p95)."""
        return self.usual is not None and elapsed >= self.usual.p95 - _EPS

    def delay(self, elapsed: float, looks: int, late: int = 0) -> float:
        """Seconds from now to the next look, ``elapsed`` seconds after watching began.

        ``looks``: the looks so far; ``late``: those made past the usual end.
        """
        usual, policy = self.usual, self.policy
        plain = policy.delay(looks)
        if usual is None:
            return plain
        if elapsed < usual.p10 - _EPS:
            far = policy.initial if looks == 0 else self.relaxed_cap
            return min(far, usual.p10 - elapsed)
        if elapsed < usual.p95 - _EPS:
            return min(plain, usual.p95 - elapsed)
        first = min(policy.initial, max(0.1, usual.p50 / 20))
        soon = Backoff(first, policy.factor, max(policy.max, first))
        return min(plain, soon.delay(late))
