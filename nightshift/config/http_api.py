"""How a catalogue declares a job of an HTTP job API (``backend: http``), and its checks.

Every URL is a template: ``{id}`` (the job's id at the API), ``{ids}`` (many, comma-separated),
``{key}`` (the attempt's submission key), ``{label}``. A URL may start with ``/`` when the job
names a ``base_url``.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from nightshift.config.durations import parse_duration
from nightshift.errors import CatalogueProblem

__all__ = [
    "PATH_PATTERN",
    "HttpApiFields",
    "HttpAuth",
    "HttpListing",
    "HttpRequest",
    "HttpStates",
    "http_problems",
    "placeholders",
]

# a dotted path into a JSON answer: ``job_id``, ``data.job.id``, ``jobs.0.status``
PATH_PATTERN = r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$"
_PLACEHOLDER = re.compile(r"\{([A-Za-z_]+)\}")

DottedPath = Annotated[str, Field(pattern=PATH_PATTERN)]
EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
_KNOWN = {"id", "ids", "key", "label"}
# header names that carry a credential: they belong in `auth`, never in the file
_SECRET_HEADERS = {"authorization", "proxy-authorization", "x-api-key", "api-key", "cookie"}


def placeholders(template: str) -> set[str]:
    """The ``{name}`` placeholders a URL or body string uses."""
    return set(_PLACEHOLDER.findall(template))


def _url(value: str, needs: set[str], allowed: set[str]) -> str:
    """A URL template: http(s):// or a path under base_url, with the placeholders it needs."""
    if not (value.startswith(("http://", "https://")) or value.startswith("/")):
        raise ValueError("must be an http(s):// URL (or a /path under base_url)")
    used = placeholders(value)
    if unknown := sorted(used - allowed):
        names = ", ".join(f"{{{p}}}" for p in sorted(allowed))
        raise ValueError(f"unknown placeholder {{{unknown[0]}}}; use {names}")
    if missing := sorted(needs - used):
        what = {"id": "the job's id", "ids": "the jobs' ids", "key": "the submission key"}
        raise ValueError(f"must contain {{{missing[0]}}} (where {what[missing[0]]} goes)")
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HttpRequest(_Strict):
    """The request that creates a job: method, URL, JSON body and headers."""

    method: Literal["POST", "PUT", "PATCH", "GET"] = "POST"
    url: str
    # any JSON; strings may use {label} and {key}
    body: Any = None
    headers: dict[str, str] = {}

    @field_validator("method", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        return _url(value, set(), {"key", "label"})

    @field_validator("headers")
    @classmethod
    def _no_credentials(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if name.lower() in _SECRET_HEADERS:
                raise ValueError(
                    f"header {name!r} carries a credential: name it in `auth` (an env var or a "
                    "Prefect Secret block), never in the catalogue"
                )
        return value


class HttpAction(_Strict):
    """A request about one job (cancel): method and URL with ``{id}``."""

    method: Literal["POST", "DELETE", "PUT", "PATCH"] = "POST"
    url: str

    @field_validator("method", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        return _url(value, {"id"}, {"id", "label"})


class HttpListing(_Strict):
    """A GET that answers for many jobs: the URL, where its list is, where each job's id is."""

    url: str
    items_path: DottedPath | None = None  # None: the answer is the list
    id_path: DottedPath | None = None  # None: the job's own id_path


class HttpList(HttpListing):
    """Many jobs by id in one call: the URL has ``{ids}`` (comma-separated)."""

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        return _url(value, {"ids"}, {"ids", "label"})


class HttpLookup(HttpListing):
    """The job created with a submission key: the URL has ``{key}``."""

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        return _url(value, {"key"}, {"key", "label"})


class HttpAuth(_Strict):
    """Where the token comes from (an env var or a Prefect Secret block) and how it is sent."""

    env: EnvName | None = None
    secret_block: str | None = Field(None, min_length=1)
    header: str = Field("Authorization", min_length=1)
    scheme: str = "Bearer"  # "" sends the token as it is

    @model_validator(mode="after")
    def _one_source(self) -> HttpAuth:
        if (self.env is None) == (self.secret_block is None):
            raise ValueError("name exactly one of env (a variable) or secret_block")
        return self


class HttpStates(_Strict):
    """The API's state values for each of ours; an answer with a value in none is an error."""

    queued: list[str] = []
    running: list[str] = []
    succeeded: list[str] = Field(min_length=1)
    failed: list[str] = Field(min_length=1)
    cancelled: list[str] = []

    @model_validator(mode="after")
    def _each_once(self) -> HttpStates:
        seen: dict[str, str] = {}
        for ours in ("queued", "running", "succeeded", "failed", "cancelled"):
            for value in getattr(self, ours):
                if not str(value).strip():
                    raise ValueError(f"{ours} lists an empty state value")
                if (first := seen.get(str(value).lower())) is not None:
                    raise ValueError(f"state value {value!r} is mapped to both {first} and {ours}")
                seen[str(value).lower()] = ours
        return self


def _positive_duration(value: Any) -> float:
    seconds = parse_duration(value)
    if seconds <= 0:
        raise ValueError("must be more than 0")
    return seconds


class HttpApiFields(_Strict):
    """A job of an HTTP job API: how it is created, read, listed, cancelled and streamed."""

    base_url: str | None = Field(None, pattern=r"^https?://[^/\s]+")
    submit: HttpRequest
    auth: HttpAuth | None = None
    id_path: DottedPath
    status_url: str
    state_path: DottedPath
    states: HttpStates
    result_path: DottedPath | None = None
    error_path: DottedPath | None = None
    cost_path: DottedPath | None = None  # what the job cost, in USD, in its final answer
    created_at_path: DottedPath | None = None
    started_at_path: DottedPath | None = None
    finished_at_path: DottedPath | None = None
    cancel: HttpAction | None = None
    list: HttpList | None = None
    lookup: HttpLookup | None = None  # finds the job of a lost create answer
    logs_url: str | None = None
    stream_url: str | None = None  # Server-Sent Events, each event's data a job's answer
    request_timeout: Annotated[float, Field(gt=0)] = 30.0
    # how long a create waits out the API's 429s (its quota full) before it counts as a failure
    quota_wait: Annotated[float, Field(gt=0)] = 1800.0

    @field_validator("request_timeout", "quota_wait", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return _positive_duration(value)

    @field_validator("status_url", "logs_url", "stream_url")
    @classmethod
    def _id_url(cls, value: str | None) -> str | None:
        return None if value is None else _url(value, {"id"}, {"id", "label"})


def _urls(job: Any) -> list[tuple[tuple[str, ...], str]]:
    """Every URL of an http job, with where it is in the job."""
    out = [(("submit", "url"), job.submit.url), (("status_url",), job.status_url)]
    for name in ("cancel", "list", "lookup"):
        part = getattr(job, name)
        if part is not None:
            out.append(((name, "url"), part.url))
    for name in ("logs_url", "stream_url"):
        if getattr(job, name) is not None:
            out.append(((name,), getattr(job, name)))
    return out


def http_problems(catalogue: Any, lines: dict[tuple[Any, ...], int]) -> list[CatalogueProblem]:
    """What one http job's fields can't mean together: a /path with no base_url."""
    out: list[CatalogueProblem] = []
    for i, job in enumerate(catalogue.jobs):
        if job.backend != "http" or job.base_url is not None:
            continue
        for at, url in _urls(job):
            if url.startswith("/"):
                line = lines.get(("jobs", i, *at)) or lines.get(("jobs", i))
                message = "a /path needs the job's base_url (or give a full http(s):// URL)"
                out.append(CatalogueProblem(message, line, job.label, ".".join(at)))
    return out
