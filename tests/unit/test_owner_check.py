"""The loop's owner check: night state the loop owns, touched from another thread, raises.

The suite runs with it on (``tests/conftest.py`` sets ``NIGHTSHIFT_OWNER_CHECK=1``), so a thread
that reaches into the watcher's schedule or the stream listener fails whichever test it runs in,
instead of racing in production.
"""

from __future__ import annotations

import contextlib
import os
import threading

import pytest

from nightshift.backends.base import ExternalState
from nightshift.backoff import Backoff
from nightshift.engine.admission import Admission, Deadline, Held
from nightshift.engine.spend import JobCost, SpendCap
from nightshift.engine.streams import StreamListener
from nightshift.engine.watcher import Watcher, WatchRequest
from nightshift.loop import OWNER_CHECK, NightLoop, NotTheLoop
from tests.support import ScriptedBackend, wait_until

R = ExternalState.RUNNING


def test_the_suite_runs_with_the_check_on() -> None:
    assert os.environ.get(OWNER_CHECK) == "1"


def test_owned_state_touched_off_the_loop_raises_and_on_it_does_not() -> None:
    with NightLoop() as loop:
        with pytest.raises(NotTheLoop, match="the ledger's queue is the night loop's"):
            loop.owned("the ledger's queue")

        async def on_loop() -> None:
            loop.owned("the ledger's queue")

        loop.run(on_loop(), timeout=5)
    loop.owned("the ledger's queue")  # closed: whoever is left may tidy up


def test_without_the_check_nothing_is_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(OWNER_CHECK)
    with NightLoop() as loop:
        loop.owned("anything")  # production: no cost, no raise


def test_the_watchers_schedule_is_its_loops(night_loop: NightLoop) -> None:
    """A thread that reads the watched jobs directly fails; asking the watcher hands it over."""
    backend = ScriptedBackend(scripts={"a": [R]})
    watcher = Watcher(lambda *_: None, loop=night_loop)
    try:
        watcher.watch(WatchRequest("a", backend, "a", Backoff(30, 2, 30)))
        assert watcher.in_flight() == ["a"]  # asked on the loop
        with pytest.raises(NotTheLoop, match="the watcher is the night loop's"):
            watcher._plan.labels()
        caught: list[BaseException] = []

        def pool_thread() -> None:  # what a status thread reaching into it would do
            try:
                watcher._plan.look_now(["a"], 0.0)
            except BaseException as exc:
                caught.append(exc)

        thread = threading.Thread(target=pool_thread, name="nightshift-status_0")
        thread.start()
        thread.join(5)
        assert len(caught) == 1 and "'nightshift-status_0'" in str(caught[0])
    finally:
        watcher.stop()


def test_the_stream_listener_is_its_loops() -> None:
    with NightLoop() as loop:
        listener = StreamListener(loop)
        with pytest.raises(NotTheLoop):
            listener.forget("a")
        listener.close()  # from anywhere: it hands itself to the loop
        assert listener.listening == 0


def test_the_admission_is_its_nights_loops_once_bound(night_loop: NightLoop) -> None:
    """A slot read or freed off the loop raises; withdrawn, left or interrupted from a status or
    finish thread, the change is made on the loop (no lock: the loop is its one owner)."""
    admission = Admission(0, {"cli": 1})
    admission.on(night_loop)
    with pytest.raises(NotTheLoop, match="the admission"):
        admission.holds("cli", 0)
    with pytest.raises(NotTheLoop):
        admission.free("cli", 0)

    async def take() -> Held | None:
        return await admission.enter("cli", 0)

    held = night_loop.run(take(), timeout=5)
    assert held is not None
    admission.leave(held)  # a finish thread lets go: made on the loop

    async def released() -> bool:
        return held.released and not admission.holds("cli", 0)

    wait_until(lambda: night_loop.run(released(), timeout=5), what="the slot given back")
    admission.interrupt()  # a signal's thread: made on the loop, a later wait ends at once

    async def refused() -> bool:
        with contextlib.suppress(Deadline):
            await admission.enter("cli", 1)
            return False
        return True

    assert night_loop.run(refused(), timeout=5)
    with pytest.raises(RuntimeError, match="one night's loop"), NightLoop() as other:
        admission.on(other)


def test_the_cancel_requests_read_are_merged_and_told_on_the_loop(night_loop: NightLoop) -> None:
    """Read on whichever thread (the night's start, a chore, a finish thread asking afresh), the
    requests are merged on the loop and ``on_new`` hears them there: no lock, one owner."""
    from datetime import UTC, datetime

    from nightshift.engine.cancelling import CancelWatch
    from nightshift.store.cancel_requests import CancelRequest

    since = datetime(2026, 12, 7, 2, tzinfo=UTC)
    asked = {"a": CancelRequest("a", "j1", "cancelled by nightshift cancel", since)}

    class Requests:
        def of_night(self, _night: str) -> dict[str, CancelRequest]:
            return dict(asked)

    told: list[tuple[list[str], bool]] = []
    watch = CancelWatch(
        Requests(),  # type: ignore[arg-type]
        "2026-12-07",
        lambda labels: told.append((labels, night_loop.on_loop())),
        since,
        night_loop,
        every=3600,
    ).start()
    try:
        wait_until(lambda: told == [(["a"], True)], what="a told, on the loop")
        assert watch.reason("a") == "cancelled by nightshift cancel"  # from this thread
        asked["b"] = CancelRequest("b", None, "not wanted tonight", since)
        assert watch.reason("b", fresh=True) == "not wanted tonight"  # read afresh, at once
        wait_until(lambda: told[-1] == (["b"], True), what="b told, on the loop")
        assert watch.reason("b") == "not wanted tonight"  # merged
        with pytest.raises(NotTheLoop):
            watch._merge({})
    finally:
        watch.stop()


def test_the_spend_account_is_its_nights_loops_once_bound(night_loop: NightLoop) -> None:
    """A try's start reserves and its end settles on the loop: from a thread, both raise."""
    spend = SpendCap(1.0, {"paid": JobCost(0.2, 0.4, "declared")})
    assert spend.reserve("paid") is None  # not bound yet: a plain object (a forecast's)
    spend.on(night_loop)
    with pytest.raises(NotTheLoop, match="the spend account is the night loop's"):
        spend.settle("paid", 0.3)
    with pytest.raises(NotTheLoop, match="the spend account"):
        spend.reserve("paid")

    async def on_loop() -> float | None:
        return spend.settle("paid", 0.3)

    assert night_loop.run(on_loop(), timeout=5) == pytest.approx(0.3)
