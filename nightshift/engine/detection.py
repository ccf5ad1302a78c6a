"""Is a job's wait in its state still normal? Classification against learned budgets (pure).

A job's dwell in its current state is ``ok`` up to its budget's p95, ``watch`` past p95 and
``alert`` past 2 x p95. The ``Detector`` turns observations (each check of the watcher, each timer
tick) into the level changes to announce: once per job, state and level per night, however often
it is asked. A rerun re-attaching to the night seeds it with the (label, state, level) triples the
ledger already holds, so it repeats none of them. No I/O here: the caller logs, stores and sends.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from nightshift.budgets.lookup import FLOOR_S, Budget, Level, classify
from nightshift.config.names import shown_name
from nightshift.engine.alerts import Alert, Raised

__all__ = [
    "BudgetSource",
    "BudgetTable",
    "Detector",
    "level_moments",
]

_TICK = timedelta(microseconds=1)


class BudgetSource(Protocol):
    """Where the detector finds a job's budget; None: none learned (fixed timers still apply)."""

    def budget(self, label: str, state: str) -> Budget | None:
        """The budget of ``label`` in ``state`` for tonight's catalogue, or None."""
        ...


@dataclass(frozen=True)
class BudgetTable:
    """Budgets from a plain mapping of (label, state) to ``Budget``."""

    by_key: Mapping[tuple[str, str], Budget]

    def budget(self, label: str, state: str) -> Budget | None:
        """The budget of ``label`` in ``state``, or None."""
        return self.by_key.get((label, state))


def level_moments(
    budget: Budget | None, entered_at: datetime, floor_s: float = FLOOR_S
) -> dict[Level, datetime]:
    """The first moment the job is at ``watch`` and at ``alert`` in a state entered then."""
    limits = None if budget is None else budget.limits(floor_s)
    if limits is None:
        return {}
    return {
        "watch": _first_past(entered_at, limits[0]),
        "alert": _first_past(entered_at, limits[1]),
    }


def _first_past(entered_at: datetime, limit_s: float) -> datetime:
    # datetimes hold microseconds: the rounded moment may still be at the limit, which is not past
    at = entered_at + timedelta(seconds=limit_s)
    while _dwell(entered_at, at) <= limit_s:
        at += _TICK
    return at


def _dwell(entered_at: datetime, now: datetime) -> float:
    return (now - entered_at).total_seconds()


@dataclass(frozen=True)
class _Watched:
    backend: str
    state: str
    entered_at: datetime


_ORDER: tuple[Level, ...] = ("watch", "alert")


class Detector:
    """Tonight's level changes, each announced once; fed the watcher's observations. Pure, and
    not thread-safe: one owner asks it (the dwell watch, on the night's loop)."""

    def __init__(
        self,
        night: str,
        catalogue: str,
        budgets: BudgetSource,
        raised: Iterable[Raised] = (),
        *,
        floor_s: float = FLOOR_S,
        name: str | None = None,
    ) -> None:
        self.night = night
        self.catalogue = catalogue
        self.name = name or shown_name(catalogue)  # what people read: never a local path
        self.floor_s = floor_s
        self._budgets = budgets
        self._raised: set[Raised] = set(raised)
        self._jobs: dict[str, _Watched] = {}

    @property
    def raised(self) -> frozenset[Raised]:
        """Every (label, state, level) announced tonight, seeded ones included."""
        return frozenset(self._raised)

    def observe(
        self, label: str, state: str, *, entered_at: datetime, now: datetime, backend: str
    ) -> list[Alert]:
        """The job is in ``state`` since ``entered_at``: the levels it newly passed, in order.

        A job that skipped a level between two observations gets both (watch, then alert), so
        the ledger holds a watch for every alert. A job in a new state starts over at ok.
        """
        self._jobs[label] = _Watched(backend, state, entered_at)
        return self._changes(label, now)

    def tick(self, now: datetime) -> list[Alert]:
        """A timer tick: the level changes of every watched job at ``now``, without a poll."""
        return [alert for label in list(self._jobs) for alert in self._changes(label, now)]

    def forget(self, label: str) -> None:
        """The job is final or no longer watched tonight: no more ticks or wake-ups for it."""
        self._jobs.pop(label, None)

    def next_change_at(self, label: str) -> datetime | None:
        """When the job's next unannounced level begins (maybe past); None: nothing left."""
        return self._next_at(label)

    def next_wake(self) -> datetime | None:
        """The earliest next change of any watched job: a loop may sleep until then."""
        moments = [at for label in self._jobs if (at := self._next_at(label)) is not None]
        return min(moments, default=None)

    def _changes(self, label: str, now: datetime) -> list[Alert]:
        job = self._jobs[label]
        budget = self._budgets.budget(label, job.state)
        if budget is None:
            return []
        dwell = _dwell(job.entered_at, now)
        level = classify(dwell, budget, floor_s=self.floor_s)
        passed = _ORDER[: _ORDER.index(level) + 1] if level != "ok" else ()
        alerts = []
        for step in passed:
            key: Raised = (label, job.state, step)
            if key in self._raised:
                continue
            self._raised.add(key)
            alerts.append(
                Alert(
                    night=self.night,
                    catalogue=self.catalogue,
                    label=label,
                    backend=job.backend,
                    state=job.state,
                    level=step,
                    dwell_s=dwell,
                    p95_s=budget.p95,
                    at=now,
                    floor_s=self.floor_s,
                    name=self.name,
                    source=budget.source,
                )
            )
        return alerts

    def _next_at(self, label: str) -> datetime | None:
        job = self._jobs.get(label)
        if job is None:
            return None
        budget = self._budgets.budget(label, job.state)
        moments = level_moments(budget, job.entered_at, self.floor_s)
        pending = [at for lvl, at in moments.items() if (label, job.state, lvl) not in self._raised]
        return min(pending, default=None)
