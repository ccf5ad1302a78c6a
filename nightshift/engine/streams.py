"""Listening to jobs' event streams instead of polling them: tasks on the night's loop.

A backend that ``Streams`` (base.py) hands out a job's statuses as an async iterator; the
listener runs every such iterator as a task on the night's loop (``nightshift/loop.py``), so
500 streams cost no thread at all.
Each status goes to ``on_status`` (the watcher queues it like a poll's answer); a stream that
ends before its job did, or fails, goes to ``on_drop`` once (the watcher polls that job again,
on its backoff). ``forget`` stops listening to one job; ``close`` to all of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import Any

from nightshift.backends.base import JobStatus, Streams
from nightshift.loop import NightLoop

__all__ = ["StreamListener"]

OnStatus = Callable[[JobStatus], None]
OnDrop = Callable[[BaseException], None]


class StreamListener:
    """Runs jobs' event streams as tasks on the night's loop."""

    def __init__(self, loop: NightLoop) -> None:
        self._night = loop
        self._lock = threading.Lock()
        self._tasks: dict[Hashable, Future[None]] = {}
        self._backends: dict[int, Streams] = {}
        self._closed = False

    def listen(
        self,
        key: Hashable,
        backend: Streams,
        external_id: str,
        on_status: OnStatus,
        on_drop: OnDrop,
    ) -> None:
        """Listen to ``external_id``'s stream under ``key`` until its job is final or it drops."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the stream listener is closed")
            self._backends[id(backend)] = backend
            future = self._night.submit(_listen(backend, external_id, on_status, on_drop))
            self._tasks[key] = future
        future.add_done_callback(lambda _f: self._done(key, future))

    def adopt(self, backend: Any) -> None:
        """A backend whose async client (its awaited status calls) closes with the streams'."""
        with self._lock:
            self._backends[id(backend)] = backend

    def _done(self, key: Hashable, future: Future[None]) -> None:
        with self._lock:
            if self._tasks.get(key) is future:
                del self._tasks[key]

    def forget(self, key: Hashable) -> None:
        """Stop listening to one job (its watch ended); its ``on_drop`` is not called."""
        with self._lock:
            future = self._tasks.pop(key, None)
        if future is not None:
            future.cancel()

    @property
    def listening(self) -> int:
        """How many streams are open."""
        with self._lock:
            return len(self._tasks)

    def close(self) -> None:
        """Stop every stream and close the backends' stream clients."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            tasks, self._tasks = list(self._tasks.values()), {}
            backends = list(self._backends.values())
        for future in tasks:
            future.cancel()
        if not backends or self._night.closed:
            return
        if self._night.on_loop():  # closed from the loop itself: the clients close after
            self._night.submit(_aclose(backends))
            return
        with contextlib.suppress(Exception):
            self._night.run(_aclose(backends), timeout=10)


async def _listen(backend: Streams, external_id: str, on_status: OnStatus, on_drop: OnDrop) -> None:
    try:
        async for status in backend.stream(external_id):
            on_status(status)
            if status.state.final:
                return
    except asyncio.CancelledError:
        raise  # forgotten: the watch ended
    except Exception as exc:  # the stream dropped or failed: the watcher polls it again
        on_drop(exc)
        return
    on_drop(RuntimeError(f"the stream of {external_id} ended before its job did"))


async def _aclose(backends: list[Any]) -> None:
    for backend in backends:
        with contextlib.suppress(Exception):
            await backend.aclose()
