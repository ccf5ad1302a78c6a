"""What the http backend keeps of each job's API, its external ids and its errors."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from nightshift.backends.http.rules import Answer, Paths, StateMap, fill_url
from nightshift.errors import (
    BackendError,
    PermanentBackendError,
    TransientBackendError,
    UnknownJobError,
)

__all__ = [
    "Api",
    "LostJobError",
    "StreamDropped",
    "Tokens",
    "error_of",
    "split_id",
]


class LostJobError(UnknownJobError):
    """The API answers 404 for a job the night submitted: not visible yet, or its record
    expired (the watcher tells the two apart by whether the job was ever seen)."""


class StreamDropped(TransientBackendError):
    """A job's event stream ended before the job did."""


class Api:
    """One job's API as the backend uses it (from the catalogue's http job)."""

    def __init__(self, label: str, job: Any) -> None:
        self.label = label
        self.job = job
        self.states = StateMap.of(job.states.model_dump())
        self.paths = Paths(
            state=job.state_path,
            id=job.id_path,
            result=job.result_path,
            error=job.error_path,
            cost=job.cost_path,
            created_at=job.created_at_path,
            started_at=job.started_at_path,
            finished_at=job.finished_at_path,
        )

    def url(self, template: str, **values: str) -> str:
        filled = fill_url(template, {"label": self.label, **values})
        if filled.startswith("/"):
            return str(self.job.base_url).rstrip("/") + filled
        return filled


class Tokens:
    """A job's auth header: its token from an env var (read at each request) or a Prefect Secret
    block (read once). The token is never in a message."""

    def __init__(self, environ: Mapping[str, str], secret: Callable[[str], str]) -> None:
        self._environ = environ
        self._secret = secret
        self._secrets: dict[str, str] = {}

    def ready(self, api: Api) -> bool:
        """Whether ``api``'s header needs no Prefect call (no auth, an env var, a block read)."""
        auth = api.job.auth
        return auth is None or auth.env is not None or auth.secret_block in self._secrets

    def headers(self, api: Api) -> dict[str, str]:
        """The auth header of ``api``'s requests (none without ``auth``)."""
        auth = api.job.auth
        if auth is None:
            return {}
        if auth.env is not None:
            token = self._environ.get(auth.env)
            if not token:
                raise PermanentBackendError(
                    f"job {api.label!r}: the environment variable {auth.env} (its auth) is not set"
                )
        else:
            if auth.secret_block not in self._secrets:
                try:
                    self._secrets[auth.secret_block] = self._secret(auth.secret_block)
                except Exception as exc:  # a missing block, an unreachable Prefect API
                    raise PermanentBackendError(
                        f"job {api.label!r}: the Secret block {auth.secret_block!r} (its auth) "
                        f"could not be read: {type(exc).__name__}"
                    ) from None
            token = self._secrets[auth.secret_block]
        value = f"{auth.scheme} {token}" if auth.scheme else token
        return {auth.header: value}


def split_id(external_id: str) -> tuple[str, str]:
    """``label/id`` -> (label, id); PermanentBackendError when it is not one of ours."""
    label, sep, job_id = external_id.partition("/")
    if not sep or not label or not job_id:
        raise PermanentBackendError(f"not an http job id (label/id): {external_id!r}")
    return label, job_id


def error_of(answer: Answer) -> BackendError:
    if answer.kind == "expired":
        return LostJobError(answer.message)
    if answer.kind in ("transient", "backpressure"):
        return TransientBackendError(answer.message)
    return PermanentBackendError(answer.message)
