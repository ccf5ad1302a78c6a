"""An http job's token in a Prefect Secret block, read for a status call or a stream awaited on
the night's loop: read off the loop (Prefect's sync ``Secret.load`` hands a coroutine back on a
thread running an event loop outside a flow run), once."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from nightshift.backends.base import ExternalState
from nightshift.backends.http import HttpBackend
from nightshift.config.loader import parse_catalogue
from nightshift.loop import NightLoop

pytestmark = pytest.mark.usefixtures("prefect_server")

BLOCK = "nightshift-test-http-token"


@contextmanager
def finished_jobs() -> Iterator[tuple[str, list[str]]]:
    """An API whose every job has finished: its base URL, and each request's auth header."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization", ""))
            if self.path.endswith("/events"):
                body = b'event: status\ndata: {"status": "finished"}\n\n'
                kind = "text/event-stream"
            else:
                body, kind = json.dumps({"status": "finished"}).encode(), "application/json"
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_a_secret_block_token_is_read_off_the_loop_for_awaited_calls(tmp_path: Path) -> None:
    from prefect.blocks.system import Secret

    Secret(value="s3cret").save(BLOCK, overwrite=True)
    with finished_jobs() as (base, seen):
        text = (
            "name: secret-on-loop\njobs:\n  - label: s\n    backend: http\n"
            f"    base_url: {base}\n    submit: {{url: /jobs}}\n"
            f"    auth: {{secret_block: {BLOCK}}}\n    id_path: id\n"
            "    status_url: '/jobs/{id}'\n    stream_url: '/jobs/{id}/events'\n"
            "    state_path: status\n"
            "    states: {queued: [queued], running: [started], succeeded: [finished], "
            "failed: [failed]}\n"
        )
        jobs = parse_catalogue(text, tmp_path / "n.yaml")
        backend = HttpBackend({"s": jobs.job("s")}, environ={})

        async def both() -> tuple[ExternalState, list[ExternalState]]:
            status = await backend.astatus("s/j1")
            streamed = [s.state async for s in backend.stream("s/j2")]
            return status.state, streamed

        with NightLoop() as loop:  # as a night's watch runs, outside a flow run here
            try:
                assert loop.run(both(), timeout=30) == (
                    ExternalState.SUCCEEDED,
                    [ExternalState.SUCCEEDED],
                )
            finally:
                loop.run(backend.aclose(), timeout=10)
        backend.close()
    assert seen == ["Bearer s3cret", "Bearer s3cret"]


def test_a_secret_block_is_read_from_a_thread_of_an_async_task_run() -> None:
    """A job's stream is opened inside its ``run-job`` task run (async): its token, read on a
    thread copying that context, came back a coroutine (Prefect dispatched to its async load)."""
    import asyncio

    from prefect import flow, task
    from prefect.blocks.system import Secret

    from nightshift.secret_blocks import read_secret_block

    Secret(value="s3cret").save(BLOCK, overwrite=True)

    @task
    async def read() -> str:
        return await asyncio.to_thread(read_secret_block, BLOCK)

    @flow
    async def night() -> str:
        return await read()

    assert asyncio.run(night()) == "s3cret"
