"""An in-memory backend that plays a script of states: the local implementation for loop tests."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

from nightshift.backends.base import ExternalState, JobSpec, JobStatus
from nightshift.errors import BackendError


@dataclass
class ScriptedBackend:
    """Each status call on a job returns the next scripted state (or raises the next error)."""

    name: str = "scripted"
    scripts: dict[str, list[ExternalState | BackendError]] = field(default_factory=dict)
    calls: Counter[str] = field(default_factory=Counter)
    cancelled: list[str] = field(default_factory=list)
    many_calls: int = 0
    single_calls: int = 0
    batch: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    submitted: list[str] = field(default_factory=list)
    cancel_error: BackendError | None = None

    def submit(self, spec: JobSpec) -> str:
        self.submitted.append(spec.label)
        return spec.label

    def status(self, external_id: str) -> JobStatus:
        self.single_calls += 1
        return self._next(external_id)

    def _next(self, external_id: str) -> JobStatus:
        with self._lock:
            script = self.scripts[external_id]
            step = script[min(self.calls[external_id], len(script) - 1)]
            self.calls[external_id] += 1
        if isinstance(step, BackendError):
            raise step
        return JobStatus(state=step, exit_code=0 if step is ExternalState.SUCCEEDED else None)

    def cancel(self, external_id: str) -> None:
        self.cancelled.append(external_id)
        if self.cancel_error is not None:
            raise self.cancel_error

    def logs(self, external_id: str, tail: int = 40) -> str:
        return f"log of {external_id}\n"


class BatchScriptedBackend(ScriptedBackend):
    """The same, but answering many jobs in one call."""

    def status_many(self, ids: list[str]) -> dict[str, JobStatus]:
        self.many_calls += 1
        return {i: self._next(i) for i in ids}
