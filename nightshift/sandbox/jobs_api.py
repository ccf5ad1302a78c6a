"""A sandbox HTTP job API, shaped like a team's own: FastAPI in front of a queue and a worker.

``POST /jobs`` (JSON spec, ``Idempotency-Key``) answers ``{"job_id", "status": "queued"}`` (201;
200 and the same job for a key seen before), or 429 + ``Retry-After`` when the user (one per
token) already has ``quota`` jobs in flight. ``GET /jobs/{id}`` answers ``{job_id, status,
result, error, created_at, started_at, ended_at, attempt}`` (statuses as RQ names them: queued,
started, finished, failed, canceled), 404 once its record expired. ``GET /jobs?ids=a,b`` and
``GET /jobs?key=K`` list; ``POST /jobs/{id}/cancel``; ``GET /jobs/{id}/logs`` (text);
``GET /jobs/{id}/stream``: Server-Sent Events, the job's record now and at each change, until
it is final. ``unseen_until_taken`` (``--unseen-until-taken``): a job's reads (its status, the
listing, its stream) answer 404 until a worker took it, as a status endpoint that learns of a
job from its workers does (Flower, workers scaling from zero).
Faults for tests: ``POST /admin/faults`` ``{"kind": "lost_answer" | "drop_stream",
"times": n}``; ``POST /admin/expire/{id}`` drops a record as its TTL would; ``GET /admin/stats``.

Run it: ``python -m sandbox.jobs_api --redis redis://127.0.0.1:6379/0 --port 8766`` (and
``rq worker -w rq.worker.SimpleWorker --url ... <queue>``), or with ``--memory``: no Redis.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import threading
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse

from nightshift.sandbox.jobs_store import FINAL, MemoryStore, RedisStore, Store, update
from nightshift.sandbox.jobs_work import RqQueue, ThreadQueue

__all__ = ["JobApi", "main", "make_app"]

PUBLIC = (
    "job_id", "status", "result", "error", "created_at", "started_at", "ended_at", "attempt",
    "traceparent",  # the W3C trace context its submit carried (a traced night's try)
)  # fmt: skip
STREAM_LOOK_S = 0.05  # how often a stream looks at its job's record
KEEPALIVE_S = 10.0


@dataclass
class _State:
    store: Store
    queue: Any
    quota: int
    tokens: dict[str, str] | None  # token -> user; None: no auth, one user
    unseen_until_taken: bool = False
    faults: list[dict[str, Any]] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)

    def count(self, what: str) -> None:
        self.stats[what] = self.stats.get(what, 0) + 1

    def fault(self, kind: str) -> bool:
        for fault in self.faults:
            if fault["kind"] == kind and fault.get("times", 1) > 0:
                fault["times"] = fault.get("times", 1) - 1
                return True
        return False


def _error(code: int, message: str, **headers: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=code, headers=headers or None)


def _public(record: dict[str, Any]) -> dict[str, Any]:
    return {k: record.get(k) for k in PUBLIC}


def make_app(
    store: Store,
    queue: Any,
    *,
    quota: int = 5,
    tokens: dict[str, str] | None = None,
    look_s: float = STREAM_LOOK_S,
    unseen_until_taken: bool = False,
) -> FastAPI:
    """The API over ``store`` and ``queue``."""
    app = FastAPI(title="sandbox job API")
    state = _State(store, queue, quota, tokens, unseen_until_taken)
    app.state.jobs = state

    def visible(job_id: str) -> dict[str, Any] | None:
        """The job's record as its reads see it (None: 404)."""
        record = store.get(job_id)
        hidden = state.unseen_until_taken and record is not None and not record.get("attempt")
        # no worker took it yet (a job cancelled while queued shows)
        return None if hidden and record is not None and record["status"] == "queued" else record

    def user_of(request: Request) -> str | None:
        if state.tokens is None:
            return "anonymous"
        given = request.headers.get("authorization", "")
        return state.tokens.get(given.removeprefix("Bearer ").strip())

    @app.middleware("http")
    async def auth(request: Request, call_next: Any) -> Any:
        if not request.url.path.startswith("/admin") and user_of(request) is None:
            return _error(401, "missing or unknown token")
        return await call_next(request)

    @app.post("/jobs")
    async def create(request: Request) -> JSONResponse:
        try:
            spec = await request.json()
        except ValueError:
            return _error(400, "the body must be JSON")
        if not isinstance(spec, dict) or not isinstance(spec.get("task"), str):
            return _error(422, "the body needs a 'task' (a string)")
        user = user_of(request) or "anonymous"
        key = request.headers.get("idempotency-key")
        if key and (held := store.by_key(key)) is not None:
            return JSONResponse(_public(store.get(held) or {"job_id": held}), status_code=200)
        job_id = uuid.uuid4().hex[:12]
        if not store.admit(job_id, user, state.quota):
            state.count("refused")
            return _error(
                429, f"in-flight quota of {state.quota} jobs reached", **{"Retry-After": "1"}
            )
        if key and (held := store.claim_key(key, job_id)) is not None:
            store.release(job_id, user)
            return JSONResponse(_public(store.get(held) or {"job_id": held}), status_code=200)
        now = datetime.now(UTC).isoformat()
        record: dict[str, Any] = {
            "job_id": job_id, "status": "queued", "user": user, "key": key, "spec": spec,
            "result": None, "error": None, "created_at": now, "started_at": None,
            "ended_at": None, "attempt": 0, "log": [],
            "traceparent": request.headers.get("traceparent"),
        }  # fmt: skip
        store.put(record)
        queue.enqueue(job_id)
        state.count("created")
        if state.fault("lost_answer"):  # created, but the answer never reaches the caller
            return _error(503, "upstream timed out")
        return JSONResponse({"job_id": job_id, "status": "queued"}, status_code=201)

    @app.get("/jobs/{job_id}")
    async def read(job_id: str) -> JSONResponse:
        state.count("status")
        record = visible(job_id)
        if record is None:
            return _error(404, f"no job {job_id} (records expire {store.ttl_s:g}s after a change)")
        return JSONResponse(_public(record))

    @app.get("/jobs")
    async def listing(ids: str | None = None, key: str | None = None) -> JSONResponse:
        state.count("list")
        wanted = [i for i in (ids or "").split(",") if i]
        if key is not None:
            wanted = [held] if (held := store.by_key(key)) else []
        found = [r for i in wanted if (r := visible(i)) is not None]
        return JSONResponse({"jobs": [_public(r) for r in found]})

    @app.post("/jobs/{job_id}/cancel")
    async def cancel(job_id: str) -> JSONResponse:
        record = store.get(job_id)
        if record is None:
            return _error(404, f"no job {job_id}")
        if record["status"] in FINAL:
            return _error(409, f"job {job_id} is already {record['status']}")
        store.request_cancel(job_id)
        if record["status"] == "queued":
            queue.cancel_queued(job_id)
            update(store, job_id, status="canceled", ended_at=datetime.now(UTC).isoformat())
        return JSONResponse({"job_id": job_id, "status": "canceling"}, status_code=202)

    @app.get("/jobs/{job_id}/logs")
    async def logs(job_id: str) -> Any:
        record = store.get(job_id)
        if record is None:
            return _error(404, f"no job {job_id}")
        return PlainTextResponse("\n".join(record.get("log") or []) + "\n")

    @app.get("/jobs/{job_id}/stream")
    async def stream(job_id: str) -> Any:
        state.count("stream")
        if visible(job_id) is None:
            return _error(404, f"no job {job_id}")
        drop = state.fault("drop_stream")
        events = _events(store, job_id, drop, look_s)
        return StreamingResponse(events, media_type="text/event-stream")

    @app.post("/admin/faults")
    async def faults(request: Request) -> JSONResponse:
        state.faults.append(await request.json())
        return JSONResponse({"ok": True})

    @app.post("/admin/expire/{job_id}")
    async def expire(job_id: str) -> JSONResponse:
        store.expire(job_id)
        return JSONResponse({"ok": True})

    @app.get("/admin/stats")
    async def stats() -> JSONResponse:
        return JSONResponse({**state.stats, "high_water": store.high_water(),
                             "jobs": len(store.jobs()), "dead": store.dead()})  # fmt: skip

    return app


async def _events(store: Store, job_id: str, drop: bool, look_s: float) -> AsyncIterator[str]:
    """The job's record as events: now, at each change, and its final one; ``drop``: the stream
    breaks after the first."""
    last, quiet = None, 0.0
    while True:
        record = store.get(job_id)
        if record is None:
            yield f"event: gone\ndata: {json.dumps({'error': 'record expired'})}\n\n"
            return
        shown = _public(record)
        if shown != last:
            yield f"event: status\ndata: {json.dumps(shown)}\n\n"
            last, quiet = shown, 0.0
            if drop or record["status"] in FINAL:
                return
        elif quiet >= KEEPALIVE_S:
            yield ": keep-alive\n\n"
            quiet = 0.0
        await asyncio.sleep(look_s)
        quiet += look_s


class JobApi:
    """The sandbox API served on 127.0.0.1 from a thread (tests, the demo): a context manager.

    ``redis_url``: records and queue on Redis (run an RQ worker on ``queue_name``); None: in
    memory, jobs run on this process's threads.
    """

    def __init__(
        self,
        *,
        redis_url: str | None = None,
        quota: int = 5,
        ttl_s: float = 86400.0,
        tokens: dict[str, str] | None = None,
        workers: int = 4,
        look_s: float = STREAM_LOOK_S,
        unseen_until_taken: bool = False,
    ) -> None:
        self.prefix = f"nsjobs-{uuid.uuid4().hex[:8]}"
        self.redis_url = redis_url
        if redis_url is not None:
            from redis import Redis

            self.store: Store = RedisStore(Redis.from_url(redis_url), self.prefix, ttl_s)
            self.queue: Any = RqQueue(self.store, redis_url)  # type: ignore[arg-type]
        else:
            self.store = MemoryStore(ttl_s)
            self.queue = ThreadQueue(self.store, workers)
        self.app = make_app(
            self.store,
            self.queue,
            quota=quota,
            tokens=tokens,
            look_s=look_s,
            unseen_until_taken=unseen_until_taken,
        )
        self.base_url = ""
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def queue_name(self) -> str:
        """The RQ queue a worker should listen on."""
        return self.prefix

    @property
    def stats(self) -> dict[str, Any]:
        """What the API counted (created, refused, status, list, stream), live."""
        state: _State = self.app.state.jobs
        return {**state.stats, "high_water": self.store.high_water()}

    def fault(self, kind: str, times: int = 1) -> None:
        """Inject a fault (``lost_answer``, ``drop_stream``) for the next ``times`` requests."""
        self.app.state.jobs.faults.append({"kind": kind, "times": times})

    def start(self) -> JobApi:
        import uvicorn

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.base_url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        config = uvicorn.Config(
            self.app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [sock]},
            name="sandbox-jobs-api",
            daemon=True,
        )
        self._thread.start()
        import time

        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the sandbox job API did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.queue.close()
        if isinstance(self.store, RedisStore):
            self.store.clear()

    def __enter__(self) -> JobApi:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """Serve the API until interrupted."""
    import uvicorn

    parser = argparse.ArgumentParser(prog="python -m nightshift.sandbox.jobs_api")
    parser.add_argument("--port", type=int, default=8766)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--memory", action="store_true", help="no Redis: jobs run on threads")
    parser.add_argument("--quota", type=int, default=5)
    parser.add_argument("--ttl", type=float, default=86400.0)
    parser.add_argument(
        "--unseen-until-taken",
        action="store_true",
        help="a job's reads answer 404 until a worker took it (as Flower's do)",
    )
    args = parser.parse_args(argv)
    api = JobApi(
        redis_url=None if args.memory else args.redis,
        quota=args.quota,
        ttl_s=args.ttl,
        unseen_until_taken=args.unseen_until_taken,
    )
    if not args.memory:
        print(
            f"RQ queue: {api.queue_name} (rq worker -w rq.worker.SimpleWorker "
            f"--url {args.redis} {api.queue_name})"
        )
    uvicorn.run(api.app, host="127.0.0.1", port=args.port, log_level="info")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
