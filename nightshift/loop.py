"""The night's one event loop, on one thread: what keeps a night's time runs as tasks on it.

The watcher's schedule and timers, the jobs' event streams, the dwell ticks and the cancel
requests' reads are coroutines on this loop, woken by a ``Signal`` and stopped by cancelling
them; the night's jobs run on it too (``orchestration/night_loop.py``). What must block (a status
call, a submit, a ledger write, a cancel) runs on the loop's bounded executors, made here and
nowhere else (``blocking``), so a hung call holds a thread of its pool, never the loop.

Other threads hand work to the loop (``submit``, ``call``) and may wait for it (``run``); the
loop's own thread never waits for itself. What the loop owns says so (``owned``): with
``NIGHTSHIFT_OWNER_CHECK=1`` (the test suite sets it) touching it from another thread raises
``NotTheLoop``, so a crossing nobody meant fails a test instead of racing in production.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["CHORES", "CHORE_THREADS", "NightLoop", "NotTheLoop", "Signal"]

T = TypeVar("T")
# the night's own blocking chores (a dwell tick's alert log row and message, a read of the
# cancel requests, a slot lease's renewal): one pool for them all, apart from the jobs' and
# watches'
CHORES, CHORE_THREADS = "nightshift-chores", 2
_CLOSE_S = 10.0  # what closing waits for the loop's tasks and thread, at most
OWNER_CHECK = "NIGHTSHIFT_OWNER_CHECK"  # "1": night state touched off its loop raises


class NotTheLoop(AssertionError):
    """Night state owned by the loop was touched from another thread (the owner check)."""


class NightLoop:
    """One event loop on one daemon thread, started at once. Work handed to it runs in a copy of
    its submitter's contextvars (a flow run's). ``close`` cancels what still runs on it and
    ends the thread."""

    def __init__(self, name: str = "night-loop") -> None:
        self._loop = asyncio.new_event_loop()
        self._pools: dict[str, concurrent.futures.ThreadPoolExecutor] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._tasks: set[asyncio.Task[Any]] = set()  # spawned: held until done (``spawn``)
        self._checks = os.environ.get(OWNER_CHECK) == "1"
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop itself."""
        return self._loop

    @property
    def closed(self) -> bool:
        """True once ``close`` began: nothing more is handed to the loop."""
        return self._closed

    def on_loop(self) -> bool:
        """Whether the caller runs on the loop's thread."""
        return threading.get_ident() == self._thread.ident

    def owned(self, what: str) -> None:
        """``what`` is this loop's: with the owner check on, raise if the caller is another
        thread while the loop runs (once it closed, whoever is left may tidy up)."""
        if self._checks and not self._closed and not self.on_loop():
            here = threading.current_thread().name
            raise NotTheLoop(f"{what} is the night loop's, touched from thread {here!r}")

    def submit(self, work: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run ``work`` as a task on the loop; cancelling the future cancels the task."""
        if self._closed:
            work.close()
            raise RuntimeError("the night's loop is closed")
        return asyncio.run_coroutine_threadsafe(work, self._loop)

    def call(self, fn: Callable[..., object], *args: object) -> None:
        """Call ``fn(*args)`` on the loop soon (from any thread); nothing once it is closed."""
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            self._loop.call_soon_threadsafe(fn, *args)

    def spawn(self, work: Coroutine[Any, Any, T], name: str | None = None) -> asyncio.Task[T]:
        """On the loop: ``work`` as a task of the night's, held until it ends (a task nobody
        else holds is never collected half-way) and cancelled with the loop at its close. It
        runs in a context of its own, not its spawner's: a job's task run that spawned it may
        end first, closing what its context holds (the Prefect client of the night's tasks)."""
        self.owned("the night's tasks")
        task = self._loop.create_task(work, name=name, context=contextvars.Context())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def soon(self, fn: Callable[..., object], *args: object) -> None:
        """``fn(*args)`` now when asked on the loop (or once it closed: nobody else touches what
        it owned), else on the loop soon: a change of the loop's state asked from any thread."""
        if self.on_loop() or self._closed:
            fn(*args)
        else:
            self.call(fn, *args)

    def run(self, work: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``work`` on the loop and wait for what it returns (never from the loop itself)."""
        if self.on_loop():
            work.close()
            raise RuntimeError("the night's loop cannot wait for itself")
        future = self.submit(work)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    def ask(self, fn: Callable[[], T], timeout: float | None = None) -> T:
        """``fn()`` on the loop, its value returned: at once when asked there (or once the loop
        closed: nobody else touches what it owned), else handed over and waited for."""
        if self.on_loop() or self._closed:
            return fn()

        async def on_loop() -> T:
            return fn()

        return self.run(on_loop(), timeout)

    def blocking(self, name: str, threads: int) -> concurrent.futures.ThreadPoolExecutor:
        """The bounded executor ``name`` for blocking work, made at first ask; its threads are
        made as work comes, and end when the loop closes."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the night's loop is closed")
            pool = self._pools.get(name)
            if pool is None:
                pool = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix=name)
                self._pools[name] = pool
            return pool

    def __enter__(self) -> NightLoop:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Cancel the loop's tasks, let its executors' idle threads end, end its thread."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            pools = list(self._pools.values())
        for pool in pools:
            pool.shutdown(wait=False, cancel_futures=True)
        if self.on_loop():  # closed from a task of its own: the loop stops after this step
            self._loop.call_soon(self._loop.stop)
            return
        with contextlib.suppress(RuntimeError, concurrent.futures.TimeoutError):
            asyncio.run_coroutine_threadsafe(_cancel_all(), self._loop).result(_CLOSE_S)
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(_CLOSE_S)
        if not self._thread.is_alive():
            self._loop.close()


async def _cancel_all() -> None:
    """Cancel every other task on the loop and wait for them to end; close its async
    generators (as ``asyncio.run`` does at its end)."""
    me = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not me]
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=_CLOSE_S)
    await asyncio.get_running_loop().shutdown_asyncgens()


class Signal:
    """Wakes every coroutine of ``loop`` waiting on it; fired from any thread.

    A waiter looks at its state first, then waits (no await between the two): a fire from
    another thread reaches the loop after the waiter is registered, so no wake-up is lost.
    """

    def __init__(self, loop: NightLoop) -> None:
        self._night = loop
        self._waiters: set[asyncio.Future[None]] = set()

    def fire(self) -> None:
        """Wake every waiter (from any thread)."""
        if self._night.on_loop():  # after this step: a waiter registering in it is woken
            self._night.loop.call_soon(self._wake)
        else:
            self._night.call(self._wake)

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, set()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def wait(self, timeout: float | None) -> bool:
        """Wait for the next fire, ``timeout`` seconds at most (None: no limit); False when
        the time ran out first."""
        waiter: asyncio.Future[None] = self._night.loop.create_future()
        self._waiters.add(waiter)
        try:
            done, _ = await asyncio.wait([waiter], timeout=timeout)
        finally:
            self._waiters.discard(waiter)
            if not waiter.done():
                waiter.cancel()
        return bool(done)
