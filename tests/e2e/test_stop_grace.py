"""An interrupted night's end, as ``nightshift run`` bounds it: it leaves once Prefect has the
night's final state (the flow's state hook says so), else after its grace (real seconds: not
a unit test)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from nightshift.cli.stopping import run_stoppable
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
