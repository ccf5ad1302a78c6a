"""The recipes of docs/http-backend.md ("Recipes"), each catalogue block run as written (only its
port changes): Celery through Flower's REST API, and an RQ job service behind FastAPI, on the
machine's Redis, with the real http backend and watcher. Each night's worker starts only once
the night has submitted its jobs (a worker that starts late, or workers scaled from zero)."""

from __future__ import annotations

import base64
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from nightshift.engine.outcomes import Outcome
from tests.http_night import Ran, run_night
from tests.prefect_processes import free_port
from tests.support import wait_until

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "http-backend.md"
# databases of these tests' own: each test flushes its own before it starts
CELERY_URL = os.environ.get("NIGHTSHIFT_TEST_CELERY_URL", "redis://127.0.0.1:6379/5")
RQ_URL = os.environ.get("NIGHTSHIFT_TEST_RQ_URL", "redis://127.0.0.1:6379/6")
QUEUE = "nightly"  # the queue both recipes name
OK, RAISES, LONG = ("rollup:orders", "rollup:refunds"), "import:partner-feed", "reindex:search"
FLOWER_USER = "night:s3cret"


def recipe(name: str, port: int) -> str:
    """The doc's yaml block marked ``# recipe: <name>``, its service's port swapped for ``port``."""
    blocks = re.findall(r"^```yaml\n(.*?)^```", DOC.read_text(encoding="utf-8"), re.M | re.S)
    found = [b for b in blocks if b.startswith(f"# recipe: {name}\n")]
    assert len(found) == 1, f"{DOC.name} has {len(found)} yaml blocks marked 'recipe: {name}'"
    port_in_doc = {"celery-flower": 5555, "rq-fastapi": 8000}[name]
    return found[0].replace(f"127.0.0.1:{port_in_doc}", f"127.0.0.1:{port}")


def own_redis(url: str) -> Any:
    """A client of this test's own Redis database, emptied (or a skip: no Redis)."""
    from redis import Redis

    client = Redis.from_url(url, socket_connect_timeout=2)
    try:
        client.ping()
    except Exception as exc:
        pytest.skip(f"needs Redis at {url}: {type(exc).__name__}: {exc}")
    client.flushdb()
    return client


@contextmanager
def process(argv: list[str], log: Path, **env: str) -> Iterator[subprocess.Popen[bytes]]:
    """A service or worker in a process group of its own, its output in ``log``; the group is
    stopped on the way out (TERM, then KILL after 5 s: a warm shutdown waits for its tasks)."""
    with log.open("ab") as out:
        proc = subprocess.Popen(
            argv, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), **env},
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        yield proc
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if proc.poll() is not None:
                break
            os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                continue


def answers(url: str, proc: subprocess.Popen[bytes], log: Path, **kw: Any) -> None:
    """Wait until ``url`` answers 200 (the service is up); fail at once if its process died."""

    def up() -> bool:
        assert proc.poll() is None, f"{proc.args} exited: {log.read_text()[-2000:]}"
        try:
            return httpx.get(url, timeout=2, **kw).status_code == 200
        except httpx.TransportError:
            return False

    wait_until(up, timeout=30, interval=0.1, what=f"{url} answering")


def night_then_workers(
    tmp_path: Path, text: str, environ: dict[str, str], queued: Any, workers: int,
    worker: list[str], **env: str,
) -> Ran:  # fmt: skip
    """The night on a thread; once it has put its 4 jobs in the queue (``queued()``), or ended,
    ``workers`` workers start; the night's end."""
    with ThreadPoolExecutor(1) as pool, ExitStack() as stack:
        night: Future[Ran] = pool.submit(run_night, tmp_path, text, None, environ)
        wait_until(lambda: queued() >= 4 or night.done(), timeout=30, interval=0.05,
                   what="the night's 4 jobs waiting in the queue")  # fmt: skip
        for n in range(workers):
            stack.enter_context(process(worker, tmp_path / f"worker-{n}.log", **env))
        return night.result(timeout=90)


def lines(ran: Ran) -> str:
    return "\n".join(job.line() for job in ran.summary.jobs)


def assert_the_night(ran: Ran) -> None:
    """Two jobs worked, the raising one failed with its error, the long one timed out."""
    for label in OK:
        assert ran.outcome(label).state is Outcome.SUCCEEDED, lines(ran)
    raised = ran.outcome(RAISES)
    assert raised.state is Outcome.FAILED, lines(ran)
    assert "the partner feed is missing" in (raised.detail or ""), lines(ran)
    long = ran.outcome(LONG)
    assert long.state is Outcome.TIMEOUT, lines(ran)
    assert "job timeout 12s" in (long.detail or ""), lines(ran)
    assert "cancel accepted" in (long.detail or ""), lines(ran)


def task_id(ran: Ran, label: str) -> str:
    external_id = ran.outcome(label).external_id
    assert external_id is not None, lines(ran)
    return external_id.split("/", 1)[1]


def test_celery_through_flower_with_a_worker_that_starts_late(tmp_path: Path) -> None:
    redis = own_redis(CELERY_URL)
    port = free_port()
    auth = {"auth": tuple(FLOWER_USER.split(":"))}
    flower = [sys.executable, "-m", "celery", "-A", "tests.recipes.celery_app", "flower",
              "--address=127.0.0.1", f"--port={port}", f"--basic-auth={FLOWER_USER}"]  # fmt: skip
    worker = [sys.executable, "-m", "celery", "-A", "tests.recipes.celery_app", "worker",
              "-E", "-Q", QUEUE, "-c", "2", "--without-mingle", "--without-gossip",
              "-n", f"recipes-{port}@%h"]  # fmt: skip
    env = {"NIGHTSHIFT_TEST_CELERY_URL": CELERY_URL}
    log = tmp_path / "flower.log"
    with process(flower, log, **env) as proc:
        base = f"http://127.0.0.1:{port}"
        answers(f"{base}/healthcheck", proc, log)
        environ = {"FLOWER_AUTH": base64.b64encode(FLOWER_USER.encode()).decode()}
        ran = night_then_workers(
            tmp_path, recipe("celery-flower", port), environ, lambda: redis.llen(QUEUE), 1, worker,
            **env,
        )  # fmt: skip
        assert_the_night(ran)
        # the long task was revoked and terminated at its worker
        info = f"{base}/api/task/info/{task_id(ran, LONG)}"
        wait_until(lambda: httpx.get(info, **auth).json()["state"] == "REVOKED", timeout=15,
                   what="Flower showing the long task REVOKED")  # fmt: skip
        # each job made one task: Flower knows exactly the night's four, none waits in the queue
        seen = httpx.get(f"{base}/api/tasks", params={"taskname": "nightly.work"}, **auth).json()
        assert set(seen) == {task_id(ran, job.label) for job in ran.summary.jobs}, lines(ran)
        assert redis.llen(QUEUE) == 0


def test_an_rq_service_behind_fastapi_with_a_worker_that_starts_late(tmp_path: Path) -> None:
    redis = own_redis(RQ_URL)
    port = free_port()
    service = [sys.executable, "-m", "uvicorn", "tests.recipes.rq_service:app",
               "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
    worker = [sys.executable, "-m", "rq.cli", "worker", "-q", "--url", RQ_URL, QUEUE]
    env = {"JOBS_REDIS_URL": RQ_URL, "JOBS_QUEUE": QUEUE}
    log = tmp_path / "service.log"
    with process(service, log, **env) as proc:
        base = f"http://127.0.0.1:{port}"
        answers(f"{base}/openapi.json", proc, log)
        # two workers: one job at a time each, so the long job holds up only its own
        ran = night_then_workers(
            tmp_path, recipe("rq-fastapi", port), {}, lambda: redis.llen(f"rq:queue:{QUEUE}"), 2,
            worker, **env,
        )  # fmt: skip
        assert_the_night(ran)
        raised = httpx.get(f"{base}/jobs/{task_id(ran, RAISES)}").json()
        assert raised["error"] == "RuntimeError: the partner feed is missing"
        # stopped while it ran (or cancelled, on a machine slow enough that it never started)
        long = f"{base}/jobs/{task_id(ran, LONG)}"
        wait_until(lambda: httpx.get(long).json()["status"] in ("stopped", "canceled"),
                   timeout=15, what="the long job stopped at RQ")  # fmt: skip
        # each job made one RQ job: RQ holds exactly the night's four
        made = {k.decode().removeprefix("rq:job:") for k in redis.scan_iter("rq:job:*")}
        assert {k for k in made if ":" not in k} == {
            task_id(ran, job.label) for job in ran.summary.jobs
        }, lines(ran)
