"""Where the sandbox job API keeps its jobs: Redis (with RQ) or memory (the demo), one interface.

A record is a JSON object ``{job_id, status, user, key, spec, result, error, created_at,
started_at, ended_at, attempt, log}``; it expires ``ttl_s`` after its last change, as a real job
API's records do. Each user's in-flight jobs (queued or started) are a set: a create that would
make it larger than the quota is refused (429) atomically, and the most ever in flight per user
is kept for tests to check.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Protocol

__all__ = ["FINAL", "MemoryStore", "RedisStore", "Store"]

FINAL = frozenset({"finished", "failed", "canceled", "stopped"})

# KEYS: in-flight set, high-water hash; ARGV: job id, quota, user
_ADMIT = """
if redis.call('SCARD', KEYS[1]) >= tonumber(ARGV[2]) then return -1 end
redis.call('SADD', KEYS[1], ARGV[1])
local n = redis.call('SCARD', KEYS[1])
local top = tonumber(redis.call('HGET', KEYS[2], ARGV[3]) or '0')
if n > top then redis.call('HSET', KEYS[2], ARGV[3], n) end
return n
"""


class Store(Protocol):
    """What the API and the worker need of a job store."""

    ttl_s: float

    def admit(self, job_id: str, user: str, quota: int) -> bool: ...
    def release(self, job_id: str, user: str) -> None: ...
    def put(self, record: dict[str, Any]) -> None: ...
    def replace(self, record: dict[str, Any]) -> bool: ...
    def get(self, job_id: str) -> dict[str, Any] | None: ...
    def claim_key(self, key: str, job_id: str) -> str | None: ...
    def by_key(self, key: str) -> str | None: ...
    def expire(self, job_id: str) -> None: ...
    def request_cancel(self, job_id: str) -> None: ...
    def cancel_requested(self, job_id: str) -> bool: ...
    def dead_letter(self, job_id: str) -> None: ...
    def dead(self) -> list[str]: ...
    def jobs(self) -> list[str]: ...
    def high_water(self) -> dict[str, int]: ...


def update(store: Store, job_id: str, **fields: Any) -> dict[str, Any] | None:
    """Change a record's fields (a record gone is left gone, even one that expires between the
    read and the write); the in-flight set follows."""
    record = store.get(job_id)
    if record is None:
        return None
    record.update(fields)
    if not store.replace(record):
        return None
    if record["status"] in FINAL:
        store.release(job_id, record["user"])
    return record


class MemoryStore:
    """Records in a dict, behind a lock (the demo's in-process queue)."""

    def __init__(self, ttl_s: float = 86400.0) -> None:
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        self._records: dict[str, tuple[float, str]] = {}
        self._keys: dict[str, str] = {}
        self._flight: dict[str, set[str]] = {}
        self._top: dict[str, int] = {}
        self._cancel: set[str] = set()
        self._dead: list[str] = []

    def admit(self, job_id: str, user: str, quota: int) -> bool:
        with self._lock:
            mine = self._flight.setdefault(user, set())
            if len(mine) >= quota:
                return False
            mine.add(job_id)
            self._top[user] = max(self._top.get(user, 0), len(mine))
            return True

    def release(self, job_id: str, user: str) -> None:
        with self._lock:
            self._flight.get(user, set()).discard(job_id)

    def put(self, record: dict[str, Any]) -> None:
        with self._lock:
            self._records[record["job_id"]] = (time.time() + self.ttl_s, json.dumps(record))

    def replace(self, record: dict[str, Any]) -> bool:
        """``put`` only if the record is still there (not expired): False, left gone, if not."""
        with self._lock:
            found = self._records.get(record["job_id"])
            if found is None or found[0] < time.time():
                return False
            self._records[record["job_id"]] = (time.time() + self.ttl_s, json.dumps(record))
            return True

    def get(self, job_id: str) -> dict[str, Any] | None:
        with self._lock:
            found = self._records.get(job_id)
            if found is None or found[0] < time.time():
                self._records.pop(job_id, None)
                return None
            loaded: dict[str, Any] = json.loads(found[1])
            return loaded

    def claim_key(self, key: str, job_id: str) -> str | None:
        with self._lock:
            held = self._keys.get(key)
            if held is not None and held in self._records:
                return held
            self._keys[key] = job_id
            return None

    def by_key(self, key: str) -> str | None:
        held = self._keys.get(key)
        return held if held is not None and self.get(held) is not None else None

    def expire(self, job_id: str) -> None:
        with self._lock:
            self._records.pop(job_id, None)

    def request_cancel(self, job_id: str) -> None:
        with self._lock:
            self._cancel.add(job_id)

    def cancel_requested(self, job_id: str) -> bool:
        return job_id in self._cancel

    def dead_letter(self, job_id: str) -> None:
        with self._lock:
            self._dead.append(job_id)

    def dead(self) -> list[str]:
        return list(self._dead)

    def jobs(self) -> list[str]:
        with self._lock:
            return list(self._records)

    def high_water(self) -> dict[str, int]:
        return dict(self._top)


class RedisStore:
    """Records in Redis under one prefix (each sandbox API its own), expiring by TTL."""

    def __init__(self, redis: Any, prefix: str, ttl_s: float = 86400.0) -> None:
        self.redis = redis
        self.prefix = prefix
        self.ttl_s = ttl_s
        self._admit = redis.register_script(_ADMIT)

    def _k(self, *parts: str) -> str:
        return ":".join([self.prefix, *parts])

    def _ttl(self) -> int:
        return max(1, int(self.ttl_s * 1000))

    def admit(self, job_id: str, user: str, quota: int) -> bool:
        keys = [self._k("inflight", user), self._k("top")]
        return int(self._admit(keys=keys, args=[job_id, quota, user])) > 0

    def release(self, job_id: str, user: str) -> None:
        self.redis.srem(self._k("inflight", user), job_id)

    def put(self, record: dict[str, Any]) -> None:
        self.redis.set(self._k("job", record["job_id"]), json.dumps(record), px=self._ttl())
        self.redis.sadd(self._k("all"), record["job_id"])

    def replace(self, record: dict[str, Any]) -> bool:
        """``put`` only if the record is still there (SET XX): False, left gone, if not."""
        key = self._k("job", record["job_id"])
        return bool(self.redis.set(key, json.dumps(record), px=self._ttl(), xx=True))

    def get(self, job_id: str) -> dict[str, Any] | None:
        raw = self.redis.get(self._k("job", job_id))
        return None if raw is None else json.loads(raw)

    def claim_key(self, key: str, job_id: str) -> str | None:
        if self.redis.set(self._k("key", key), job_id, nx=True, px=self._ttl()):
            return None
        held = self.redis.get(self._k("key", key))
        return None if held is None else held.decode()

    def by_key(self, key: str) -> str | None:
        held = self.redis.get(self._k("key", key))
        if held is None or self.get(held.decode()) is None:
            return None
        return str(held.decode())

    def expire(self, job_id: str) -> None:
        self.redis.delete(self._k("job", job_id))

    def request_cancel(self, job_id: str) -> None:
        self.redis.set(self._k("cancel", job_id), "1", px=self._ttl())

    def cancel_requested(self, job_id: str) -> bool:
        return bool(self.redis.exists(self._k("cancel", job_id)))

    def dead_letter(self, job_id: str) -> None:
        self.redis.rpush(self._k("dead"), job_id)

    def dead(self) -> list[str]:
        return [x.decode() for x in self.redis.lrange(self._k("dead"), 0, -1)]

    def jobs(self) -> list[str]:
        ids = sorted(x.decode() for x in self.redis.smembers(self._k("all")))
        return [i for i in ids if self.redis.exists(self._k("job", i))]

    def high_water(self) -> dict[str, int]:
        return {k.decode(): int(v) for k, v in self.redis.hgetall(self._k("top")).items()}

    def clear(self) -> None:
        """Delete every key under the prefix (a test's clean-up)."""
        for key in self.redis.scan_iter(match=f"{self.prefix}:*"):
            self.redis.delete(key)
