"""The sandbox job API's worker side: what a job does, and the two queues that run it.

A job's spec: ``seconds`` (how long it works), ``fail`` (a permanent error: its text is the
job's error, it goes to the dead-letter queue at once), ``flaky`` (how many tries fail with a
transient error before one succeeds; past the retries it is dead-lettered too). A cancel asked
for a running job is seen within 50 ms.

``RqQueue`` enqueues on RQ (an RQ worker on Redis runs ``rq_run``; RQ's ``Retry`` does the
retries, its failed registry holds the dead ones as well); ``ThreadQueue`` runs the same code on
threads of this process (the demo: no Redis).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from nightshift.sandbox.jobs_store import FINAL, RedisStore, Store, update

__all__ = ["RETRIES", "RqQueue", "ThreadQueue", "TransientJobError", "execute", "rq_run"]

RETRIES = 2  # transient failures retried this often, then the job is dead-lettered


class TransientJobError(Exception):
    """A try that failed in a way worth retrying."""


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _log(store: Store, job_id: str, line: str) -> None:
    record = store.get(job_id)
    if record is not None:
        update(store, job_id, log=[*record.get("log", []), f"{_now()} {line}"])


def execute(store: Store, job_id: str, attempt: int, retries_left: int) -> None:
    """One try of a job; raises TransientJobError when the queue should try again."""
    record = store.get(job_id)
    if record is None or record["status"] in FINAL:
        return  # expired, or cancelled while queued
    if store.cancel_requested(job_id):
        update(store, job_id, status="canceled", ended_at=_now())
        return
    spec = record.get("spec") or {}
    started = record.get("started_at") or _now()
    update(store, job_id, status="started", started_at=started, attempt=attempt)
    _log(store, job_id, f"try {attempt}: working on {spec.get('task', '?')!r}")
    end = time.monotonic() + float(spec.get("seconds", 0.1))
    while time.monotonic() < end:
        if store.cancel_requested(job_id):
            _log(store, job_id, "cancelled")
            update(store, job_id, status="canceled", ended_at=_now())
            return
        time.sleep(min(0.05, max(0.0, end - time.monotonic())))
    if spec.get("fail"):
        _log(store, job_id, f"error: {spec['fail']}")
        update(store, job_id, status="failed", error=str(spec["fail"]), ended_at=_now())
        store.dead_letter(job_id)
        return
    if attempt <= int(spec.get("flaky", 0)):
        why = f"transient failure on try {attempt}"
        _log(store, job_id, why)
        if retries_left > 0:
            update(store, job_id, status="queued", error=why)
            raise TransientJobError(why)
        update(store, job_id, status="failed", error=f"{why}, retries used up", ended_at=_now())
        store.dead_letter(job_id)
        raise TransientJobError(why)
    _log(store, job_id, "done")
    result = {"task": spec.get("task"), "tries": attempt}
    update(store, job_id, status="finished", result=result, error=None, ended_at=_now())


class ThreadQueue:
    """Jobs run on this process's threads, retried here (no Redis)."""

    def __init__(self, store: Store, workers: int = 4) -> None:
        self.store = store
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="sandbox-job")

    def enqueue(self, job_id: str) -> None:
        self._pool.submit(self._run, job_id, 1)

    def _run(self, job_id: str, attempt: int) -> None:
        try:
            execute(self.store, job_id, attempt, RETRIES + 1 - attempt)
        except TransientJobError:
            if attempt <= RETRIES:
                self._pool.submit(self._run, job_id, attempt + 1)

    def cancel_queued(self, job_id: str) -> None:
        """Nothing to take off a thread pool: the try sees the job cancelled."""

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class RqQueue:
    """Jobs enqueued on RQ; an RQ worker (``rq worker``) runs ``rq_run``."""

    def __init__(self, store: RedisStore, redis_url: str) -> None:
        from rq import Queue

        self.store = store
        self.redis_url = redis_url
        self.queue = Queue(store.prefix, connection=store.redis)

    def enqueue(self, job_id: str) -> None:
        from rq import Retry

        self.queue.enqueue(
            rq_run,
            job_id,
            self.store.prefix,
            self.redis_url,
            self.store.ttl_s,
            job_id=job_id,
            retry=Retry(max=RETRIES),
            result_ttl=int(self.store.ttl_s),
            failure_ttl=int(self.store.ttl_s),
        )

    def cancel_queued(self, job_id: str) -> None:
        from rq.job import Job

        try:
            Job.fetch(job_id, connection=self.store.redis).cancel()
        except Exception:  # already taken by the worker: the try sees the cancel flag
            return

    def close(self) -> None:
        """The worker is its own process."""


def rq_run(job_id: str, prefix: str, redis_url: str, ttl_s: float) -> None:
    """What the RQ worker runs: one try, its number from RQ's retries left."""
    from redis import Redis
    from rq import get_current_job

    job: Any = get_current_job()
    left = RETRIES if job is None or job.retries_left is None else int(job.retries_left)
    store = RedisStore(Redis.from_url(redis_url), prefix, ttl_s)
    execute(store, job_id, RETRIES - left + 1, left)
