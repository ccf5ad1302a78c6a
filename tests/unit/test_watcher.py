"""The one polling loop: backoff per job, final states never asked again, timers, errors."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from nightshift.backends.base import ExternalState, JobStatus
from nightshift.backoff import Backoff
from nightshift.engine.watcher import Watcher, WatchRequest
from nightshift.errors import PermanentBackendError, TransientBackendError
from nightshift.loop import NightLoop
from tests.support import BatchScriptedBackend, FakeClock, ScriptedBackend, eventually

Q, R, S, F = (
    ExternalState.QUEUED,
    ExternalState.RUNNING,
    ExternalState.SUCCEEDED,
    ExternalState.FAILED,
)
FAST = Backoff(initial=0.001, factor=2, max=0.004)  # real time: a look every few ms


@pytest.fixture
def changes() -> list[tuple[str, ExternalState]]:
    return []


@pytest.fixture
def watcher(changes: list[tuple[str, ExternalState]], night_loop: NightLoop) -> Iterator[Watcher]:
    def on_change(label: str, state: ExternalState, _status: JobStatus) -> None:
        changes.append((label, state))

    w = Watcher(on_change, loop=night_loop)
    yield w
    w.stop()


def request(backend: ScriptedBackend, label: str, **timers: float) -> WatchRequest:
    return WatchRequest(label=label, backend=backend, external_id=label, policy=FAST, **timers)


def test_final_state_ends_watching_and_is_never_asked_again(watcher, changes) -> None:
    backend = ScriptedBackend(scripts={"a": [Q, R, R, S], "b": [F]})
    result_a = watcher.watch(request(backend, "a")).result(timeout=5)
    result_b = watcher.watch(request(backend, "b")).result(timeout=5)
    assert (result_a.reason, result_a.status.state, result_a.checks) == ("final", S, 4)
    assert (result_b.reason, result_b.status.state) == ("final", F)
    assert backend.calls == {"a": 4, "b": 1}
    # each change recorded once, in order, when first seen
    assert [c for c in changes if c[0] == "a"] == [("a", Q), ("a", R), ("a", S)]
    assert watcher.in_flight() == []


def test_a_watch_given_up_by_its_waiter_is_forgotten_not_asked_again_and_again(watcher) -> None:
    """A cancelled future (its job task was cancelled) ends the watch: on the old code its job
    stayed in flight and was asked again at once forever (4,036 status calls in a second)."""
    backend = ScriptedBackend(scripts={"a": [R], "b": [R]})
    timer = watcher.now() + 0.2
    gone = watcher.watch(request(backend, "a", timeout_at=timer))
    watcher.watch(request(backend, "b"))
    assert eventually(lambda: backend.calls["a"] >= 1)
    gone.cancel()
    assert eventually(lambda: watcher.in_flight() == ["b"], timeout=5)
    asked, looked = backend.calls["a"], backend.calls["b"]
    # many looks at b later, and past a's timer
    assert eventually(lambda: watcher.now() > timer and backend.calls["b"] >= looked + 20)
    # a status call already handed to a pool thread when the watch was given up may still be
    # counted after it (a busy machine starts that thread late): one, never again and again
    assert backend.calls["a"] <= asked + 1 and backend.cancelled == []


def test_a_backend_that_lists_many_jobs_is_asked_once_per_tick(night_loop: NightLoop) -> None:
    clock = FakeClock(100.0)  # stands still until told: all six jobs fall due in one tick
    watcher = Watcher(lambda *_: None, clock=clock, loop=night_loop)
    try:
        backend = BatchScriptedBackend(scripts={label: [S] for label in "abcdef"})
        futures = [watcher.watch(request(backend, label)) for label in "abcdef"]
        clock.advance(1.0)
        assert {f.result(timeout=5).reason for f in futures} == {"final"}
    finally:
        watcher.stop()
    assert (backend.many_calls, backend.single_calls) == (1, 0)


def test_deadline_cancels_and_reports_timeout(watcher) -> None:
    backend = ScriptedBackend(scripts={"slow": [R]})
    now = watcher.now()
    result = watcher.watch(request(backend, "slow", timeout_at=now + 0.1)).result(timeout=5)
    assert result.reason == "timeout"
    assert result.status.state is R
    assert backend.cancelled == ["slow"]


def test_never_leaving_queue_is_stuck_queued_not_timeout(night_loop: NightLoop) -> None:
    # on a fake clock: on the real one, a first poll of "late" later than its queue timer (a
    # busy machine) made it stuck_queued
    clock = FakeClock(100.0)
    watcher = Watcher(lambda *_: None, clock=clock, loop=night_loop)
    try:
        backend = ScriptedBackend(scripts={"stuck": [Q], "late": [R]})
        now = clock()
        stuck = watcher.watch(request(backend, "stuck", queued_timeout_at=now + 10))
        late = watcher.watch(
            request(backend, "late", queued_timeout_at=now + 5, timeout_at=now + 20)
        )
        for _ in range(20):  # a second at a time, each second's polls and timers done
            clock.advance(1.0)
            watcher.poke()
            assert watcher.wait_idle(timeout=10), "the watcher did not settle"
        assert stuck.result(timeout=5).reason == "stuck_queued"
        # a job that reached running is not stuck in the queue, whatever its age
        assert late.result(timeout=5).reason == "timeout"
        assert sorted(backend.cancelled) == ["late", "stuck"]
    finally:
        watcher.stop()


def test_fallback_timer_hands_the_job_back_without_cancelling(watcher) -> None:
    backend = ScriptedBackend(scripts={"batch": [R]})
    result = watcher.watch(request(backend, "batch", fallback_at=watcher.now() + 0.05)).result(5)
    assert result.reason == "fallback"
    assert backend.cancelled == []


def test_transient_errors_are_tolerated_up_to_max_errors(watcher) -> None:
    blip = TransientBackendError("connection reset")
    backend = ScriptedBackend(scripts={"ok": [blip, blip, R, S], "down": [blip]})
    assert watcher.watch(request(backend, "ok")).result(timeout=5).reason == "final"
    result = watcher.watch(request(backend, "down")).result(timeout=5)
    assert backend.calls["down"] == 4  # max_errors=3 tolerated, the 4th gives up
    # given up on, it may still run out there: cancelled, and said so
    assert (result.reason, result.error, result.cancel) == (
        "unreadable",
        "connection reset",
        "accepted",
    )
    assert backend.cancelled == ["down"]


def test_permanent_error_ends_watching_at_once(watcher) -> None:
    backend = ScriptedBackend(scripts={"gone": [PermanentBackendError("unknown job")]})
    result = watcher.watch(request(backend, "gone")).result(timeout=5)
    assert (result.reason, result.error) == ("unreadable", "unknown job")
    assert backend.calls["gone"] == 1


class Broken(ScriptedBackend):
    """A backend with a bug: its status raises something that is not a BackendError."""

    def status(self, external_id: str) -> JobStatus:
        if external_id == "bug":
            raise OSError("disk on fire")
        return super().status(external_id)


def test_an_unexpected_error_ends_that_job_only_and_the_loop_goes_on(watcher) -> None:
    backend = Broken(scripts={"fine": [R, R, S]})
    bug = watcher.watch(request(backend, "bug"))
    fine = watcher.watch(request(backend, "fine"))
    with pytest.raises(OSError, match="disk on fire"):
        bug.result(timeout=5)
    assert fine.result(timeout=5).reason == "final"


def test_a_failing_state_recorder_fails_the_job_not_the_night(night_loop: NightLoop) -> None:
    def on_change(label: str, state: ExternalState, _status: JobStatus) -> None:
        if label == "unlucky":
            raise RuntimeError("database is locked")

    watcher = Watcher(on_change, loop=night_loop)
    try:
        backend = ScriptedBackend(scripts={"unlucky": [S], "lucky": [R, S]})
        unlucky = watcher.watch(request(backend, "unlucky"))
        lucky = watcher.watch(request(backend, "lucky"))
        with pytest.raises(RuntimeError, match="database is locked"):
            unlucky.result(timeout=5)
        assert lucky.result(timeout=5).reason == "final"
    finally:
        watcher.stop()


class Hanging(ScriptedBackend):
    """A backend whose status call hangs until released: a CLI stuck on its 30 s timeout."""

    def __init__(self) -> None:
        super().__init__(scripts={"slow": [R]})
        self.release = threading.Event()
        self.entered = threading.Event()

    def status(self, external_id: str) -> JobStatus:
        self.entered.set()
        self.release.wait(10)
        return super().status(external_id)


def test_a_hanging_backend_does_not_hold_up_another_backends_timers(watcher) -> None:
    hanging = Hanging()
    other = ScriptedBackend(scripts={"late": [R]})
    slow = watcher.watch(request(hanging, "slow"))
    assert hanging.entered.wait(5)
    late = watcher.watch(request(other, "late", timeout_at=watcher.now() + 0.05))
    try:
        # resolves while the other backend's call is still hanging
        assert late.result(timeout=5).reason == "timeout"
        assert not slow.done()
    finally:
        hanging.release.set()


def test_a_failing_listing_falls_back_to_asking_one_by_one(watcher) -> None:
    class NoListing(BatchScriptedBackend):
        def status_many(self, ids: list[str]) -> dict[str, JobStatus]:
            raise PermanentBackendError("unknown command 'jobs list'")

    backend = NoListing(scripts={"a": [S], "b": [S]})
    futures = [watcher.watch(request(backend, label)) for label in "ab"]
    assert [f.result(timeout=5).reason for f in futures] == ["final", "final"]


def test_a_watcher_stopped_on_a_shared_loop_leaves_the_loops_pools_to_the_others() -> None:
    backend = ScriptedBackend(scripts={"a": [R, S], "b": [R, S]})
    with NightLoop() as loop:
        first = Watcher(lambda *_: None, loop=loop)
        first.watch(request(backend, "a")).result(timeout=5)
        first.stop()
        second = Watcher(lambda *_: None, loop=loop)
        try:
            result = second.watch(request(backend, "b")).result(timeout=5)
            assert (result.reason, result.status.state) == ("final", S)
        finally:
            second.stop()


def test_a_timer_queued_before_the_stop_cancels_nothing_after_it() -> None:
    """Its job was settled by the stop (or let go by a detach): a timer's work still queued on
    the status pool must not send the service a cancel the night no longer stands behind."""
    backend = ScriptedBackend(scripts={"a": [R]})
    with NightLoop() as loop:  # the night's: its pools outlive the watcher's stop
        watcher = Watcher(lambda *_: None, loop=loop)
        entry = request(backend, "a")
        future = watcher.watch(entry)
        assert eventually(lambda: backend.calls["a"] >= 1)
        watcher.stop()
        assert future.done()
        loop.run(watcher._fire(entry, "timeout"))  # as the watch would run it, after the stop
    assert backend.cancelled == []


def test_what_one_listing_saw_is_told_to_the_night_on_its_loop(night_loop: NightLoop) -> None:
    """A listing's answers are judged and told to the night on the loop: a thousand jobs ending
    at one tick take no thread (a 1,000-job night peaked at 46 threads when each change was told
    on a thread of its own, 16 when a listing's were told on one); the night's sinks hear them
    there and its ledger writer queues the rows."""
    told_on: list[bool] = []

    def on_change(_label: str, _state: ExternalState, _status: JobStatus) -> None:
        told_on.append(night_loop.on_loop())

    labels = [f"j{i:02d}" for i in range(24)]
    backend = BatchScriptedBackend(scripts={label: [S] for label in labels})
    watcher = Watcher(on_change, loop=night_loop)
    try:
        futures = [watcher.watch(request(backend, label)) for label in labels]
        assert [f.result(timeout=10).reason for f in futures] == ["final"] * len(labels)
    finally:
        watcher.stop()
    assert backend.many_calls >= 1 and told_on == [True] * len(labels)
