"""The deployment backend's Prefect client, and Prefect's errors as ours."""

from __future__ import annotations

from typing import Any

import httpx

from nightshift.errors import BackendError, PermanentBackendError, TransientBackendError

__all__ = ["detail", "open_client", "translate"]


def open_client(api_url: str | None, httpx_settings: dict[str, Any]) -> Any:
    """An entered SyncPrefectClient: of ``api_url`` (with the night's PREFECT_API_KEY or
    PREFECT_API_AUTH_STRING), else of the night's own API, the temporary server included."""
    from prefect.client.orchestration import SyncPrefectClient, get_client
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_KEY

    if api_url:
        client = SyncPrefectClient(
            api_url,
            auth_string=PREFECT_API_AUTH_STRING.value(),
            api_key=PREFECT_API_KEY.value(),
            httpx_settings=dict(httpx_settings),
        )
    else:
        # always a dict, so never a flow context's client (closed with its run)
        client = get_client(httpx_settings=dict(httpx_settings), sync_client=True)
    client.__enter__()
    return client


def detail(response: httpx.Response) -> str:
    """The server's own words for a refused request (FastAPI's ``detail``), one line."""
    try:
        body = response.json()
    except ValueError:
        body = response.text
    found = body.get("detail", body) if isinstance(body, dict) else body
    return " ".join(str(found).split())[:300]


def translate(exc: Exception, what: str) -> BackendError:
    """A Prefect client error as ours: 408/429/5xx and network trouble are transient."""
    from prefect.exceptions import ObjectNotFound

    if isinstance(exc, BackendError):
        return exc  # ours already (a closed backend)
    if isinstance(exc, ObjectNotFound):
        return PermanentBackendError(f"{what}: not found")
    if isinstance(exc, httpx.HTTPStatusError):
        code = exc.response.status_code
        text = f"{what}: HTTP {code}: {detail(exc.response)}"
        if code in (408, 429) or code >= 500:
            return TransientBackendError(text)
        return PermanentBackendError(text)
    if isinstance(exc, httpx.TransportError):
        return TransientBackendError(f"{what}: {type(exc).__name__}: {exc}")
    return PermanentBackendError(f"{what}: {type(exc).__name__}: {exc}")
