"""A job's usual duration from submit to end: p10, p50 and p95 of its recent nights (pure).

The one definition the night's pacing uses: the watcher's poll schedule (``engine/
poll_hints.py``) and the order a capped backend grants its slots in
(``Ledger.expected_durations``). A leaf module, so the store may use it. The live table's
estimates (``engine/expected.py``) are not this figure: they come from the learned budgets'
p50s (every state of a job, submitting and fallback included, from the budgets snapshot), as
the dwell alerts they sit beside do.
One sample per job and night: its dwells in ``submitted``, ``queued`` and ``running`` summed
(dated by the backend where it tells them). Percentiles interpolate linearly between samples,
as pandas' and numpy's do, so one night gives p10 = p50 = p95.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from nightshift.dwells import clocks_agree

__all__ = ["AFTER_SUBMIT", "Usual", "percentile", "usual_after_submit"]

# the states a job spends its time in between the submit's answer and its end
AFTER_SUBMIT = ("submitted", "queued", "running")


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values``, linear between samples; needs one."""
    if not values:
        raise ValueError("a percentile needs at least one value")
    if not 0 <= q <= 100:
        raise ValueError(f"a percentile is in [0, 100], not {q}")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass(frozen=True)
class Usual:
    """How long a job usually takes, in seconds: p10 <= p50 <= p95 of ``n`` nights."""

    p10: float
    p50: float
    p95: float
    n: int = 1

    def __post_init__(self) -> None:
        if not 0 <= self.p10 <= self.p50 <= self.p95 < math.inf:
            raise ValueError(f"a usual duration needs 0 <= p10 <= p50 <= p95, got {self}")

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Usual | None:
        """From one duration per night; None without any."""
        if not seconds:
            return None
        pick = [max(0.0, float(s)) for s in seconds]
        return cls(percentile(pick, 10), percentile(pick, 50), percentile(pick, 95), len(pick))

    @classmethod
    def exactly(cls, seconds: float) -> Usual:
        """A duration known as one number (a hint handed in, a single night)."""
        return cls(seconds, seconds, seconds)


def usual_after_submit(dwells: Iterable[tuple[str, str, str, float]]) -> dict[str, Usual]:
    """Label -> its usual duration, from ``(night, label, state, dwell_s)`` rows."""
    per_night: dict[tuple[str, str], float] = {}
    unsound: set[tuple[str, str]] = set()  # a night measured across disagreeing clocks
    for night, label, state, dwell_s in dwells:
        if state in AFTER_SUBMIT and dwell_s == dwell_s:  # a missing dwell (NaN) counts nothing
            per_night[(night, label)] = per_night.get((night, label), 0.0) + float(dwell_s)
            if not clocks_agree(float(dwell_s)):
                unsound.add((night, label))
    for key in unsound:
        del per_night[key]
    by_label: dict[str, list[float]] = {}
    for (_night, label), seconds in per_night.items():
        by_label.setdefault(label, []).append(seconds)
    return {label: u for label, values in by_label.items() if (u := Usual.of(values)) is not None}
