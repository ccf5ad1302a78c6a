"""The RQ recipe's job service (docs/http-backend.md, "Recipes"): FastAPI in front of an RQ queue,
as a team writes one. Records are RQ's own jobs, on Redis (``JOBS_REDIS_URL``, default database 6)::

    uvicorn tests.recipes.rq_service:app --host 127.0.0.1 --port 8000
    rq worker --url redis://127.0.0.1:6379/6 nightly
"""

from __future__ import annotations

import os
import time
from datetime import datetime
from typing import Any, Literal

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel
from redis import Redis
from rq import Queue
from rq.command import send_stop_job_command
from rq.exceptions import NoSuchJobError
from rq.job import Job, JobStatus

redis = Redis.from_url(os.environ.get("JOBS_REDIS_URL", "redis://127.0.0.1:6379/6"))
queue = Queue(os.environ.get("JOBS_QUEUE", "nightly"), connection=redis)
app = FastAPI(title="nightly jobs")
KEEP_S = 7 * 86400  # finished and failed jobs are kept a week, then RQ drops them (404)


def work(seconds: float = 1.0, fail: str | None = None) -> dict[str, float]:
    """A night's job: works ``seconds``, then raises ``fail`` as its error when one is given."""
    time.sleep(seconds)
    if fail:
        raise RuntimeError(fail)
    return {"slept": seconds}


class NewJob(BaseModel):
    task: Literal["work"]
    seconds: float = 1.0
    fail: str | None = None


def _job(job_id: str) -> Job:
    try:
        return Job.fetch(job_id, connection=redis)
    except NoSuchJobError:
        raise HTTPException(404, f"no job {job_id!r} (never created, or expired)") from None


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at else None


@app.post("/jobs", status_code=201)
def create(new: NewJob) -> dict[str, Any]:
    job = queue.enqueue(work, new.seconds, new.fail, result_ttl=KEEP_S, failure_ttl=KEEP_S)
    return {"job_id": job.id, "status": job.get_status()}


@app.get("/jobs/{job_id}")
def read(job_id: str) -> dict[str, Any]:
    job = _job(job_id)
    error = job.exc_info.strip().splitlines()[-1] if job.exc_info else None
    return {
        "job_id": job.id,
        "status": job.get_status(),
        "result": job.return_value(),
        "error": error,  # the exception's last line: "RuntimeError: ..."
        "enqueued_at": _iso(job.enqueued_at),
        "started_at": _iso(job.started_at),
        "ended_at": _iso(job.ended_at),
    }


@app.post("/jobs/{job_id}/cancel")
def cancel(job_id: str) -> dict[str, Any]:
    job = _job(job_id)
    status = job.get_status()
    if status == JobStatus.STARTED:
        send_stop_job_command(redis, job.id)  # the worker kills the work horse: "stopped"
    elif status in (JobStatus.QUEUED, JobStatus.DEFERRED, JobStatus.SCHEDULED):
        job.cancel()
    else:
        raise HTTPException(409, f"job {job_id!r} is already {status.value}")
    return {"job_id": job.id, "status": job.get_status()}
