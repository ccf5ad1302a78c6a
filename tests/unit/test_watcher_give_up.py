"""The watcher on a fake clock: ids not visible yet, hung listings, cancels when it gives up."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import pytest

from nightshift.backends.base import ExternalState, JobStatus
from nightshift.backoff import Backoff
from nightshift.engine.watcher import Watcher, WatchRequest
from nightshift.errors import CannotCancelError, UnknownJobError
from nightshift.loop import NightLoop
from tests.support import FakeClock, ScriptedBackend, run_for, wait_until

R, S = ExternalState.RUNNING, ExternalState.SUCCEEDED
BACKOFF = Backoff(initial=2, factor=2, max=30)
UNKNOWN = UnknownJobError("HTTP 404: Unknown task 'x'")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def watcher(clock: FakeClock, night_loop: NightLoop) -> Iterator[Watcher]:
    w = Watcher(
        lambda *_: None, clock=clock, listing_deadline=5, cancel_deadline=0.3, loop=night_loop
    )
    yield w
    w.stop()


def test_an_id_not_visible_yet_waits_on_its_backoff_and_ends_as_the_service_says(
    watcher, clock
) -> None:
    backend = ScriptedBackend(scripts={"fresh": [UNKNOWN, UNKNOWN, UNKNOWN, R, S]})
    future = watcher.watch(
        WatchRequest("fresh", backend, "fresh", BACKOFF, visible_at=clock() + 600)
    )
    run_for(watcher, clock, 62)  # 2, 4, 8, 16, 30: five looks
    result = future.result(timeout=5)
    assert (result.reason, result.status and result.status.state) == ("final", S)
    assert backend.calls["fresh"] == 5 and backend.cancelled == []


def test_an_id_never_seen_is_given_up_as_lost_at_its_bound_and_cancelled(watcher, clock) -> None:
    backend = ScriptedBackend(scripts={"ghost": [UNKNOWN]})
    start = clock()
    future = watcher.watch(WatchRequest("ghost", backend, "ghost", BACKOFF, visible_at=start + 45))
    ended: list[float] = []
    future.add_done_callback(lambda _f: ended.append(clock()))
    run_for(watcher, clock, 44)
    assert not future.done()  # 2, 6, 14, 30: still waiting
    run_for(watcher, clock, 2)
    result = future.result(timeout=5)
    # its last look is at the bound itself, not a backoff step later
    assert (result.reason, result.cancel, ended) == ("lost", "accepted", [start + 45])
    assert "Unknown task" in (result.error or "") and backend.cancelled == ["ghost"]


def test_a_404_for_a_job_once_seen_means_its_record_expired(watcher, clock) -> None:
    backend = ScriptedBackend(scripts={"gone": [R, UNKNOWN]})
    future = watcher.watch(WatchRequest("gone", backend, "gone", BACKOFF, visible_at=clock() + 600))
    run_for(watcher, clock, 6)
    result = future.result(timeout=5)
    assert result.reason == "unreadable" and "record expired" in (result.error or "")
    assert backend.calls["gone"] == 2  # given up at once, not waited for


def test_without_a_bound_a_404_gives_the_job_up_at_once(watcher, clock) -> None:
    backend = ScriptedBackend(scripts={"x": [UNKNOWN]})
    future = watcher.watch(WatchRequest("x", backend, "x", BACKOFF))
    run_for(watcher, clock, 2)
    assert future.result(timeout=5).reason == "lost"


@dataclass
class HungListing(ScriptedBackend):
    """Lists many jobs in one call, which hangs until ``release``; single calls answer."""

    release: threading.Event = field(default_factory=threading.Event)
    listings: int = 0

    def status_many(self, ids: Iterable[str]) -> dict[str, JobStatus]:
        self.listings += 1
        self.release.wait(30)
        return {i: JobStatus(state=R) for i in ids}  # stale: must be ignored


def test_a_listing_past_its_deadline_hands_its_jobs_to_calls_of_their_own(watcher, clock) -> None:
    backend = HungListing(scripts={f"j{i}": [R, S] for i in range(3)})
    try:
        futures = [
            watcher.watch(WatchRequest(f"j{i}", backend, f"j{i}", BACKOFF)) for i in range(3)
        ]
        clock.advance(2)  # all due: one listing for the three, which hangs
        watcher.poke()
        wait_until(lambda: backend.listings == 1, what="the listing")
        for _ in range(5):  # up to its deadline (5 s) it holds them
            assert not any(f.done() for f in futures) and backend.single_calls == 0
            clock.advance(1)
            watcher.poke()
        # past it each is asked on its own call, and the backend lists no more while it hangs
        wait_until(lambda: backend.single_calls == 3, what="three calls of their own")
        for _ in range(10):
            clock.advance(1)
            watcher.poke()
            wait_until(lambda: all(f.done() for f in futures) or watcher.wait_idle(0.05))
        assert [f.result(timeout=5).reason for f in futures] == ["final"] * 3
        assert backend.listings == 1
    finally:
        backend.release.set()


def test_a_cancel_that_hangs_is_said_and_holds_nothing(watcher, clock) -> None:
    release = threading.Event()

    class HungCancel(ScriptedBackend):
        def cancel(self, external_id: str) -> None:
            release.wait(30)

    backend = HungCancel(scripts={"slow": [R]})
    try:
        future = watcher.watch(
            WatchRequest("slow", backend, "slow", BACKOFF, timeout_at=clock() + 3)
        )
        clock.advance(3)
        watcher.poke()
        result = future.result(timeout=10)  # within its cancel deadline (0.3 s), not 30 s
        assert (result.reason, result.cancel) == ("timeout", "unanswered")
        assert result.cancel_error == "no answer within 0.3s"
    finally:
        release.set()


def test_a_backend_that_cannot_cancel_says_the_job_may_still_run(watcher, clock) -> None:
    backend = ScriptedBackend(scripts={"slow": [R]})
    backend.cancel_error = CannotCancelError("its API declares no cancel")
    future = watcher.watch(WatchRequest("slow", backend, "slow", BACKOFF, timeout_at=clock() + 3))
    run_for(watcher, clock, 3)
    result = future.result(timeout=5)
    assert (result.reason, result.cancel) == ("timeout", "unsupported")
