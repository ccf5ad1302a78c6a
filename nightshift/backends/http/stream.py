"""A job's Server-Sent Events as statuses: what ``HttpBackend.stream`` reads."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Mapping

import httpx

from nightshift.backends.base import JobStatus
from nightshift.backends.http.api import Api, StreamDropped
from nightshift.backends.http.rules import SseParser, classify_answer, to_status

__all__ = ["stream_statuses"]


async def stream_statuses(
    client: httpx.AsyncClient, api: Api, url: str, headers: Mapping[str, str], external_id: str
) -> AsyncGenerator[JobStatus, None]:
    """The job's statuses as its API streams them, up to its final one.

    Ends with ``StreamDropped`` when the stream ends (or fails) before the job does; every
    event's data is one answer of the job (as ``status_url`` gives it), others are skipped.
    """
    try:
        async with client.stream("GET", url, headers=dict(headers)) as response:
            if response.status_code != 200:
                body = (await response.aread()).decode("utf-8", "replace")
                answer = classify_answer(response.status_code, body, response.headers)
                raise StreamDropped(f"stream of {external_id}: {answer.message}")
            parser = SseParser()
            async for line in response.aiter_lines():
                event = parser.feed(line.rstrip("\r\n"))
                if event is None or not event.data:
                    continue
                try:
                    status = to_status(json.loads(event.data), api.paths, api.states)
                except ValueError:
                    continue  # not a job's answer (a progress note): the next one may be
                yield status
                if status.state.final:
                    return
    except httpx.HTTPError as exc:
        raise StreamDropped(f"stream of {external_id}: {type(exc).__name__}: {exc}") from None
    raise StreamDropped(f"stream of {external_id} ended before the job did")
