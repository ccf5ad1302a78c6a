"""The watcher on a fake clock: backoff only, timers on time, a hung call costs only its job."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from nightshift.backends.base import ExternalState, JobStatus
from nightshift.backoff import Backoff
from nightshift.engine.watcher import Watcher, WatchRequest
from nightshift.errors import PermanentBackendError
from nightshift.loop import NightLoop
from tests.support import FakeClock, ScriptedBackend, run_for, wait_until

Q, R, S = ExternalState.QUEUED, ExternalState.RUNNING, ExternalState.SUCCEEDED
BACKOFF = Backoff(initial=2, factor=2, max=30)


@dataclass
class Slow(ScriptedBackend):
    """Each status call says it has begun (``entered``), then waits for ``release``."""

    entered: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def status(self, external_id: str) -> JobStatus:
        self.entered.set()
        self.release.wait(10)
        return super().status(external_id)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def watcher(clock: FakeClock, night_loop: NightLoop) -> Iterator[Watcher]:
    w = Watcher(lambda *_: None, clock=clock, loop=night_loop)
    yield w
    w.stop()


def test_a_running_job_past_its_queue_timer_is_asked_on_its_backoff_only(watcher, clock) -> None:
    backend = ScriptedBackend(scripts={"long": [R]})  # RUNNING for ever from the first check
    now = clock()
    request = WatchRequest(
        label="long",
        backend=backend,
        external_id="long",
        policy=BACKOFF,
        queued_timeout_at=now + 5,  # long gone once the job runs
        timeout_at=now + 3600,
    )
    future = watcher.watch(request)
    run_for(watcher, clock, 600)
    assert not future.done()
    # 2, 4, 8, 16, 30, 30, ...: 4 checks in the first 30 s, then one every 30 s
    assert backend.calls["long"] == 4 + (600 - 30) // 30


def test_timers_fire_on_time_while_the_jobs_own_status_call_hangs(watcher, clock) -> None:
    release = threading.Event()

    class Hung(ScriptedBackend):
        def status(self, external_id: str) -> JobStatus:
            if external_id == "hung":
                release.wait(30)
            return super().status(external_id)

    backend = Hung(scripts={"hung": [R], "fine": [R, R, S]})
    now = clock()
    hung = watcher.watch(
        WatchRequest("hung", backend, "hung", BACKOFF, timeout_at=now + 10, queued_timeout_at=None)
    )
    healthy = WatchRequest("fine", backend, "fine", BACKOFF, timeout_at=now + 3600)
    fine = watcher.watch(healthy)
    fired_at: list[float] = []
    hung.add_done_callback(lambda _f: fired_at.append(clock()))

    def step() -> None:
        """A second on, and the healthy job's poll due by then done: the watcher is never idle
        (the hung call is in flight), so the test waits for that job alone."""
        clock.advance(1)
        watcher.poke()
        wait_until(
            lambda: fine.done() or (not healthy.checking and (healthy.wake_at() or 0) > clock()),
            what="the healthy job's poll",
        )

    try:
        while clock() < now + 10:
            step()
        # the clock stands still at the timer until it has fired: it must fire by itself
        result = hung.result(timeout=10)
        assert (result.reason, fired_at) == ("timeout", [now + 10])
        assert backend.cancelled == ["hung"]
        # the healthy job of the same backend went on without waiting for the hung call
        while not fine.done() and clock() < now + 60:
            step()
        assert fine.result(timeout=10).reason == "final"
        assert backend.calls["fine"] == 3
    finally:
        release.set()


def test_a_job_whose_status_cannot_be_read_is_cancelled_not_left_running(watcher, clock) -> None:
    backend = ScriptedBackend(scripts={"odd": [R, PermanentBackendError("state 'weird' unknown")]})
    future = watcher.watch(WatchRequest("odd", backend, "odd", BACKOFF))
    run_for(watcher, clock, 10)
    result = future.result(timeout=5)
    assert result.reason == "unreadable"
    assert "weird" in (result.error or "")
    assert backend.cancelled == ["odd"]
    assert result.cancel_error is None


def test_unreadable_job_whose_cancel_fails_says_so(watcher, clock) -> None:
    from nightshift.errors import TransientBackendError

    backend = ScriptedBackend(scripts={"odd": [PermanentBackendError("non-JSON output")]})
    backend.cancel_error = TransientBackendError("cli down")
    future = watcher.watch(WatchRequest("odd", backend, "odd", BACKOFF))
    run_for(watcher, clock, 4)
    result = future.result(timeout=5)
    assert (result.reason, result.cancel_error) == ("unreadable", "cli down")


def test_stop_while_a_check_is_in_flight_does_not_raise(clock, night_loop: NightLoop) -> None:
    watcher = Watcher(lambda *_: None, clock=clock, loop=night_loop)
    backend = Slow(scripts={"a": [S]})
    entered, release = backend.entered, backend.release
    future = watcher.watch(WatchRequest("a", backend, "a", BACKOFF))
    clock.advance(2)
    watcher.poke()
    assert entered.wait(5)
    watcher.stop()
    release.set()  # the check now completes on a stopped watcher: nothing may blow up
    with pytest.raises(RuntimeError, match="watcher stopped"):
        future.result(timeout=5)
    assert watcher.wait_idle(timeout=5)


def test_the_queue_timer_waits_for_the_answer_in_flight(watcher, clock) -> None:
    backend = Slow(scripts={"a": [R, S]})
    entered, release = backend.entered, backend.release
    now = clock()
    future = watcher.watch(WatchRequest("a", backend, "a", BACKOFF, queued_timeout_at=now + 3))
    clock.advance(2)
    watcher.poke()
    assert entered.wait(5)
    clock.advance(5)  # past the queue timer while the first answer is on its way
    watcher.poke()
    assert not watcher.wait_idle(timeout=0.2)
    release.set()
    run_for(watcher, clock, 10)
    assert future.result(timeout=5).reason == "final"
    assert backend.cancelled == []
