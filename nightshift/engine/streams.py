"""Listening to jobs' event streams instead of polling them: tasks on the night's loop.

A backend that ``Streams`` (base.py) hands out a job's statuses as an async iterator; the
listener runs every such iterator as a task on the night's loop (``nightshift/loop.py``), so
500 streams cost no thread at all.
Each status goes to ``on_status`` (the watcher queues it like a poll's answer); a stream that
ends before its job did, or fails, goes to ``on_drop`` once (the watcher polls that job again,
on its backoff). ``forget`` stops listening to one job; ``close`` to all of them.

The listener is its loop's: ``listen``, ``adopt`` and ``forget`` are called on the loop (the
watcher's tasks), ``close`` from anywhere (it hands itself to the loop).
"""

from __future__ import annotations

import asyncio
import contextlib
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
        self._night.owned("the stream listener")
        if self._closed:
            raise RuntimeError("the stream listener is closed")
        self._backends[id(backend)] = backend
        future = self._night.submit(_listen(backend, external_id, on_status, on_drop))
        self._tasks[key] = future
        future.add_done_callback(lambda _f: self._done(key, future))

    def adopt(self, backend: Any) -> None:
        """A backend whose async client (its awaited status calls) closes with the streams'."""
        self._night.owned("the stream listener")
        self._backends[id(backend)] = backend

    def _done(self, key: Hashable, future: Future[None]) -> None:  # on the loop: its task's end
        if self._tasks.get(key) is future:
            del self._tasks[key]

    def forget(self, key: Hashable) -> None:
        """Stop listening to one job (its watch ended); its ``on_drop`` is not called."""
        self._night.owned("the stream listener")
        future = self._tasks.pop(key, None)
        if future is not None:
            future.cancel()

    @property
    def listening(self) -> int:
        """How many streams are open (a look from a test)."""
        return len(self._tasks)

    def close(self) -> None:
        """Stop every stream and close the backends' stream clients."""
        if self._night.on_loop():  # closed from the loop itself: the clients close after
            if backends := self._closing():
                self._night.submit(_aclose(backends))
            return
        if self._night.closed:  # nothing runs on the loop any more: its tasks are gone
            self._closed = True
            return
        with contextlib.suppress(Exception):
            self._night.run(self._aclose(), timeout=10)

    def _closing(self) -> list[Any]:
        """On the loop: stop every stream; the backends whose clients are to close."""
        if self._closed:
            return []
        self._closed = True
        tasks, self._tasks = list(self._tasks.values()), {}
        for future in tasks:
            future.cancel()
        return list(self._backends.values())

    async def _aclose(self) -> None:
        await _aclose(self._closing())


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
