"""Nights against the sandbox job API (``sandbox/jobs_api.py``): on Redis with an RQ worker, or
in memory; the http backend, a SQLite ledger, the real clocks."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from nightshift.backends.http import HttpBackend
from nightshift.config.loader import parse_catalogue
from nightshift.engine.admission import Admission
from nightshift.engine.events import JobFinished, NightEvent
from nightshift.engine.night import NightParts
from nightshift.engine.outcomes import NightSummary
from nightshift.engine.plan import plan_night
from nightshift.loop import NightLoop
from nightshift.sandbox.jobs_api import JobApi
from nightshift.store.ledger import Ledger
from tests.night_kit import run_night as run_kit_night

ROOT = Path(__file__).resolve().parents[1]
REDIS_URL = os.environ.get("NIGHTSHIFT_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
TOKEN = "night-token-123"
NIGHT = "2030-01-01"

API = """\
    backend: http
    base_url: "{base}"
    submit: {{url: /jobs, body: {body}}}
    auth: {{env: SANDBOX_JOBS_TOKEN}}
    id_path: job_id
    status_url: "/jobs/{{id}}"
    state_path: status
    states: {{queued: [queued], running: [started], succeeded: [finished], failed: [failed],
             cancelled: [canceled, stopped]}}
    result_path: result
    error_path: error
    created_at_path: created_at
    started_at_path: started_at
    finished_at_path: ended_at
    cancel: {{url: "/jobs/{{id}}/cancel"}}
    logs_url: "/jobs/{{id}}/logs"
    request_timeout: 5s
"""


def http_job(label: str, base: str, body: str, extra: str = "") -> str:
    """One http job of the sandbox API; ``body`` in YAML flow style, ``extra`` more lines."""
    return f"  - label: {label}\n" + API.format(base=base, body=body) + extra


def catalogue(jobs: list[str], defaults: str = "") -> str:
    head = "name: http-test\ndefaults: {poll: {initial: 0.2s, max: 0.5s}, stagger: 0s, "
    return head + f"retry_delay: 0.1s{defaults}}}\njobs:\n" + "".join(jobs)


def redis_or_skip() -> str:
    """The test Redis URL, or a skip saying Redis is needed."""
    try:
        from redis import Redis

        Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except Exception as exc:
        pytest.skip(f"needs Redis at {REDIS_URL} (RQ's queue): {type(exc).__name__}: {exc}")
    return REDIS_URL


@contextmanager
def sandbox_api(
    *,
    redis: bool = True,
    quota: int = 5,
    workers: int = 2,
    ttl_s: float = 3600,
    look_s: float = 0.05,
    unseen_until_taken: bool = False,
) -> Iterator[JobApi]:
    """The sandbox API, on Redis with ``workers`` RQ workers (or in memory), stopped after.
    ``unseen_until_taken``: a job's reads answer 404 until a worker took it."""
    url = redis_or_skip() if redis else None
    api = JobApi(
        redis_url=url, quota=quota, tokens={TOKEN: "night"}, ttl_s=ttl_s, workers=workers,
        look_s=look_s, unseen_until_taken=unseen_until_taken,
    )  # fmt: skip
    with api:
        if url is None:
            yield api
        else:
            with rq_workers(api, workers):
                yield api


@contextmanager
def rq_workers(api: JobApi, count: int) -> Iterator[None]:
    """``count`` RQ workers on the API's queue (in processes of their own), stopped after."""
    assert api.redis_url is not None, "RQ workers need the API on Redis"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(count):
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "rq.cli", "worker", "-q", "-w",
                     "rq.worker.SimpleWorker", "--url", api.redis_url, "--path", str(ROOT),
                     api.queue_name],
                    cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )
            )  # fmt: skip
        yield
    finally:
        for proc in procs:
            proc.terminate()  # RQ's warm shutdown: it would wait for the job in hand
        for proc in procs:
            try:
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                proc.terminate()  # a second signal: RQ's cold shutdown, now
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


@dataclass
class Ran:
    """What a night left: its summary, its backend (request counts), its events and ledger."""

    summary: NightSummary
    backend: HttpBackend
    events: list[tuple[datetime, NightEvent]] = field(default_factory=list)
    ledger: Ledger | None = None

    def outcome(self, label: str) -> Any:
        return next(j for j in self.summary.jobs if j.label == label)

    def finished_at(self, label: str) -> datetime:
        """When the night published the job's outcome (the wall clock)."""
        return next(
            at for at, e in self.events if isinstance(e, JobFinished) and e.outcome.label == label
        )


def run_night(
    tmp_path: Path,
    text: str,
    ledger: Ledger | None = None,
    environ: Mapping[str, str] | None = None,
) -> Ran:
    """One night of ``text`` against the API its jobs name; ``environ``: where its ``auth``
    variables are (the sandbox API's token by default)."""
    cat = parse_catalogue(text, tmp_path / "nightshift.yaml")
    jobs = {j.label: j for j in cat.jobs if j.backend == "http"}
    environ = {"SANDBOX_JOBS_TOKEN": TOKEN} if environ is None else environ
    backend = HttpBackend(jobs, environ=environ)
    own = ledger is None
    ledger = ledger or Ledger(f"sqlite:///{tmp_path / 'ledger.db'}", cat.key)
    events: list[tuple[datetime, NightEvent]] = []
    loop = NightLoop("test-night")
    parts = NightParts(
        backends={"http": backend},  # type: ignore[dict-item]
        ledger=ledger,
        admission=Admission(0),
        sinks=[lambda e: events.append((datetime.now(UTC), e))],
        budgets=None,
        poll_hints=None,
        loop=loop,
    )
    try:
        summary = run_kit_night(cat, parts, plan_night(cat), night=NIGHT, run_dir=tmp_path / "run")
    finally:
        loop.close()
        if own:
            ledger.close()
    return Ran(summary, backend, events, None if own else ledger)
