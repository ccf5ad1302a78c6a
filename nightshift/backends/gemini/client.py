"""The google-genai client of the Gemini backend: how it is built, retried, and how it fails.

SDK exceptions are translated here, into the tree of nightshift/errors.py, and nowhere else.
"""

from __future__ import annotations

import importlib
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from nightshift.backoff import Backoff
from nightshift.config.settings import Settings
from nightshift.errors import (
    BackendError,
    PermanentBackendError,
    TransientBackendError,
    UnknownJobError,
)
from nightshift.secret_blocks import read_secret_block

__all__ = [
    "AUTH_CODES",
    "Failure",
    "RetryPolicy",
    "SdkCaller",
    "build_gemini_client",
]

T = TypeVar("T")
_TRANSIENT_CODES = frozenset({408, 429, 500, 502, 503, 504})


def _http_errors(*names: str) -> tuple[type[Exception], ...]:
    """These error classes of whichever HTTP stacks google-genai may use."""
    found = []
    for module in ("httpx2", "httpx"):  # google-genai >= 3.6 talks through httpx2
        try:
            imported = importlib.import_module(module)
        except ImportError:
            continue
        found += [getattr(imported, name) for name in names]
    return tuple(found)


# no answer, or one that could not be read: worth asking again (the request may have been served)
_TRANSIENT_HTTP_ERRORS = _http_errors("TransportError", "DecodingError")
# every request-level failure, e.g. TooManyRedirects (a base URL that redirects in a loop)
_HTTP_ERRORS = _http_errors("RequestError")
# everything an SDK call may raise that we translate (ValueError covers pydantic validation)
_SDK_ERRORS: tuple[type[Exception], ...] = (
    genai_errors.APIError,
    *_HTTP_ERRORS,
    ValueError,
    KeyError,
)
AUTH_CODES = frozenset({401, 403})
# 1 s doubling to 30 s, plus up to 1 s of jitter so parallel retries spread out
_RETRY_BACKOFF = Backoff(initial=1.0, factor=2.0, max=30.0, jitter=1.0)


@dataclass(frozen=True)
class RetryPolicy:
    """``attempts`` tries, ``backoff`` between them: shared by the SDK and our byte transfers."""

    attempts: int = 4
    backoff: Backoff = _RETRY_BACKOFF

    def http_retry_options(self) -> types.HttpRetryOptions:
        """The same policy as google-genai HttpRetryOptions."""
        return types.HttpRetryOptions(
            attempts=self.attempts,
            initial_delay=self.backoff.initial,
            max_delay=self.backoff.max,
            exp_base=self.backoff.factor,
            jitter=self.backoff.jitter,
            http_status_codes=sorted(_TRANSIENT_CODES),
        )


def _resolve_api_key(settings: Settings) -> str:
    # explicit beats ambient: a key or block named in config wins over GEMINI_API_KEY
    if settings.gemini_api_key is not None:
        return settings.gemini_api_key.get_secret_value()
    if settings.gemini_api_key_block:
        name = settings.gemini_api_key_block
        try:
            return read_secret_block(name)
        except ValueError as exc:  # Prefect's "block document not found"
            raise PermanentBackendError(
                f"Prefect Secret block {name!r} for the Gemini API key not found"
            ) from exc
    if os.environ.get("GEMINI_API_KEY"):
        return os.environ["GEMINI_API_KEY"]
    raise PermanentBackendError(
        "no Gemini API key: set NIGHTSHIFT_GEMINI_API_KEY, GEMINI_API_KEY or "
        "NIGHTSHIFT_GEMINI_API_KEY_BLOCK (a Prefect Secret block)"
    )


def build_gemini_client(
    settings: Settings, *, retry: RetryPolicy | None = None, timeout_s: float = 60.0
) -> genai.Client:
    """The one place a google-genai client is built (Gemini Developer API, never Vertex)."""
    retry = retry or RetryPolicy()
    options = types.HttpOptions(
        base_url=settings.gemini_base_url,
        api_version=settings.gemini_api_version,
        timeout=int(timeout_s * 1000),
        retry_options=retry.http_retry_options(),
    )
    return genai.Client(vertexai=False, api_key=_resolve_api_key(settings), http_options=options)


def _retry_after(exc: Exception) -> float | None:
    """The seconds an API error's ``Retry-After`` header asks for (not its HTTP-date form)."""
    headers = getattr(getattr(exc, "response", None), "headers", None)
    value = headers.get("retry-after") if headers is not None else None
    try:
        return max(0.0, float(value)) if value is not None else None
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class Failure:
    """A failed SDK call: its translated error and HTTP status (None: no readable answer)."""

    error: BackendError
    code: int | None = None
    retry_after: float | None = None  # seconds the API's Retry-After header asked for

    @property
    def auth(self) -> bool:
        """The API refused the key (401) or its permissions (403)."""
        return self.code in AUTH_CODES

    @property
    def maybe_served(self) -> bool:
        """The request may have taken effect although no success came back (a lost answer)."""
        # a transient failure other than throttling (429: refused before any work)
        return isinstance(self.error, TransientBackendError) and self.code != 429


@dataclass(frozen=True)
class SdkCaller:
    """Runs SDK calls of one client and turns what escapes into a BackendError."""

    client: Any
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    sleep: Callable[[float], None] = time.sleep
    rand: Callable[[], float] = random.random
    closed: threading.Event = field(default_factory=threading.Event, compare=False)

    def close(self) -> None:
        """Close the client's HTTP connections; every later call fails with a clear error."""
        self.closed.set()
        self.client.close()

    def _closed_error(self, what: str) -> PermanentBackendError:
        return PermanentBackendError(f"{what}: the Gemini client is closed (its night has ended)")

    def _scrub(self, text: str) -> str:
        key = getattr(getattr(self.client, "_api_client", None), "api_key", None)
        return text.replace(key, "***") if key else text

    def translate(self, what: str, exc: Exception, *, names_job: bool = False) -> BackendError:
        """Transient for timeouts, throttling and 5xx, else permanent; never shows the key.
        ``names_job``: the call read a job by its id, so a 404 means the API does not know it."""
        if isinstance(exc, genai_errors.APIError):
            msg = self._scrub(f"{what}: HTTP {exc.code} {exc.status or ''}: {exc.message}")
            if names_job and exc.code == 404:
                return UnknownJobError(msg)
            transient = exc.code in _TRANSIENT_CODES or (exc.code or 0) >= 500
            return (TransientBackendError if transient else PermanentBackendError)(msg)
        if isinstance(exc, _TRANSIENT_HTTP_ERRORS):
            return TransientBackendError(self._scrub(f"{what}: {type(exc).__name__}: {exc}"))
        return PermanentBackendError(self._scrub(f"{what}: {type(exc).__name__}: {exc}"))

    def call(self, what: str, fn: Callable[[], T], *, names_job: bool = False) -> T:
        """Run an SDK call (the SDK retries it) and translate what escapes.

        The SDK exception is neither the ``__cause__`` nor the ``__context__`` of ours: its text
        (and traceback locals) may hold the API key, and loggers print chained exceptions.
        Ours carries its scrubbed type name and message instead.
        """
        if self.closed.is_set():
            raise self._closed_error(what)
        try:
            return fn()
        except _SDK_ERRORS as exc:
            error = self.translate(what, exc, names_job=names_job)
        except RuntimeError:  # httpx's "client has been closed": a close() came in meanwhile
            if not self.closed.is_set():
                raise
            error = self._closed_error(what)
        raise error  # outside the except block: nothing chained

    def attempt(self, what: str, fn: Callable[[], T]) -> T | Failure:
        """Run an SDK call; a failure comes back as a value: its error and HTTP code."""
        if self.closed.is_set():
            return Failure(self._closed_error(what))
        try:
            return fn()
        except _SDK_ERRORS as exc:
            code = exc.code if isinstance(exc, genai_errors.APIError) else None
            return Failure(self.translate(what, exc), code or None, _retry_after(exc))
        except RuntimeError:  # as in call()
            if not self.closed.is_set():
                raise
            return Failure(self._closed_error(what))

    def try_call(self, what: str, fn: Callable[[], T]) -> tuple[T | None, dict[str, Any] | None]:
        """Run an SDK call; a failure comes back as a REST-style ``{"code", "message"}`` dict."""
        result = self.attempt(what, fn)
        if isinstance(result, Failure):
            return None, {"code": result.code or 0, "message": str(result.error)}
        return result, None

    def call_retrying(self, what: str, fn: Callable[[], T]) -> T:
        """Run a call the SDK does not retry (file bytes), with our own backoff."""
        for retry in range(self.retry.attempts):
            try:
                return self.call(what, fn)
            except TransientBackendError:
                if retry + 1 >= self.retry.attempts:
                    raise
                self.sleep(self.retry.backoff.delay(retry, self.rand))
        raise AssertionError("unreachable")
