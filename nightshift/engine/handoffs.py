"""The night's own gaps, for its forecast: how long after a job ends the night acts on it (pure).

A chain's next step is submitted only once the night has *seen* its predecessor end (a poll or a
listing away), and a capped backend's slot is handed on at that moment too; the jobs' learned
spans (their dwells, the submit included) hold neither. Learned from the ledger where a chain ran
before: per backend of the job that ended, the time from its final row to the next step's
``submitting`` row in the same run (p50 and p95 over the last nights). Where nothing was learned,
the poll schedule says it: the wait from the job's usual end to the look that sees it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from nightshift.backoff import Backoff
from nightshift.engine.plan import HISTORY_DAYS
from nightshift.engine.poll_schedule import PollSchedule
from nightshift.states import FINAL, JobState
from nightshift.usual import Usual

__all__ = ["MIN_SAMPLES", "Gap", "StateTime", "handoff_gaps", "learned_gaps", "poll_lag"]

MIN_SAMPLES = 3  # a backend's gap is learned from this many hand-offs at least
SUBMITTING = JobState.SUBMITTING.value
StateTime = tuple[str, str, str, str, datetime]  # (night, run_id, label, to_state, at)
# (labels, states, since) -> the ledger's rows of those labels entering those states since then
ReadStates = Callable[[Sequence[str], Sequence[str], datetime], Iterable[StateTime]]


@dataclass(frozen=True)
class Gap:
    """Seconds from a job's end to the night acting on it: usual (p50) and late (p95)."""

    p50: float
    p95: float
    basis: str = "learned"  # or "poll": the poll schedule's wait, nothing learned


def learned_gaps(
    rows: Iterable[StateTime], after: Mapping[str, str], backend_of: Mapping[str, str]
) -> dict[str, Gap]:
    """Per backend of the job that ended: the gap from its final row to its chain successor's
    ``submitting`` row, in the same run (``after``: successor -> predecessor)."""
    ended: dict[tuple[str, str, str], datetime] = {}
    began: dict[tuple[str, str, str], datetime] = {}
    for night, run_id, label, state, at in rows:
        key = (night, run_id, label)
        if state in FINAL:
            ended[key] = at
        elif state == SUBMITTING:
            began.setdefault(key, at)
    samples: dict[str, list[float]] = {}
    for (night, run_id, label), at in began.items():
        before = after.get(label)
        end = ended.get((night, run_id, before)) if before is not None else None
        if before is None or end is None or at < end:
            continue
        samples.setdefault(backend_of[before], []).append((at - end).total_seconds())
    return {
        backend: Gap(_rank(values, 0.5), _rank(values, 0.95))
        for backend, values in samples.items()
        if len(values) >= MIN_SAMPLES
    }


def handoff_gaps(
    chains: Iterable[Sequence[str]],
    backend_of: Mapping[str, str],
    read: ReadStates,
    now: datetime,
) -> dict[str, Gap]:
    """Per backend, the gaps learned from the ``chains``' last 30 days of rows (``read``: the
    ledger's ``state_times``); nothing read when there is no chain."""
    after = {b: a for chain in chains for a, b in itertools.pairwise(chain)}
    if not after:
        return {}
    labels = sorted({*after, *after.values()})
    rows = read(labels, [SUBMITTING, *FINAL], now - timedelta(days=HISTORY_DAYS))
    return learned_gaps(rows, after, backend_of)


def poll_lag(policy: Backoff, end_s: float, usual: Usual | None) -> float:
    """How long after it ends, ``end_s`` seconds from its submit, a job is seen by its poll
    schedule (``usual``: what the watcher expects of it): the first look at or after its end,
    minus ``end_s`` (0 for a job of no time)."""
    if end_s <= 0:
        return 0.0
    schedule = PollSchedule(policy, usual)
    elapsed, looks, late = 0.0, 0, 0
    while elapsed < end_s and looks < 10_000:
        step = schedule.delay(elapsed, looks, late)
        if schedule.late(elapsed):
            late += 1
        elapsed += max(step, 1e-3)
        looks += 1
    return elapsed - end_s


def _rank(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]
