"""A transition is dated when the backend says the state began, not when a poll saw it.

The night's wall clock is fake and moves only when the backend is polled: each status call is a
poll that comes ``at`` seconds into the night and answers a state that began ``began`` seconds
into it (or says nothing of when). The watcher polls every few milliseconds of real time.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from nightshift.backends.base import ExternalState, JobSpec, JobStatus
from nightshift.config.loader import parse_catalogue
from nightshift.engine.context import NightContext
from nightshift.engine.outcomes import Outcome
from nightshift.store.ledger import Ledger
from tests.night_kit import run_job
from tests.support import FakeClock, close_context, make_context, new_ledger_url

Q, R, S = ExternalState.QUEUED, ExternalState.RUNNING, ExternalState.SUCCEEDED
T0 = datetime(2026, 11, 29, 22, 0, tzinfo=UTC)
CATALOGUE = """\
defaults: {poll: {initial: 0.01s, max: 0.02s}, stagger: 0s}
jobs:
  - {label: a, backend: command, argv: [x]}
"""


def t(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def reported(state: ExternalState, began: float | None, started: float | None = None) -> JobStatus:
    """A status whose state began ``began`` s into the night (None: the backend doesn't say)."""
    when = None if began is None else t(began)
    if state.final:
        start = None if started is None else t(started)
        return JobStatus(state, exit_code=0, started_at=start, finished_at=when)
    if state is ExternalState.RUNNING:
        return JobStatus(state, started_at=when)
    return JobStatus(state, created_at=when)


@dataclass
class PolledBackend:
    """Each status call is the next poll: (seconds into the night it comes, what it answers)."""

    wall: FakeClock
    polls: list[tuple[float, JobStatus]] = field(default_factory=list)
    name: str = "command"
    calls: int = 0

    def submit(self, spec: JobSpec) -> str:
        return spec.label

    def status(self, external_id: str) -> JobStatus:
        at, status = self.polls[min(self.calls, len(self.polls) - 1)]
        self.calls += 1
        self.wall.now = max(self.wall.now, t(at))
        return status

    def cancel(self, external_id: str) -> None:
        return None

    def logs(self, external_id: str, tail: int = 40) -> str:
        return ""


@pytest.fixture
def night(tmp_path: Path) -> Iterator[tuple[NightContext, PolledBackend]]:
    wall = FakeClock(T0)
    backend = PolledBackend(wall)
    ledger = Ledger(new_ledger_url(tmp_path / "ledger.db"))
    ctx = make_context(
        parse_catalogue(CATALOGUE, tmp_path / "nightshift.yaml"),
        ledger,
        {"command": backend},
        tmp_path / "run",
        wall=wall,
    )
    try:
        yield ctx, backend
    finally:
        close_context(ctx)
        ledger.close()


def chain(ctx: NightContext) -> list[tuple[str, float, float | None]]:
    """(state, seconds into the night, dwell in the previous state) of job ``a``."""
    return [
        (r.to_state, (r.at - T0).total_seconds(), r.dwell_s) for r in ctx.ledger.dwells(ctx.night)
    ]


def test_a_state_seen_late_is_dated_when_it_began(night) -> None:
    ctx, backend = night
    # seen queued 29 s late, running 20 s late, finished 5 s late
    backend.polls = [(30, reported(Q, 1)), (60, reported(R, 40)), (90, reported(S, 85))]

    assert run_job(ctx, "a").state is Outcome.SUCCEEDED

    assert chain(ctx) == [
        ("submitting", 0, None),
        ("submitted", 0, 0),
        ("queued", 1, 1),
        ("running", 40, 39),  # the real time in the queue, not the 30 s between two polls
        ("succeeded", 85, 45),
    ]


def test_a_backend_that_says_nothing_is_dated_by_the_poll(night) -> None:
    ctx, backend = night
    backend.polls = [(30, reported(Q, None)), (60, reported(R, None)), (90, reported(S, None))]

    assert run_job(ctx, "a").state is Outcome.SUCCEEDED

    assert [(s, at) for s, at, _ in chain(ctx)] == [
        ("submitting", 0),
        ("submitted", 0),
        ("queued", 30),
        ("running", 60),
        ("succeeded", 90),
    ]


def test_a_time_before_the_previous_transition_is_kept_after_it(night) -> None:
    ctx, backend = night
    # the backend's clock runs behind ours: it says the job started before we submitted it,
    # and finished before the start we recorded
    backend.polls = [(30, reported(R, -100)), (90, reported(S, -50))]

    run_job(ctx, "a")

    assert chain(ctx)[2:] == [("running", 0, 0), ("succeeded", 0, 0)]


def test_a_time_after_now_is_taken_as_now(night) -> None:
    ctx, backend = night
    # the backend's clock runs ahead of ours: the states began "in the future"
    backend.polls = [(30, reported(R, 45)), (60, reported(S, 500))]

    run_job(ctx, "a")

    assert chain(ctx)[2:] == [("running", 30, 30), ("succeeded", 60, 30)]


def test_a_job_seen_only_final_records_its_run_from_its_start(night) -> None:
    ctx, backend = night
    # one slow poll finds it done: the backend says when it ran
    backend.polls = [(60, reported(S, 50, started=20))]

    run_job(ctx, "a")

    assert chain(ctx)[2:] == [("running", 20, 20), ("succeeded", 50, 30)]


def test_a_job_seen_only_final_with_no_start_goes_straight_to_its_end(night) -> None:
    ctx, backend = night
    backend.polls = [(60, reported(S, 50))]

    run_job(ctx, "a")

    assert chain(ctx)[2:] == [("succeeded", 50, 50)]


def test_a_time_without_a_zone_is_taken_as_utc(night) -> None:
    ctx, backend = night
    naive = t(40).replace(tzinfo=None)
    backend.polls = [(60, JobStatus(R, started_at=naive)), (90, reported(S, 85))]

    run_job(ctx, "a")

    assert chain(ctx)[2:] == [("running", 40, 40), ("succeeded", 85, 45)]
