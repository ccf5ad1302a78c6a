"""Ctrl-C and SIGTERM for ``nightshift run``: stop watching within seconds, leave jobs running.

The night runs on a thread of its own, so the signals reach this module's handlers on the main
thread (not Prefect's, which would crash the flow run). The first signal asks the night to stop
(``NightStop``): no more submits, the jobs in flight are let go, still running out there and in
flight in the ledger; the night writes its summary and gives its lease and slots back. A
second signal exits at once. Exit status 128 + the signal: 130 (SIGINT), 143 (SIGTERM).

When the night is over but Prefect's bookkeeping is stuck on an API that is gone (the server
died mid-night), or the night was interrupted, the process waits for it only a short grace (an
interrupted night's, until Prefect has its final state) and then leaves with ``os._exit``: no
minutes of retried events against a dead server.
"""

from __future__ import annotations

import contextvars
import http.client
import os
import signal
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Any

from nightshift.cli.exits import INTERRUPTED_LINE
from nightshift.engine.stopping import INTERRUPTED, NightStop

__all__ = [
    "GRACE_S",
    "STOP_BUDGET_S",
    "Ran",
    "answers_health",
    "drain_prefect",
    "exit_now",
    "leaving_on_ctrl_c",
    "prefect_api_alive",
    "run_stoppable",
    "stop_line",
]

# how long an interrupted night's end may take once it is over, for Prefect to hear its final
# state (its state hook says so: usually within 0.2 s, and the wait ends there)
GRACE_S = 2.0
# the promise: a stopped night leaves within 5 s of the signal. Its summary and lease come first
# whatever that takes; Prefect's bookkeeping gets what is left of this (``run_stoppable``), and
# what follows it (the summary printed, ``exit_now``'s drain) the rest
STOP_BUDGET_S = 4.0
# what Prefect gets to hear the final state even when the budget is spent (usually enough: its
# state hook says so within 0.2 s); a flow run left Running in the UI is the price past it
_SAY_FLOOR_S = 0.3
DRAIN_S = 0.5  # Prefect's queued events and logs, when we leave early
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclass
class Ran:
    """How the night's thread ended: its flow state, or still stuck in Prefect's bookkeeping."""

    state: Any = None
    lingering: bool = False  # the night is over but its thread still waits on the Prefect API
    exit_early: bool = False  # leave with ``exit_now``: interrupted, or the API is gone
    api_alive: bool = True  # as seen when the night was over


@contextmanager
def leaving_on_ctrl_c() -> Iterator[None]:
    """Before the night begins (its server starting, Prefect imported) a Ctrl-C leaves at once
    with one line: nothing is submitted yet, and the reaper stops the server. Not Python's
    ``KeyboardInterrupt``, which a garbage collector's callback can swallow (CI: the run went
    on to its night). ``run_stoppable``'s handlers stand in for it while the night runs, and
    give it back for the night's last lines; the handler before it is back when the block ends."""
    if threading.current_thread() is not threading.main_thread():
        yield  # called as a library: the caller's own handling
        return

    def leave(signum: int, _frame: FrameType | None) -> None:
        sys.stdout.flush()
        os.write(2, f"{INTERRUPTED_LINE}\n".encode())
        os._exit(128 + signum)

    previous = signal.signal(signal.SIGINT, leave)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def run_stoppable(
    night: Callable[[], Any],
    stop: NightStop,
    api_alive: Callable[[], bool],
    *,
    grace: float = GRACE_S,
    budget: float = STOP_BUDGET_S,
) -> Ran:
    """Run ``night()`` on its own thread (this thread's context) under the stop signals. An
    interrupted night, once over, is left when Prefect has its final state, after ``grace``,
    or ``budget`` seconds after the stop was asked, whichever comes first."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["state"] = night()
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    thread = threading.Thread(
        target=contextvars.copy_context().run, args=(target,), name="nightshift-night", daemon=True
    )
    restore = _install(stop)
    try:
        thread.start()
        over_since: float | None = None
        alive = True
        while thread.is_alive():
            thread.join(0.1)
            if not stop.over or not thread.is_alive():
                continue
            if over_since is None:
                over_since = time.monotonic()
                alive = api_alive()
            if not alive:
                break  # nothing it still has to say can reach the API
            if stop.requested and (stop.end_said or _waited(stop, over_since, grace, budget)):
                break
    finally:
        restore()
    if "error" in box:
        raise box["error"]
    lingering = thread.is_alive()
    return Ran(box.get("state"), lingering, stop.requested or lingering or not alive, alive)


def _waited(stop: NightStop, over_since: float, grace: float, budget: float) -> bool:
    """Whether an interrupted night's end has waited for Prefect long enough."""
    now = time.monotonic()
    asked = stop.requested_at if stop.requested_at is not None else over_since
    over_for = now - over_since
    return over_for >= grace or (now - asked >= budget and over_for >= _SAY_FLOOR_S)


def stop_line(left: list[dict[str, Any]], catalogue: str, night: str) -> str:
    """The one line an interrupted night leaves on stderr."""
    where = f"--catalogue {catalogue} --night {night}"
    return (
        f"{INTERRUPTED}: {len(left)} job(s) left running; `nightshift run {where}` re-attaches "
        f"to them, `nightshift cancel {where}` stops them"
    )


def exit_now(code: int, *, drain: bool = True) -> None:
    """Leave now: Prefect's queued events and logs get ``DRAIN_S`` (with ``drain``; pointless
    when the API is gone), then the process ends. The reaper stops the temporary server."""
    sys.stdout.flush()
    sys.stderr.flush()
    if drain:
        drainer = threading.Thread(target=drain_prefect, name="nightshift-drain", daemon=True)
        drainer.start()
        drainer.join(DRAIN_S)
    os._exit(code)


def prefect_api_alive(timeout: float = 1.0) -> bool:
    """Whether the Prefect API answers its health check now (the temporary server too)."""
    from prefect.settings import PREFECT_API_URL

    from nightshift.cli.reaper import temporary_server_alive

    url = PREFECT_API_URL.value()
    if not url:
        return bool(temporary_server_alive())
    return answers_health(url, timeout)


def answers_health(api_url: str, timeout: float) -> bool:
    """Whether the Prefect API at ``api_url`` answers its health check with a 200. A server on
    this host over plain HTTP (the temporary one) is asked with ``urllib``, no proxy: no TLS
    context to build (httpx builds one per client, tens of milliseconds of CPU, when a stopping
    night has none to spare); any other as Prefect's own client would, with httpx."""
    url = f"{api_url.rstrip('/')}/health"
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme == "http" and parsed.hostname in ("127.0.0.1", "localhost", "::1"):
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with direct.open(url, timeout=timeout) as answer:
                return bool(answer.status == 200)
        except (OSError, ValueError, http.client.HTTPException):  # not (yet) a server there
            return False
    import httpx

    try:
        return httpx.get(url, timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


def drain_prefect(timeout: float = DRAIN_S) -> None:
    """Send what Prefect's services still hold (logs, events), for ``timeout`` seconds at most."""
    from prefect._internal.concurrency.services import QueueService

    try:
        QueueService.drain_all(timeout=timeout)
    except Exception:  # best effort: we are leaving either way
        return


def _install(stop: NightStop) -> Callable[[], None]:
    """Our handlers for SIGINT and SIGTERM while the night runs; returns their removal."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    asked = threading.Event()

    def handler(signum: int, _frame: FrameType | None) -> None:
        code = 128 + signum
        if asked.is_set():  # the second one: leave at once
            os.write(2, b"stopped at once; jobs in flight keep running\n")
            os._exit(code)
        asked.set()
        # the stop takes locks the interrupted code may hold: never from the handler itself
        threading.Thread(
            target=stop.request, args=(INTERRUPTED, code), name="nightshift-stop", daemon=True
        ).start()

    previous = {sig: signal.signal(sig, handler) for sig in _SIGNALS}

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)

    return restore
