"""Jobs of an HTTP job API, declared in the catalogue (``backend: http``), over httpx.

``submit`` sends the job's request (its body with ``{label}``/``{key}`` filled in, the attempt's
submission key also as an ``Idempotency-Key`` header) and reads the id at ``id_path``; the
external id is ``label/id`` so any process can find the job's API again. ``status`` reads
``status_url``; ``status_many`` a ``list`` URL when the API has one; ``cancel``, ``logs`` and
``stream`` (Server-Sent Events) when declared. What each answer means is ``rules``: a 429 is
backpressure (waited out, not a failure), 5xx and timeouts are transient, 404 on a known id is a
record expired at the API (the job is lost, never submitted again), other 4xx are permanent.

A create whose answer was lost (a timeout, a 5xx) is never repeated blindly: with a ``lookup``
URL the job is looked for by its key (one: re-attached, none: the retry looks again first,
several: failed, a duplicate may exist); without one the retry sends the same Idempotency-Key.
The token (env var or Secret block) is read when a request needs it and never logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any

import httpx

from nightshift.backends.base import JobSpec, JobStatus
from nightshift.backends.http.api import (
    Api,
    LostJobError,
    StreamDropped,
    Tokens,
    error_of,
    split_id,
)
from nightshift.backends.http.rules import Answer, classify_answer, extract, fill, to_status
from nightshift.backends.http.stream import stream_statuses
from nightshift.backends.submission import resume_since, submission_key
from nightshift.errors import (
    BackendError,
    CannotCancelError,
    PermanentBackendError,
    TransientBackendError,
)
from nightshift.secret_blocks import read_secret_block

__all__ = ["HttpBackend", "LostJobError", "StreamDropped"]

STREAM_SILENCE_S = 60.0  # a stream with no line for this long counts as dropped
READ_PATIENCE_S = 30.0  # a read waits out 429s this long (it holds a status thread meanwhile)


class HttpBackend:
    """Runs jobs on HTTP job APIs; ``jobs`` is label -> the catalogue's http job."""

    name = "http"

    def __init__(
        self,
        jobs: Mapping[str, Any],
        *,
        transport: httpx.BaseTransport | None = None,
        async_transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        environ: Mapping[str, str] = os.environ,
        secret: Callable[[str], str] = read_secret_block,
    ) -> None:
        self.apis = {label: Api(label, job) for label, job in jobs.items()}
        self._transport = transport
        self._async_transport = async_transport
        self._sleep = sleep
        self._tokens = Tokens(environ, secret)
        self._lock = threading.Lock()
        self._client: httpx.Client | None = None
        self._aclient: httpx.AsyncClient | None = None
        self._closed = False
        # requests sent, by kind (creating, reading, listing, looking, cancelling, stream)
        self.calls: dict[str, int] = {}

    # -- plumbing -------------------------------------------------------------------------
    @property
    def client(self) -> httpx.Client:
        """The HTTP client, opened at first use."""
        with self._lock:
            if self._closed:
                raise PermanentBackendError("the http backend is closed")
            if self._client is None:
                self._client = httpx.Client(transport=self._transport, follow_redirects=True)
            return self._client

    def _api(self, label: str) -> Api:
        try:
            return self.apis[label]
        except KeyError:
            raise PermanentBackendError(
                f"job {label!r} is not an http job of this catalogue"
            ) from None

    def _send(
        self,
        api: Api,
        method: str,
        url: str,
        *,
        what: str,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        known_id: bool = False,
        accept: str = "application/json",
    ) -> tuple[httpx.Response | None, Answer]:
        """One request and what its answer means (a network failure is transient)."""
        sent = self._headers(api, what, accept, headers)
        try:
            response = self.client.request(
                method, url, json=body, headers=sent, timeout=api.job.request_timeout
            )
        except httpx.TransportError as exc:
            return None, _unanswered(api, what, exc)
        return response, _meaning(response, what, known_id)

    async def _asend(
        self, api: Api, method: str, url: str, *, what: str, known_id: bool = False
    ) -> tuple[httpx.Response | None, Answer]:
        """``_send`` on the async client, awaited on the night's loop."""
        sent = await self._aheaders(api, what, "application/json")
        try:
            response = await self._async_client(api).request(
                method, url, headers=sent, timeout=api.job.request_timeout
            )
        except httpx.TransportError as exc:
            return None, _unanswered(api, what, exc)
        return response, _meaning(response, what, known_id)

    def _headers(
        self, api: Api, what: str, accept: str, headers: Mapping[str, str] | None
    ) -> dict[str, str]:
        """A request's headers (its auth among them), counted by its kind."""
        kind = what.split(" ", 1)[0]  # creating, reading, listing, looking, cancelling
        self.calls[kind] = self.calls.get(kind, 0) + 1
        return {"Accept": accept, **(headers or {}), **self._tokens.headers(api)}

    async def _aheaders(self, api: Api, what: str, accept: str) -> dict[str, str]:
        """``_headers`` on the night's loop: a Secret block not read yet is read on a thread (a
        Prefect API call; Prefect's sync ``load`` gives a coroutine back on a running loop)."""
        if not self._tokens.ready(api):
            await asyncio.to_thread(self._tokens.headers, api)
        return self._headers(api, what, accept, None)

    def _call(
        self,
        api: Api,
        method: str,
        url: str,
        *,
        what: str,
        known_id: bool = False,
        patience: float = READ_PATIENCE_S,
        **kw: Any,
    ) -> httpx.Response:
        """A request whose 429s are waited out (``patience`` s at most); any other failure
        raised as ours."""
        waited = 0.0
        while True:
            response, answer = self._send(api, method, url, what=what, known_id=known_id, **kw)
            if (wait := _wait_or_raise(answer, waited, patience)) is None:
                assert response is not None
                return response
            self._sleep(wait)
            waited += wait

    async def _acall(
        self, api: Api, method: str, url: str, *, what: str, known_id: bool = False
    ) -> httpx.Response:
        """``_call`` on the async client: its 429s waited out on the loop."""
        waited = 0.0
        while True:
            response, answer = await self._asend(api, method, url, what=what, known_id=known_id)
            if (wait := _wait_or_raise(answer, waited, READ_PATIENCE_S)) is None:
                assert response is not None
                return response
            await asyncio.sleep(wait)
            waited += wait

    @staticmethod
    def _json(response: httpx.Response, what: str) -> Any:
        try:
            return response.json()
        except ValueError:
            raise PermanentBackendError(
                f"{what}: the answer is not JSON: {response.text[:200]!r}"
            ) from None

    # -- the protocol -----------------------------------------------------------------------
    def submit(self, spec: JobSpec) -> str:
        """Create the job, at most once per submission key; its ``label/id``."""
        api = self._api(spec.label)
        key = submission_key(spec)
        if resume_since(spec) is not None and (found := self._find(api, key)) is not None:
            return found
        values = {"label": spec.label, "key": key or ""}
        request = api.job.submit
        headers = dict(fill(dict(request.headers), values))
        if key:
            headers["Idempotency-Key"] = key
        if spec.trace is not None:  # the service joins the night's trace (W3C Trace Context)
            headers["traceparent"] = spec.trace
        what = f"creating job {spec.label!r}"
        try:
            response = self._call(
                api,
                request.method,
                api.url(request.url, key=key or ""),
                what=what,
                body=fill(request.body, values),
                headers=headers,
                patience=api.job.quota_wait,  # the quota is full: wait for a free place
            )
        except TransientBackendError as lost:  # it may exist: look, never create it twice
            found = self._find(api, key, lost)
            if found is None:
                raise
            return found
        try:
            job_id = extract(self._json(response, what), api.job.id_path)
        except KeyError as exc:
            raise PermanentBackendError(f"{what}: {exc.args[0]}: {response.text[:200]!r}") from None
        if job_id in (None, "") or isinstance(job_id, dict | list | bool):
            raise PermanentBackendError(f"{what}: no job id at {api.job.id_path!r}: {job_id!r}")
        return f"{spec.label}/{job_id}"

    def _find(self, api: Api, key: str | None, lost: BackendError | None = None) -> str | None:
        """The job created with ``key``, looked up; None: none (or no way to look)."""
        if api.job.lookup is None or not key:
            if lost is not None:
                raise TransientBackendError(
                    f"{lost}; the retry sends the same Idempotency-Key, so at most one job exists "
                    "if the API honours it"
                ) from None
            return None
        listing = api.job.lookup
        what = f"looking up job {api.label!r} by its key"
        try:
            response = self._call(api, "GET", api.url(listing.url, key=key), what=what)
            items = self._items(response, listing, what)
        except TransientBackendError as exc:
            if lost is None:
                raise
            raise TransientBackendError(
                f"{lost}; looking for its job failed too ({exc}): the retry looks again first"
            ) from None
        ids = [str(extract(item, listing.id_path or api.job.id_path, "")) for item in items]
        ids = [i for i in ids if i]
        if len(ids) > 1:
            raise PermanentBackendError(
                f"{len(ids)} jobs of key {key!r} at the API: {', '.join(ids)}; a duplicate may "
                "exist: keep one, cancel the others"
            )
        if not ids:
            if lost is not None:
                raise TransientBackendError(
                    f"{lost}; the API shows no job of its key: the retry looks again first"
                ) from None
            return None
        return f"{api.label}/{ids[0]}"

    def _items(self, response: httpx.Response, listing: Any, what: str) -> list[Any]:
        data = self._json(response, what)
        items = extract(data, listing.items_path, None) if listing.items_path else data
        if not isinstance(items, list):
            raise PermanentBackendError(f"{what}: no list at {listing.items_path or '(top)'!r}")
        return items

    def status(self, external_id: str) -> JobStatus:
        """The job's answer at ``status_url``."""
        label, job_id = split_id(external_id)
        api = self._api(label)
        what = f"reading job {external_id}"
        response = self._call(
            api, "GET", api.url(api.job.status_url, id=job_id), what=what, known_id=True
        )
        return self._status(api, self._json(response, what), external_id)

    async def astatus(self, external_id: str) -> JobStatus:
        """``status``, awaited on the night's loop: a call in flight holds no thread."""
        label, job_id = split_id(external_id)
        api = self._api(label)
        what = f"reading job {external_id}"
        url = api.url(api.job.status_url, id=job_id)
        response = await self._acall(api, "GET", url, what=what, known_id=True)
        return self._status(api, self._json(response, what), external_id)

    @staticmethod
    def _status(api: Api, answer: Any, external_id: str) -> JobStatus:
        try:
            return to_status(answer, api.paths, api.states)
        except ValueError as exc:
            raise PermanentBackendError(f"job {external_id}: {exc}") from None

    def listable(self, external_id: str) -> bool:
        """Whether the job's API has a ``list`` URL (the others are asked one by one)."""
        try:
            return self._api(split_id(external_id)[0]).job.list is not None
        except PermanentBackendError:
            return False

    def status_many(self, external_ids: Iterable[str]) -> dict[str, JobStatus | BackendError]:
        """Jobs whose API has a ``list`` URL in one call per API; the others one by one."""
        out: dict[str, JobStatus | BackendError] = {}
        groups: dict[str, list[tuple[str, str]]] = {}
        for external_id in dict.fromkeys(external_ids):
            try:
                label, job_id = split_id(external_id)
                api = self._api(label)
            except PermanentBackendError as exc:
                out[external_id] = exc
                continue
            if api.job.list is None:
                continue
            groups.setdefault(api.job.list.url, []).append((external_id, job_id))
        for pairs in groups.values():
            api = self._api(split_id(pairs[0][0])[0])
            listing = api.job.list
            what = f"listing {len(pairs)} job(s)"
            ids = ",".join(job_id for _, job_id in pairs)
            response = self._call(api, "GET", api.url(listing.url, ids=ids), what=what)
            by_id = {
                str(extract(item, listing.id_path or api.job.id_path, "")): item
                for item in self._items(response, listing, what)
            }
            for external_id, job_id in pairs:
                if job_id in by_id:
                    try:
                        out[external_id] = self._status(api, by_id[job_id], external_id)
                    except PermanentBackendError as exc:
                        out[external_id] = exc
        for external_id in dict.fromkeys(external_ids):
            if external_id not in out:  # not listed (or no list URL): asked alone
                try:
                    out[external_id] = self.status(external_id)
                except BackendError as exc:
                    out[external_id] = exc
        return out

    def cancel(self, external_id: str) -> None:
        """The API's cancel; a job already final (409) is left alone."""
        label, job_id = split_id(external_id)
        api = self._api(label)
        if api.job.cancel is None:
            raise CannotCancelError(f"job {label!r}: its API declares no cancel")
        what = f"cancelling job {external_id}"
        response, answer = self._send(
            api,
            api.job.cancel.method,
            api.url(api.job.cancel.url, id=job_id),
            what=what,
            known_id=True,
        )
        if answer.kind == "ok" or (response is not None and response.status_code == 409):
            return
        if answer.kind == "expired":  # the status said why already: keep this one short
            raise LostJobError("the API does not know the job (HTTP 404)")
        raise error_of(answer)

    def logs(self, external_id: str, tail: int = 40) -> str:
        """The last ``tail`` lines at ``logs_url`` (a JSON list of lines, or plain text)."""
        label, job_id = split_id(external_id)
        api = self._api(label)
        if api.job.logs_url is None:
            return "(the job's API declares no logs_url)"
        what = f"logs of job {external_id}"
        response = self._call(
            api, "GET", api.url(api.job.logs_url, id=job_id), what=what, known_id=True, accept="*/*"
        )
        text = response.text
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if isinstance(data, list):
            text = "\n".join(str(line) for line in data)
        return "\n".join(text.rstrip("\n").splitlines()[-max(1, int(tail)) :])

    # -- streams --------------------------------------------------------------------------
    def streams(self, external_id: str) -> bool:
        """Whether this job's API streams its events."""
        try:
            return self._api(split_id(external_id)[0]).job.stream_url is not None
        except PermanentBackendError:
            return False

    def stream(self, external_id: str) -> AsyncIterator[JobStatus]:
        """The job's statuses as its API streams them (``stream.py``), up to its final one."""
        label, job_id = split_id(external_id)
        api = self._api(label)
        url = api.url(str(api.job.stream_url), id=job_id)
        return self._stream(api, url, external_id, self._async_client(api))

    async def _stream(
        self, api: Api, url: str, external_id: str, client: httpx.AsyncClient
    ) -> AsyncIterator[JobStatus]:
        headers = await self._aheaders(api, f"stream of {external_id}", "text/event-stream")
        async with contextlib.aclosing(
            stream_statuses(client, api, url, headers, external_id)
        ) as statuses:
            async for status in statuses:
                yield status

    def _async_client(self, api: Api) -> httpx.AsyncClient:
        """The async client of the streams and the awaited status calls, opened at first use
        (on the night's loop: it is bound to the loop that uses it)."""
        if self._closed:
            raise PermanentBackendError("the http backend is closed (its night has ended)")
        if self._aclient is None:
            timeout = httpx.Timeout(api.job.request_timeout, read=STREAM_SILENCE_S)
            self._aclient = httpx.AsyncClient(
                transport=self._async_transport,
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=50),
                timeout=timeout,
                follow_redirects=True,
            )
        return self._aclient

    async def aclose(self) -> None:
        """Close the async client (on the loop that used it)."""
        client, self._aclient = self._aclient, None
        if client is not None:
            await client.aclose()

    def close(self) -> None:
        """Close the client; later calls fail with a PermanentBackendError."""
        with self._lock:
            self._closed = True
            client, self._client = self._client, None
        if client is not None:
            client.close()


def _unanswered(api: Api, what: str, exc: httpx.TransportError) -> Answer:
    """A request that got no answer: transient."""
    if isinstance(exc, httpx.TimeoutException):
        timeout = api.job.request_timeout
        return Answer("transient", f"{what}: no answer in {timeout:g}s ({type(exc).__name__})")
    return Answer("transient", f"{what}: {type(exc).__name__}: {exc}")


def _meaning(response: httpx.Response, what: str, known_id: bool) -> Answer:
    """What an answer means, its message naming the request."""
    answer = classify_answer(
        response.status_code, response.text, response.headers, known_id=known_id
    )
    if answer.kind != "ok":
        answer = Answer(answer.kind, f"{what}: {answer.message}", answer.retry_after_s)
    return answer


def _wait_or_raise(answer: Answer, waited: float, patience: float) -> float | None:
    """None for an answer to take; the seconds to wait before asking again (a 429 within
    ``patience``); else the answer raised as our error."""
    if answer.kind == "ok":
        return None
    if answer.kind == "backpressure" and waited < patience:
        return answer.retry_after_s or 1.0
    raise error_of(answer)
