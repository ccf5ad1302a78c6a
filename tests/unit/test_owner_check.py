"""The loop's owner check: night state the loop owns, touched from another thread, raises.

The suite runs with it on (``tests/conftest.py`` sets ``NIGHTSHIFT_OWNER_CHECK=1``), so a thread
that reaches into the watcher's schedule or the stream listener fails whichever test it runs in,
instead of racing in production.
"""

from __future__ import annotations

import os
import threading

import pytest

from nightshift.backends.base import ExternalState
from nightshift.backoff import Backoff
from nightshift.engine.streams import StreamListener
from nightshift.engine.watcher import Watcher, WatchRequest
from nightshift.loop import OWNER_CHECK, NightLoop, NotTheLoop
from tests.support import ScriptedBackend

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
