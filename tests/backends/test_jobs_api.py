"""The sandbox job API itself, on the real Redis and an RQ worker: auth, quota, TTL, retries,
the dead-letter queue."""

from __future__ import annotations

import httpx

from nightshift.sandbox.jobs_store import MemoryStore, Store, update
from tests.http_night import TOKEN, sandbox_api
from tests.support import wait_until

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_auth_quota_and_idempotency() -> None:
    with sandbox_api(quota=2, workers=1) as api, httpx.Client(base_url=api.base_url) as http:
        assert http.post("/jobs", json={"task": "x"}).status_code == 401
        first = http.post("/jobs", json={"task": "a", "seconds": 30}, headers=AUTH)
        assert first.status_code == 201 and first.json()["status"] == "queued"
        again = http.post("/jobs", json={"task": "a"}, headers={**AUTH, "Idempotency-Key": "k1"})
        same = http.post("/jobs", json={"task": "a"}, headers={**AUTH, "Idempotency-Key": "k1"})
        assert same.status_code == 200 and same.json()["job_id"] == again.json()["job_id"]
        full = http.post("/jobs", json={"task": "b"}, headers=AUTH)
        assert full.status_code == 429 and full.headers["Retry-After"] == "1"
        assert "quota of 2" in full.json()["error"]
        for job in (first.json(), again.json()):
            http.post(f"/jobs/{job['job_id']}/cancel", headers=AUTH)
        wait_until(
            lambda: http.post("/jobs", json={"task": "c"}, headers=AUTH).status_code == 201,
            what="a place freed by the cancels",
        )
        assert api.stats["high_water"] == {"night": 2}


def test_records_expire_after_their_ttl_in_redis() -> None:
    with sandbox_api(ttl_s=1.0, workers=1) as api, httpx.Client(base_url=api.base_url) as http:
        job_id = http.post("/jobs", json={"task": "t", "seconds": 0}, headers=AUTH).json()["job_id"]
        wait_until(lambda: api.store.get(job_id) is None, timeout=30, what="the record expired")
        gone = http.get(f"/jobs/{job_id}", headers=AUTH)
        assert gone.status_code == 404 and "expire" in gone.json()["error"]


def test_transient_failures_are_retried_then_dead_lettered() -> None:
    with sandbox_api(workers=1) as api, httpx.Client(base_url=api.base_url) as http:
        job_id = http.post(
            "/jobs", json={"task": "t", "seconds": 0, "flaky": 9}, headers=AUTH
        ).json()["job_id"]
        wait_until(lambda: api.store.dead() == [job_id], timeout=60, what="dead-lettered")
        record = http.get(f"/jobs/{job_id}", headers=AUTH).json()
        assert record["status"] == "failed" and record["attempt"] == 3
        assert "retries used up" in record["error"]
        from rq.registry import FailedJobRegistry

        failed = FailedJobRegistry(api.queue_name, connection=api.store.redis)  # type: ignore[attr-defined]
        wait_until(lambda: job_id in failed.get_job_ids(), what="in RQ's failed registry too")


def _expire_between_read_and_write(store: Store) -> None:
    """The store's record expires just after ``update`` reads it: it must stay gone."""
    store.put({"job_id": "j1", "user": "night", "status": "started"})
    read = store.get

    def get_then_expire(job_id: str) -> dict[str, object] | None:
        record = read(job_id)
        store.expire(job_id)  # its TTL ends between the worker's read and its write
        return record

    store.get = get_then_expire  # type: ignore[method-assign]
    try:
        assert update(store, "j1", status="finished") is None
    finally:
        store.get = read  # type: ignore[method-assign]
    assert store.get("j1") is None, "an expired record came back with the worker's write"


def test_a_record_that_expires_while_the_worker_writes_it_stays_gone() -> None:
    """The worker's write after a read once brought an expired record back (the http backend's
    "record expired" test then saw its job finish instead of lost, on a busy machine)."""
    _expire_between_read_and_write(MemoryStore())
    with sandbox_api(workers=1) as api:
        _expire_between_read_and_write(api.store)
