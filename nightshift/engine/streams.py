"""Listening to jobs' event streams instead of polling them: one asyncio loop on one thread.

A backend that ``Streams`` (base.py) hands out a job's statuses as an async iterator; the
listener runs every such iterator on its one loop, so 500 streams cost one thread, not 500.
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

__all__ = ["StreamListener"]

OnStatus = Callable[[JobStatus], None]
OnDrop = Callable[[BaseException], None]


class StreamListener:
    """Runs jobs' event streams on one event loop, on one thread started at first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._tasks: dict[Hashable, Future[None]] = {}
        self._backends: dict[int, Streams] = {}
        self._closed = False

    def _started(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            ready = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()

            self._thread = threading.Thread(target=run, name="nightshift-streams", daemon=True)
            self._thread.start()
            ready.wait(timeout=30)
            self._loop = loop
        return self._loop

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
            loop = self._started()
            self._backends[id(backend)] = backend
            future = asyncio.run_coroutine_threadsafe(
                _listen(backend, external_id, on_status, on_drop), loop
            )
            self._tasks[key] = future
        future.add_done_callback(lambda _f: self._done(key, future))

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
        """Stop every stream, close the backends' stream clients, end the thread."""
        with self._lock:
            self._closed = True
            tasks, self._tasks = list(self._tasks.values()), {}
            loop, backends = self._loop, list(self._backends.values())
        for future in tasks:
            future.cancel()
        if loop is None:
            return
        closing = asyncio.run_coroutine_threadsafe(_aclose(backends), loop)
        with contextlib.suppress(Exception):
            closing.result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=10)
        loop.close()


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
