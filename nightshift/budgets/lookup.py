"""The budgets a night looks up while it watches, and the ok/watch/alert rule (no pandas)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from nightshift.budgets.columns import (
    BACKEND,
    CATALOGUE,
    LABEL,
    MIN_SAMPLES,
    P50,
    P95,
    SOURCE,
    SOURCE_N,
    STATE,
    N,
    Source,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "FLOOR_POLLS",
    "FLOOR_S",
    "INSTANT_S",
    "Budget",
    "Budgets",
    "Level",
    "classify",
    "dwell_floor",
]

Level = Literal["ok", "watch", "alert"]

# No level before a job has spent this long in a state: below it a dwell is mostly the poll's
# and the clocks' noise, and nobody acts on a five-second wait anyway.
FLOOR_S = 5.0
FLOOR_POLLS = 3  # ... nor before this many poll intervals (a state's end is seen a poll late)
# A state whose p95 is below this is normally instant (``submitted``: the backend answered, a
# queue that starts work at once). It is held to the floor like any other: a queue that always
# started work at once and now holds it is named at the floor, as a provider outage begins.
INSTANT_S = 1.0


def dwell_floor(poll_s: float = 0.0) -> float:
    """The least dwell that can be a watch: the larger of FLOOR_S and FLOOR_POLLS polls."""
    return max(FLOOR_S, FLOOR_POLLS * poll_s)


@dataclass(frozen=True)
class Budget:
    """A learned dwell budget: p50 and p95 seconds from ``n`` samples of ``source``."""

    p50: float
    p95: float
    n: int = 0
    source: str = "job"  # Source.JOB or Source.BACKEND; a learning row has no Budget

    def __post_init__(self) -> None:
        if not 0 <= self.p50 <= self.p95:
            raise ValueError(f"a budget needs 0 <= p50 <= p95, got {self}")

    @property
    def watch_at(self) -> float:
        """Seconds past which a dwell is ``watch``."""
        return self.p95

    @property
    def alert_at(self) -> float:
        """Seconds past which a dwell is ``alert``."""
        return 2 * self.p95

    @property
    def instant(self) -> bool:
        """A state that is normally instant (p95 below INSTANT_S): its levels are the floor's."""
        return self.p95 < INSTANT_S

    def limits(self, floor_s: float = FLOOR_S) -> tuple[float, float]:
        """(watch past, alert past) in seconds with the floor under p95."""
        watch = max(self.p95, floor_s)
        return watch, 2 * watch


def classify(dwell_s: float, budget: Budget | None, *, floor_s: float = FLOOR_S) -> Level:
    """``ok`` up to p95 inclusive, ``watch`` up to 2 x p95 inclusive, ``alert`` beyond.

    No budget (still learning) is always ``ok``: the fixed timers still apply. ``floor_s``
    raises a p95 smaller than it (``dwell_floor``), so a state that usually takes a second (or
    is normally instant) does not alert on the third. Compared on unrounded seconds.
    """
    if budget is None:
        return "ok"
    watch, alert = budget.limits(floor_s)
    if dwell_s > alert:
        return "alert"
    if dwell_s > watch:
        return "watch"
    return "ok"


def _frozen(mapping: Mapping[Any, Budget]) -> Mapping[Any, Budget]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class Budgets:
    """The learned budgets of one snapshot, looked up by job and state."""

    # (catalogue, label, state) -> the budget the state table chose (job or backend)
    states: Mapping[tuple[str, str, str], Budget] = field(default_factory=dict)
    # (catalogue, backend, state) -> the pooled budget, for labels with no row of their own
    backends: Mapping[tuple[str, str, str], Budget] = field(default_factory=dict)
    # (catalogue, label) -> the whole job's budget
    jobs: Mapping[tuple[str, str], Budget] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("states", "backends", "jobs"):
            object.__setattr__(self, name, _frozen(getattr(self, name)))

    @classmethod
    def from_frames(
        cls,
        states: pd.DataFrame,
        backends: pd.DataFrame | None = None,
        jobs: pd.DataFrame | None = None,
        *,
        min_samples: int = MIN_SAMPLES,
    ) -> Budgets:
        """From ``table``'s state, backend and whole-job frames; learning rows give no budget."""
        return cls.from_records(
            states.to_dict("records"),
            [] if backends is None else backends.to_dict("records"),
            [] if jobs is None else jobs.to_dict("records"),
            min_samples=min_samples,
        )

    @classmethod
    def from_records(
        cls,
        states: Iterable[Mapping[str, Any]],
        backends: Iterable[Mapping[str, Any]] = (),
        jobs: Iterable[Mapping[str, Any]] = (),
        *,
        min_samples: int = MIN_SAMPLES,
    ) -> Budgets:
        """From the rows of the three tables (a frame's records, or a snapshot's stored rows,
        where learning is NULL); learning rows, and budgets from fewer than ``min_samples``
        samples, give no budget (a state's then falls back to its backend's, as in the table)."""
        by_backend: dict[tuple[str, str, str], Budget] = {}
        for row in backends:
            if int(row[N]) >= min_samples:
                pooled = Budget(float(row[P50]), float(row[P95]), int(row[N]), Source.BACKEND)
                by_backend[(row[CATALOGUE], row[BACKEND], row[STATE])] = pooled
        by_state: dict[tuple[str, str, str], Budget] = {}
        for row in states:
            found = _learned(row, min_samples)
            if found is None:  # too few of its own: its backend's, as the table falls back
                found = by_backend.get((row[CATALOGUE], row[BACKEND], row[STATE]))
            if found is not None:
                by_state[(row[CATALOGUE], row[LABEL], row[STATE])] = found
        by_job = {
            (row[CATALOGUE], row[LABEL]): budget
            for row in jobs
            if (budget := _learned(row, min_samples)) is not None
        }
        return cls(by_state, by_backend, by_job)

    def budget(
        self, catalogue: str, label: str, state: str, backend: str | None = None
    ) -> Budget | None:
        """The budget of ``label`` in ``state``; a label with no history uses its backend's."""
        found = self.states.get((catalogue, label, state))
        if found is None and backend is not None:
            found = self.backends.get((catalogue, backend, state))
        return found

    def job(self, catalogue: str, label: str) -> Budget | None:
        """The whole job's budget (submit to final), or None while learning."""
        return self.jobs.get((catalogue, label))


def _learned(row: Mapping[str, Any], min_samples: int) -> Budget | None:
    """The Budget of a state or whole-job row, None for a learning one or one from fewer than
    ``min_samples`` samples (its own, or its backend's when it fell back)."""
    if row[SOURCE] == Source.LEARNING or row[P95] is None or math.isnan(float(row[P95])):
        return None
    if int(row[SOURCE_N]) < min_samples:
        return None
    return Budget(float(row[P50]), float(row[P95]), int(row[SOURCE_N]), str(row[SOURCE]))
