"""A night's jobs on an event loop and a thread of their own, stopped first by a signal."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Coroutine
from typing import Any

from nightshift.engine.stopping import INTERRUPTED, NightStop

__all__ = ["STOP_GRACE_S", "on_a_loop"]

STOP_GRACE_S = 3.0  # a signalled night's jobs let go of, before the signal goes on


def on_a_loop(work: Coroutine[Any, Any, None], stop: NightStop) -> None:
    """Run ``work`` on an event loop of its own, on a thread of its own (the flow run's context
    goes with it). A signal raised on this thread while it waits (a worker's SIGTERM when the
    run is cancelled, a Ctrl-C) stops the night first: its jobs are let go, nothing more is
    submitted or written, then the signal goes on (the cancel hook cancels the jobs)."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(work)
        except BaseException as exc:  # handed to the flow's thread
            errors.append(exc)

    context = contextvars.copy_context()
    thread = threading.Thread(target=context.run, args=(run,), name="night-loop", daemon=True)
    thread.start()
    try:
        thread.join()
    except BaseException:
        stop.request(INTERRUPTED, 143)
        thread.join(STOP_GRACE_S)
        raise
    if errors:
        raise errors[0]
