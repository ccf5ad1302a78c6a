"""When a job, and the night, should be done: estimates from learned p50s (pure).

A job's expected end is its start (its first state of tonight's attempt) plus the whole job's
p50; a job whose start this night did not see (it was re-attached) is estimated from its state
p50s instead: the current state's, then those of the states still ahead of it. A job not yet
started ends a p50 after the last of its dependencies does. No p50 to go on: no estimate.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from nightshift.states import PATH

if TYPE_CHECKING:
    from nightshift.budgets.lookup import Budgets
    from nightshift.config.catalogue import Catalogue

__all__ = ["PATH", "Typical", "clock_text", "state_end", "typical_of"]


@dataclass(frozen=True)
class Typical:
    """A job's usual durations in seconds: the whole job's p50 and each state's p50."""

    job_p50: float | None = None
    states: Mapping[str, float] = field(default_factory=dict)
    after: tuple[str, ...] = ()  # the jobs it depends on (it starts when they end)

    @property
    def known(self) -> bool:
        """Whether anything was learned about it."""
        return self.job_p50 is not None or bool(self.states)

    def total(self) -> float | None:
        """The whole job's usual duration: its own p50, else the sum of its states' p50s."""
        if self.job_p50 is not None:
            return self.job_p50
        return sum(self.states.values()) if self.states else None


def typical_of(budgets: Budgets, catalogue: Catalogue) -> dict[str, Typical]:
    """The jobs of ``catalogue`` with some learned p50, by label."""
    out: dict[str, Typical] = {}
    for job in catalogue.jobs:
        whole = budgets.job(catalogue.key, job.label)
        states = {
            state: budget.p50
            for state in PATH
            if (budget := budgets.budget(catalogue.key, job.label, state, job.backend)) is not None
        }
        typical = Typical(whole.p50 if whole else None, states, tuple(job.depends_on))
        if typical.known:
            out[job.label] = typical
    return out


def state_end(typical: Typical, state: str, entered_at: datetime) -> datetime | None:
    """From state p50s: when a job in ``state`` since ``entered_at`` should be done."""
    if state not in typical.states:
        return None
    ahead = PATH[PATH.index(state) + 1 :] if state in PATH else ()
    seconds = typical.states[state] + sum(typical.states.get(s, 0.0) for s in ahead)
    return entered_at + timedelta(seconds=seconds)


def clock_text(at: datetime, now: datetime) -> str:
    """``~02:41 UTC``; to the second when it is less than ten minutes away (or past)."""
    shown = "%H:%M:%S" if at - now < timedelta(minutes=10) else "%H:%M"
    return f"~{at.strftime(shown)} UTC"
