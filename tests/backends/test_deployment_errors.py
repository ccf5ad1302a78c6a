"""Prefect client errors as the deployment backend reports them: which are worth a retry."""

from __future__ import annotations

import httpx
import pytest

from nightshift.backends.deployment_client import translate
from nightshift.errors import PermanentBackendError, TransientBackendError

REQUEST = httpx.Request("POST", "http://prefect.test/api/deployments/x/create_flow_run")


def status_error(code: int, body: object) -> httpx.HTTPStatusError:
    response = httpx.Response(code, json=body, request=REQUEST)
    return httpx.HTTPStatusError(f"HTTP {code}", request=REQUEST, response=response)


@pytest.mark.parametrize("code", [408, 429, 500, 502, 503])
def test_busy_or_broken_servers_are_transient(code: int) -> None:
    error = translate(status_error(code, {"detail": "try later"}), "creating a run")
    assert isinstance(error, TransientBackendError)
    assert str(error) == f"creating a run: HTTP {code}: try later"


def test_a_refused_request_is_permanent_in_the_server_s_words() -> None:
    body = {"detail": "Error creating flow run: Validation failed for field 'n'.\n  Failure"}
    error = translate(status_error(409, body), "creating a run of 'f/d'")
    assert isinstance(error, PermanentBackendError)
    assert str(error) == (
        "creating a run of 'f/d': HTTP 409: Error creating flow run: "
        "Validation failed for field 'n'. Failure"
    )
    assert isinstance(translate(status_error(401, "nope"), "x"), PermanentBackendError)


def test_network_trouble_is_transient_and_ours_pass_through() -> None:
    lost = translate(httpx.ReadTimeout("timed out", request=REQUEST), "creating a run")
    assert isinstance(lost, TransientBackendError)
    assert str(lost) == "creating a run: ReadTimeout: timed out"
    refused = translate(httpx.ConnectError("refused"), "reading")
    assert isinstance(refused, TransientBackendError)
    ours = PermanentBackendError("the deployment backend is closed")
    assert translate(ours, "reading") is ours
    odd = translate(ValueError("bad"), "reading")
    assert (type(odd), str(odd)) == (PermanentBackendError, "reading: ValueError: bad")
