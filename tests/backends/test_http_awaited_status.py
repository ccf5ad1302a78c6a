"""An http job's status call is awaited on the night's loop: one in flight holds no thread."""

from __future__ import annotations

import gc
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from nightshift.backends.http import HttpBackend
from nightshift.backoff import Backoff
from nightshift.config.loader import parse_catalogue
from nightshift.engine.watcher import Watcher, WatchRequest
from nightshift.loop import NightLoop
from tests.http_night import TOKEN, catalogue, http_job
from tests.support import wait_until


@contextmanager
def silent_server() -> Iterator[tuple[str, Callable[[], int]]]:
    """A server that takes every connection and never answers: its base URL, and how many
    connections it took."""
    sock = socket.create_server(("127.0.0.1", 0))
    sock.settimeout(0.1)
    taken: list[socket.socket] = []
    done = threading.Event()

    def take() -> None:
        while not done.is_set():
            try:
                taken.append(sock.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=take, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", lambda: len(taken)
    finally:
        done.set()
        thread.join(5)
        for conn in taken:
            conn.close()
        sock.close()


def status_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("nightshift-status")]


def test_status_calls_that_hang_hold_no_thread(tmp_path: Path, night_loop: NightLoop) -> None:
    with silent_server() as (base, taken):
        text = catalogue([http_job("s", base, "{task: s}")])  # no stream: polled
        jobs = parse_catalogue(text, tmp_path / "n.yaml")
        backend = HttpBackend({"s": jobs.job("s")}, environ={"SANDBOX_JOBS_TOKEN": TOKEN})
        before = {t.ident for t in threading.enumerate()}
        watcher = Watcher(lambda *_: None, loop=night_loop)
        try:
            for i in range(6):  # asked at once; fewer than a backend's 8 calls in flight
                policy = Backoff(1, 2, 30)
                request = WatchRequest(f"s{i}", backend, f"s/j{i}", policy, look_first=True)  # type: ignore[arg-type]
                watcher.watch(request)
            wait_until(lambda: taken() >= 6, 30, "six status calls to be out")
            # six calls wait for an answer (5 s each at most): on the loop, not on six threads
            # of any name: the watch added no thread (it runs on the night's loop, made before)
            assert status_threads() == []
            added = [t.name for t in threading.enumerate() if t.ident not in before]
            assert added == [], added
        finally:
            watcher.stop()
            backend.close()


def test_status_calls_awaited_at_the_stop_are_cancelled_with_it(tmp_path: Path) -> None:
    errors: list[dict[str, object]] = []
    said: list[str] = []  # what the watch told the night about these jobs' calls
    with silent_server() as (base, taken), NightLoop() as loop:
        loop.loop.set_exception_handler(lambda _loop, context: errors.append(context))
        text = catalogue([http_job("s", base, "{task: s}")])
        jobs = parse_catalogue(text, tmp_path / "n.yaml")
        backend = HttpBackend({"s": jobs.job("s")}, environ={"SANDBOX_JOBS_TOKEN": TOKEN})
        watcher = Watcher(lambda *_: None, loop=loop, on_error=lambda label, _e: said.append(label))
        try:
            for i in range(3):
                policy = Backoff(1, 2, 30)
                request = WatchRequest(f"s{i}", backend, f"s/j{i}", policy, look_first=True)  # type: ignore[arg-type]
                watcher.watch(request)
            wait_until(lambda: taken() >= 3, 30, "three status calls to be out")
        finally:
            watcher.stop()
        # the calls are not left waiting for their answer (5 s) on a stopped watch
        assert loop.run(_awaited_left(), timeout=5) == 0
        backend.close()
    gc.collect()  # a task that ended on an error no one took says so when it is collected
    assert [str(e.get("message")) for e in errors] == []
    assert said == []  # not three read errors of a client closed under them


async def _awaited_left() -> int:
    import asyncio

    me = asyncio.current_task()
    return len([t for t in asyncio.all_tasks() if t is not me and "_await_single" in repr(t)])
