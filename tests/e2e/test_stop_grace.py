"""An interrupted night's end, as ``nightshift run`` bounds it: it leaves once Prefect has the
night's final state (the flow's state hook says so), else after its grace (real seconds: not
a unit test)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

import pytest

from nightshift.cli.stopping import answers_health, run_stoppable
from nightshift.engine.stopping import NightStop


def _interrupted_night(stop: NightStop, said: bool, release: threading.Event) -> Callable[[], str]:
    def night() -> str:
        stop.request()
        stop.end()  # summary written, lease given back
        if said:
            stop.said()  # Prefect has its final state
        release.wait()  # then Prefect's bookkeeping (a heartbeat's join, a dead API's retries)
        return "done"

    return night


@pytest.mark.parametrize(
    ("said", "grace"), [(True, 60.0), (False, 1.0)], ids=["said: at once", "unsaid: its grace"]
)
def test_an_interrupted_night_is_left_once_its_end_is_said_else_after_its_grace(
    said: bool, grace: float
) -> None:
    stop, release = NightStop(), threading.Event()
    began = time.monotonic()
    try:
        night = _interrupted_night(stop, said, release)
        ran = run_stoppable(night, stop, lambda: True, grace=grace)
    finally:
        release.set()
    took = time.monotonic() - began
    assert took < 30 if said else took >= grace  # said: not the 60 s grace
    assert ran.exit_early and ran.lingering and ran.api_alive


def test_an_interrupted_night_whose_end_came_late_is_left_within_the_stop_budget() -> None:
    """Its summary and lease took most of the 5 s promised (a loaded machine): Prefect's
    bookkeeping gets what is left, not a grace of its own on top (CI at c879720: 300 jobs
    stopped in 6.4 s)."""
    stop, release = NightStop(), threading.Event()

    def night() -> str:
        stop.request()
        assert stop.requested_at is not None
        stop.requested_at -= 10.0  # asked 10 s ago: its end took that long
        stop.end()
        release.wait()  # Prefect never says it has the final state
        return "done"

    began = time.monotonic()
    try:
        ran = run_stoppable(night, stop, lambda: True, grace=60.0, budget=4.0)
    finally:
        release.set()
    assert time.monotonic() - began < 30  # not the 60 s grace
    assert ran.exit_early and ran.lingering


def test_a_port_answering_garbage_is_no_prefect_api_not_an_error() -> None:
    """The health check of a server on this host says False for an answer that is not HTTP
    (review: urllib raises ``BadStatusLine``, no ``OSError``, where httpx raised its error)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]

        def answer() -> None:
            conn, _ = server.accept()
            with conn:
                conn.recv(4096)
                conn.sendall(b"garbage\r\n\r\n")

        threading.Thread(target=answer, daemon=True).start()
        assert answers_health(f"http://127.0.0.1:{port}/api", timeout=10.0) is False
