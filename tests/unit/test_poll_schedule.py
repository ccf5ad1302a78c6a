"""The poll schedule: rarely far from a job's usual end, densely around it; on a fake clock."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from nightshift.backends.base import ExternalState, JobStatus
from nightshift.backoff import Backoff
from nightshift.engine.poll_schedule import RELAX, PollSchedule
from nightshift.engine.watcher import Watcher, WatchRequest
from nightshift.loop import NightLoop
from nightshift.usual import Usual
from tests.support import BatchScriptedBackend, FakeClock

R, S, F = ExternalState.RUNNING, ExternalState.SUCCEEDED, ExternalState.FAILED
POLL = Backoff(initial=2, factor=2, max=30)
HOUR = Usual(p10=3600.0, p50=4000.0, p95=4400.0, n=9)


def looks(schedule: PollSchedule, until: float) -> list[float]:
    """The moments (seconds after watching began) a job is looked at, up to ``until``."""
    at, out, late = 0.0, [], 0
    while at < until:
        delay = schedule.delay(at, len(out), late)
        late += schedule.late(at)
        at += delay
        out.append(round(at, 6))
    return out


def gaps(times: list[float]) -> list[float]:
    return [round(b - a, 6) for a, b in zip([0.0, *times], times, strict=False)]


def test_without_history_the_backoff_alone_decides() -> None:
    assert gaps(looks(PollSchedule(POLL), 100)) == [2, 4, 8, 16, 30, 30, 30]


def test_far_from_its_usual_end_a_job_is_looked_at_on_the_relaxed_cap() -> None:
    schedule = PollSchedule(POLL, HOUR)
    assert schedule.relaxed_cap == RELAX * POLL.max == 120
    far = [t for t in looks(schedule, HOUR.p10) if t <= HOUR.p10]
    # once after the poll's initial (a job that fails at once), then the relaxed cap apart,
    # landing on the p10
    assert gaps(far)[:4] == [2, 120, 120, 120]
    assert max(gaps(far)) == 120
    assert far[-1] == HOUR.p10
    assert len(far) == 31  # on the plain backoff: 124 looks


def test_from_p10_to_past_p95_it_is_looked_at_on_the_polls_cap_then_soon() -> None:
    schedule = PollSchedule(POLL, HOUR)
    times = looks(schedule, HOUR.p95 + 60)
    near = [t for t in times if HOUR.p10 <= t <= HOUR.p95]
    # densely around the usual end (26 gaps of 30 s, 20 s to land on the p95)
    assert gaps(near)[1:] == [30] * 26 + [20]
    assert near[-1] == HOUR.p95
    after = [t for t in times if t >= HOUR.p95]
    assert gaps(after)[1:] == [2, 4, 8, 16, 30]  # late: soon, backing off anew


def test_one_night_of_history_looks_at_that_nights_end_then_soon() -> None:
    # p10 = p50 = p95 = 12 s: 2 (the first look), 12 on the dot, then a twentieth of it
    assert looks(PollSchedule(POLL, Usual.exactly(12.0)), 14) == [2.0, 12.0, 12.6, 13.8, 16.2]


@pytest.mark.parametrize("usual_s", [77 * 60, 20 * 60, 2 * 60])
def test_a_job_that_fails_at_a_tenth_of_its_usual_time_is_seen_within_the_relaxed_cap(
    usual_s: float,
) -> None:
    schedule = PollSchedule(POLL, Usual.exactly(usual_s))
    ended = usual_s / 10
    seen = next(t for t in looks(schedule, usual_s) if t >= ended)
    assert seen - ended <= schedule.relaxed_cap


# -- the watcher on a fake clock -------------------------------------------------------------
@dataclass
class Timed(BatchScriptedBackend):
    """Records when (on the fake clock) each job was looked at, and by which kind of call."""

    clock: FakeClock = field(default_factory=FakeClock)
    lists: list[float] = field(default_factory=list)
    seen: dict[str, list[float]] = field(default_factory=dict)

    def status(self, external_id: str) -> JobStatus:
        self.seen.setdefault(external_id, []).append(self.clock())
        return super().status(external_id)

    def status_many(self, ids: list[str]) -> dict[str, JobStatus]:
        self.lists.append(self.clock())
        for i in ids:
            self.seen.setdefault(i, []).append(self.clock())
        return super().status_many(ids)


class Single(Timed):
    """The same jobs, but a backend that answers one job at a time."""

    status_many = None  # type: ignore[assignment]


def drive(watcher: Watcher, clock: FakeClock, requests: list[WatchRequest]) -> None:
    """Jump the fake clock from one due look to the next until every job is final."""
    futures = [watcher.watch(r) for r in requests]
    for _ in range(1000):
        assert watcher.wait_idle(timeout=10)
        pending = [r for r, f in zip(requests, futures, strict=True) if not f.done()]
        if not pending:
            break
        clock.now = min(r.next_at for r in pending)
        watcher.poke()
    assert {f.result(timeout=5).reason for f in futures} == {"final"}


def test_the_watcher_asks_a_long_job_on_the_relaxed_cap_and_at_its_usual_end(
    night_loop: NightLoop,
) -> None:
    clock = FakeClock(0.0)
    backend = Single(scripts={"long": [R] * 36 + [S]}, clock=clock)
    watcher = Watcher(lambda *_: None, clock=clock, expected={"long": HOUR}.get, loop=night_loop)
    try:
        drive(watcher, clock, [WatchRequest("long", backend, "long", POLL)])
    finally:
        watcher.stop()
    times = backend.seen["long"]
    assert gaps(times)[:4] == [2, 120, 120, 120]  # far from its usual end: the relaxed cap
    assert times[30] == HOUR.p10 and times[31] == HOUR.p10 + 30  # the poll's cap near the end


def test_a_listing_made_for_one_job_is_the_look_of_every_job_of_its_backend(
    night_loop: NightLoop,
) -> None:
    clock = FakeClock(0.0)
    # short usually ends at 10 s, long after an hour: each listing answers for both
    backend = Timed(scripts={"short": [R, R, S], "long": [R] * 6 + [F]}, clock=clock)
    usual = {"short": Usual.exactly(10.0), "long": HOUR}
    watcher = Watcher(lambda *_: None, clock=clock, expected=usual.get, loop=night_loop)
    try:
        drive(watcher, clock, [WatchRequest(x, backend, x, POLL) for x in ("short", "long")])
    finally:
        watcher.stop()
    # 2 (both first looks), 10 (short's usual end), 10.5 (short late, seen ended): one listing
    # each, for both jobs
    assert backend.lists == [2, 10, 10.5]
    assert backend.seen["short"] == [2, 10, 10.5]
    # long's schedule moved on from each listing: its next look is a relaxed cap after the one
    # at 10.5 s (alone by then, with a status call of its own), not at 122 on its own schedule
    assert backend.seen["long"] == [2, 10, 10.5, 130.5, 250.5, 370.5, 490.5]
    assert backend.single_calls == 4


def test_a_job_of_a_backend_that_cannot_list_keeps_the_same_schedule_alone(
    night_loop: NightLoop,
) -> None:
    clock = FakeClock(0.0)
    backend = Single(scripts={"short": [R, R, S], "long": [R] * 6 + [F]}, clock=clock)
    usual = {"short": Usual.exactly(10.0), "long": HOUR}
    watcher = Watcher(lambda *_: None, clock=clock, expected=usual.get, loop=night_loop)
    try:
        drive(watcher, clock, [WatchRequest(x, backend, x, POLL) for x in ("short", "long")])
    finally:
        watcher.stop()
    assert backend.seen["short"] == [2, 10, 10.5]
    assert backend.seen["long"] == [2, 122, 242, 362, 482, 602, 722]
