"""A night's jobs on the night's event loop, stopped first by a signal."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from nightshift.engine.stopping import INTERRUPTED, NightStop
from nightshift.heap import TRIM_EVERY_S, trimmer
from nightshift.loop import NightLoop

__all__ = ["STOP_GRACE_S", "on_a_loop"]

log = logging.getLogger("nightshift.night")

STOP_GRACE_S = 3.0  # a signalled night's jobs let go of, before the signal goes on

T = TypeVar("T")


def on_a_loop(
    loop: NightLoop,
    work: Coroutine[Any, Any, T],
    stop: NightStop,
    trim: Callable[[], object] | None = None,
    trim_every: float = TRIM_EVERY_S,
) -> T:
    """Run ``work`` on the night's loop (``nightshift/loop.py``: the flow run's context went with
    it), for what it returns. A signal raised on this thread while it waits (a worker's SIGTERM
    when the run is cancelled, a Ctrl-C) stops the night first: its jobs are let go, nothing
    more is submitted or written, then the signal goes on (the cancel hook cancels the jobs).

    While it runs, ``trim`` (default: the C heap's, ``heap.py``) is called every
    ``trim_every`` seconds, so a night of thousands of jobs gives freed memory back.
    """
    running = loop.submit(_trimming(work, trim or trimmer(), trim_every))
    try:
        return running.result()
    except BaseException:
        if not running.done():  # interrupted while it ran: let its jobs go, then go on
            stop.request(INTERRUPTED, 143)
            concurrent.futures.wait([running], STOP_GRACE_S)
        raise


async def _trimming(
    work: Coroutine[Any, Any, T], trim: Callable[[], object] | None, every: float
) -> T:
    """``work``, with ``trim`` called every ``every`` seconds beside it until it ends."""
    if trim is None:
        return await work

    async def keep_trimming() -> None:
        while True:
            await asyncio.sleep(every)
            try:
                trim()
            except Exception as exc:  # memory housekeeping must never cost the night
                log.warning("stopped handing freed memory back: %s: %s", type(exc).__name__, exc)
                return

    beside = asyncio.create_task(keep_trimming())
    try:
        return await work
    finally:
        beside.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beside
