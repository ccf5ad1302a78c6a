"""The http backend's requests and errors, on httpx's mock transport (no network)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from nightshift.backends.base import JobSpec
from nightshift.backends.http import HttpBackend, LostJobError
from nightshift.config.loader import parse_catalogue
from nightshift.engine.jobspec import job_spec
from nightshift.errors import PermanentBackendError, TransientBackendError

TOKEN = "tok-XYZ-123"
CATALOGUE = """\
jobs:
  - label: a
    backend: http
    base_url: "http://api.test"
    submit: {url: /jobs, body: {task: "{label}", key: "{key}"}}
    auth: {%s}
    id_path: data.id
    status_url: "/jobs/{id}"
    state_path: data.status
    states: {queued: [q], running: [r], succeeded: [ok], failed: [bad]}
    error_path: data.error
    cancel: {url: "/jobs/{id}/cancel"}
"""


def _backend(handler: Any, auth: str = "env: JOBS_TOKEN", **kw: Any) -> tuple[HttpBackend, Any]:
    catalogue = parse_catalogue(CATALOGUE % auth)
    backend = HttpBackend(
        {"a": catalogue.job("a")},
        transport=httpx.MockTransport(handler),
        environ={"JOBS_TOKEN": TOKEN},
        sleep=lambda _s: None,
        **kw,
    )
    return backend, catalogue


def test_submit_sends_the_body_the_auth_and_the_key_as_idempotency_key() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(201, json={"data": {"id": "j1", "status": "q"}})

    backend, catalogue = _backend(handler)
    assert backend.submit(job_spec(catalogue, "a", "cat/n/a/1")) == "a/j1"
    (request,) = seen
    assert request.url == "http://api.test/jobs"
    assert json.loads(request.content) == {"task": "a", "key": "cat/n/a/1"}
    assert request.headers["authorization"] == f"Bearer {TOKEN}"
    assert request.headers["idempotency-key"] == "cat/n/a/1"


def test_a_secret_block_is_read_once_and_a_missing_env_var_is_named_not_shown() -> None:
    reads: list[str] = []

    def secret(name: str) -> str:
        reads.append(name)
        return TOKEN

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["x-key"] == TOKEN
        return httpx.Response(200, json={"data": {"status": "r"}})

    backend, _ = _backend(handler, "secret_block: jobs, header: X-Key, scheme: ''", secret=secret)
    backend.status("a/j1")
    backend.status("a/j1")
    assert reads == ["jobs"]
    missing, catalogue = _backend(handler, "env: NOT_SET_ANYWHERE")
    with pytest.raises(PermanentBackendError, match=r"NOT_SET_ANYWHERE.*is not set") as info:
        missing.submit(job_spec(catalogue, "a", "k"))
    assert TOKEN not in str(info.value)


def test_429_is_waited_out_5xx_is_transient_4xx_permanent_with_its_message() -> None:
    answers = [
        httpx.Response(429, headers={"Retry-After": "3"}, json={"error": "quota"}),
        httpx.Response(429, headers={"Retry-After": "2"}),
        httpx.Response(201, json={"data": {"id": "j2"}}),
    ]
    slept: list[float] = []
    catalogue = parse_catalogue(CATALOGUE % "env: JOBS_TOKEN")
    backend = HttpBackend(
        {"a": catalogue.job("a")},
        transport=httpx.MockTransport(lambda _r: answers.pop(0)),
        environ={"JOBS_TOKEN": TOKEN},
        sleep=slept.append,
    )
    assert backend.submit(JobSpec("a", "http", {})) == "a/j2" and slept == [3.0, 2.0]

    def server_error(_r: httpx.Request) -> httpx.Response:
        return httpx.Response(502, text="bad gateway")

    flaky, _ = _backend(server_error)
    with pytest.raises(TransientBackendError, match="502"):
        flaky.status("a/j1")

    def refused(_r: httpx.Request) -> httpx.Response:
        return httpx.Response(422, json={"detail": "task must not be empty"})

    bad, catalogue = _backend(refused)
    with pytest.raises(PermanentBackendError, match="HTTP 422: task must not be empty"):
        bad.submit(job_spec(catalogue, "a", "k"))


def test_a_404_on_a_known_id_is_a_lost_job_and_a_failed_job_carries_the_error_text() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.startswith("/jobs/gone"):
            return httpx.Response(404, json={"error": "no such job"})
        return httpx.Response(200, json={"data": {"status": "bad", "error": "OOM in step 3"}})

    backend, _ = _backend(handler)
    with pytest.raises(LostJobError, match=r"does not know the job: HTTP 404: no such job"):
        backend.status("a/gone")
    with pytest.raises(LostJobError):
        backend.cancel("a/gone")
    assert backend.status("a/j1").detail == "OOM in step 3"
    with pytest.raises(PermanentBackendError, match="not an http job id"):
        backend.status("j1")


def test_an_unmapped_state_fails_naming_it() -> None:
    backend, _ = _backend(lambda _r: httpx.Response(200, json={"data": {"status": "weird"}}))
    with pytest.raises(PermanentBackendError, match="'weird' is not mapped"):
        backend.status("a/j1")
