"""Gemini Batch API backend through google-genai: submit, poll, collect, fall back on demand.

Gotcha: google-genai retries API calls (HttpRetryOptions) but never the bytes of a file upload
or download, so those two are retried here.
"""

from __future__ import annotations

import importlib
import os
import random
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from tasks.backends.base import ExternalState, JobSpec, JobStatus
from tasks.batch_input import BatchRow, load_batch_input, render_rows, sdk_request
from tasks.durations import parse_duration
from tasks.errors import BackendError, PermanentBackendError, TransientBackendError
from tasks.pricing import job_cost
from tasks.reconcile import (
    RowResult,
    parse_results_jsonl,
    reconcile,
    render_results,
    summary_line,
)
from tasks.settings import Settings

__all__ = ["GeminiBatchBackend", "GeminiJobOptions", "RetryPolicy", "build_gemini_client"]

T = TypeVar("T")
_STATES = {
    "PENDING": ExternalState.QUEUED, "QUEUED": ExternalState.QUEUED,
    "RUNNING": ExternalState.RUNNING, "SUCCEEDED": ExternalState.SUCCEEDED,
    "PARTIALLY_SUCCEEDED": ExternalState.SUCCEEDED, "FAILED": ExternalState.FAILED,
    "EXPIRED": ExternalState.FAILED, "CANCELLED": ExternalState.CANCELLED,
}  # fmt: skip
_TRANSIENT_CODES = frozenset({408, 429, 500, 502, 503, 504})


def _transport_errors() -> tuple[type[Exception], ...]:
    """Connection, timeout and protocol errors of whichever HTTP stack google-genai uses."""
    found = []
    for name in ("httpx2", "httpx"):  # google-genai >= 3.6 talks through httpx2
        try:
            found.append(importlib.import_module(name).TransportError)
        except ImportError:
            continue
    return tuple(found)


_TRANSPORT_ERRORS = _transport_errors()
# everything an SDK call may raise that we translate (ValueError covers pydantic validation)
_SDK_ERRORS: tuple[type[Exception], ...] = (
    genai_errors.APIError,
    *_TRANSPORT_ERRORS,
    ValueError,
    KeyError,
)
_EXCLUDE = {"sdk_http_response", "automatic_function_calling_history", "parsed"}


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter, shared by the SDK and our own byte transfers."""

    attempts: int = 4
    initial_delay_s: float = 1.0
    max_delay_s: float = 30.0
    exp_base: float = 2.0
    jitter_s: float = 1.0

    def http_retry_options(self) -> types.HttpRetryOptions:
        """The same policy as google-genai HttpRetryOptions."""
        return types.HttpRetryOptions(
            attempts=self.attempts,
            initial_delay=self.initial_delay_s,
            max_delay=self.max_delay_s,
            exp_base=self.exp_base,
            jitter=self.jitter_s,
            http_status_codes=sorted(_TRANSIENT_CODES),
        )

    def delay(self, retry: int, rand: float) -> float:
        """Seconds before retry number ``retry`` (0-based); ``rand`` in [0, 1)."""
        base = self.initial_delay_s * self.exp_base**retry
        return min(self.max_delay_s, base + rand * self.jitter_s)


@dataclass(frozen=True)
class GeminiJobOptions:
    """The ``JobSpec.options`` of a gemini_batch job."""

    model: str
    input: Path
    output: Path
    sla_s: float | None = None
    fallback: str = "on_demand"
    inline_threshold_rows: int = 1000
    inline_threshold_bytes: int = 10 * 1024 * 1024

    @classmethod
    def from_spec(cls, spec: JobSpec) -> GeminiJobOptions:
        """Options from a spec; a missing field is a PermanentBackendError."""
        opts = spec.options
        missing = [k for k in ("model", "input", "output") if not opts.get(k)]
        if missing:
            raise PermanentBackendError(f"gemini job {spec.label!r}: options lack {missing}")
        if opts.get("fallback", "on_demand") not in ("on_demand", "none"):
            raise PermanentBackendError(
                f"gemini job {spec.label!r}: fallback must be on_demand|none"
            )
        sla = opts.get("sla")
        return cls(
            model=str(opts["model"]),
            input=Path(opts["input"]),
            output=Path(opts["output"]),
            sla_s=parse_duration(sla) if sla is not None else None,
            fallback=opts.get("fallback", "on_demand"),
            inline_threshold_rows=int(opts.get("inline_threshold_rows", 1000)),
            inline_threshold_bytes=int(opts.get("inline_threshold_bytes", 10 * 1024 * 1024)),
        )

    @property
    def retry_file(self) -> Path:
        """``<output stem>.retry.jsonl`` beside the output."""
        return self.output.with_name(self.output.stem + ".retry.jsonl")


def _resolve_api_key(settings: Settings) -> str:
    if settings.gemini_api_key is not None:
        return settings.gemini_api_key.get_secret_value()
    if os.environ.get("GEMINI_API_KEY"):
        return os.environ["GEMINI_API_KEY"]
    if settings.gemini_api_key_block:
        from prefect.blocks.system import Secret  # deferred: importing prefect costs ~1 s

        secret: Any = Secret.load(settings.gemini_api_key_block)  # sync in a sync context
        return str(secret.get())
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


def _now() -> str:
    return datetime.now(UTC).strftime("%H:%M:%S")


def _state_name(state: Any) -> str:
    raw = getattr(state, "value", state) or "UNSPECIFIED"
    return str(raw).removeprefix("JOB_STATE_").removeprefix("BATCH_STATE_")


def _as_json(model: Any) -> dict[str, Any]:
    """An SDK pydantic object as REST-style JSON (camelCase, no SDK-only fields)."""
    return dict(model.model_dump(mode="json", by_alias=True, exclude_none=True, exclude=_EXCLUDE))


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class GeminiBatchBackend:
    """Backend for ``gemini_batch`` jobs: one Batch API job per spec, results matched by key."""

    name = "gemini_batch"

    def __init__(
        self,
        client: genai.Client,
        *,
        retry: RetryPolicy | None = None,
        fallback_concurrency: int = 4,
        list_limit: int = 500,
        sleep: Callable[[float], None] = time.sleep,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self._client = client
        self._retry = retry or RetryPolicy()
        self._fallback_concurrency = max(1, fallback_concurrency)
        self._sleep, self._rand = sleep, rand
        self._list_limit = list_limit  # batches status_many reads before asking one by one
        self._history: dict[str, list[str]] = {}
        self._submitted: dict[str, int] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"GeminiBatchBackend(fallback_concurrency={self._fallback_concurrency})"

    # -- error translation ---------------------------------------------------------------
    def _scrub(self, text: str) -> str:
        key = getattr(getattr(self._client, "_api_client", None), "api_key", None)
        return text.replace(key, "***") if key else text

    def _translate(self, what: str, exc: Exception) -> BackendError:
        if isinstance(exc, genai_errors.APIError):
            msg = self._scrub(f"{what}: HTTP {exc.code} {exc.status or ''}: {exc.message}")
            transient = exc.code in _TRANSIENT_CODES or (exc.code or 0) >= 500
            return (TransientBackendError if transient else PermanentBackendError)(msg)
        if isinstance(exc, _TRANSPORT_ERRORS):
            return TransientBackendError(self._scrub(f"{what}: {type(exc).__name__}: {exc}"))
        return PermanentBackendError(self._scrub(f"{what}: {type(exc).__name__}: {exc}"))

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """Run an SDK call (the SDK retries it) and translate what escapes."""
        try:
            return fn()
        except _SDK_ERRORS as exc:
            raise self._translate(what, exc) from exc

    def _call_retrying(self, what: str, fn: Callable[[], T]) -> T:
        """Run a call the SDK does not retry (file bytes), with our own backoff."""
        for retry in range(self._retry.attempts):
            try:
                return self._call(what, fn)
            except TransientBackendError:
                if retry + 1 >= self._retry.attempts:
                    raise
                self._sleep(self._retry.delay(retry, self._rand()))
        raise AssertionError("unreachable")

    def _note(self, external_id: str, line: str) -> None:
        with self._lock:
            self._history.setdefault(external_id, []).append(f"{_now()} {line}")

    # -- Backend protocol ----------------------------------------------------------------
    def submit(self, spec: JobSpec) -> str:
        """Validate the input (InputFileError: nothing sent), then create the batch."""
        opts = GeminiJobOptions.from_spec(spec)
        rows = load_batch_input(opts.input)
        size = opts.input.stat().st_size
        config = types.CreateBatchJobConfig(display_name=spec.label)
        if len(rows) <= opts.inline_threshold_rows and size <= opts.inline_threshold_bytes:
            src: Any = [self._inlined(row) for row in rows]
            how = "inline"
        else:
            upload_cfg = types.UploadFileConfig(
                mime_type="application/jsonl", display_name=spec.label
            )
            file = self._call_retrying(
                "upload input",
                lambda: self._client.files.upload(file=opts.input, config=upload_cfg),
            )
            src, how = file.name, f"file {file.name}"
        job = self._call(
            "create batch",
            lambda: self._client.batches.create(model=opts.model, src=src, config=config),
        )
        external_id = str(job.name)
        with self._lock:
            self._submitted[external_id] = len(rows)
        self._note(external_id, f"submitted {len(rows)} rows ({how}) -> {_state_name(job.state)}")
        return external_id

    @staticmethod
    def _inlined(row: BatchRow) -> dict[str, Any]:
        contents, config = sdk_request(row.request)
        item: dict[str, Any] = {"contents": contents, "metadata": {"key": row.key}}
        if config:
            item["config"] = config
        return item

    def status(self, external_id: str) -> JobStatus:
        """Current state; unknown states count as running (poll with your own deadline)."""
        job = self._call("get batch", lambda: self._client.batches.get(name=external_id))
        return self._to_status(external_id, job)

    def status_many(self, external_ids: Iterable[str]) -> dict[str, JobStatus]:
        """Many states from one ``batches.list`` walk; ids it doesn't reach are asked singly."""
        wanted = set(external_ids)
        found: dict[str, Any] = {}

        def walk() -> None:
            pager = self._client.batches.list(config=types.ListBatchJobsConfig(page_size=100))
            for seen, job in enumerate(pager, start=1):
                if job.name in wanted:
                    found[str(job.name)] = job
                if len(found) == len(wanted) or seen >= self._list_limit:
                    return

        self._call("list batches", walk)
        out = {name: self._to_status(name, job) for name, job in found.items()}
        for name in wanted - set(found):
            out[name] = self.status(name)
        return out

    def _to_status(self, external_id: str, job: Any) -> JobStatus:
        raw = _state_name(job.state)
        state = _STATES.get(raw, ExternalState.RUNNING)
        with self._lock:
            history = self._history.setdefault(external_id, [])
            if not history or not history[-1].endswith(f"-> {raw}"):
                history.append(f"{_now()} state -> {raw}")
        return JobStatus(
            state=state,
            exit_code=None if not state.final else int(state != ExternalState.SUCCEEDED),
            started_at=job.create_time,
            finished_at=job.end_time if state.final else None,
            detail=f"batch {raw.lower()}",
            extra={
                "batch_state": raw,
                "display_name": job.display_name,
                "submitted_rows": self._submitted.get(external_id),
            },
        )

    def cancel(self, external_id: str) -> None:
        """Cancel the batch; one already final is left alone by the API."""
        self._call("cancel batch", lambda: self._client.batches.cancel(name=external_id))
        self._note(external_id, "cancel requested")

    def logs(self, external_id: str, tail: int = 40) -> str:
        """State history, errors and reconciliation seen by this process (else current state)."""
        with self._lock:
            lines = list(self._history.get(external_id, []))
        if not lines:  # another process submitted it: say what the API says now
            try:
                lines = [f"{_now()} state -> {self.status(external_id).extra['batch_state']}"]
            except BackendError as exc:
                lines = [f"{_now()} state unknown: {exc}"]
        return "\n".join(lines[-tail:])

    # -- results ---------------------------------------------------------------------------
    def _batch_results(self, job: Any, rows: list[BatchRow]) -> dict[str, RowResult]:
        dest = job.dest
        if dest is None:
            return {}
        if dest.inlined_responses is not None:
            # the SDK gives results in input order and we don't rely on echoed metadata
            results: dict[str, RowResult] = {}
            for row, item in zip(rows, dest.inlined_responses, strict=False):
                if item.response is not None:
                    results[row.key] = {"response": _as_json(item.response)}
                elif item.error is not None:
                    results[row.key] = {"error": _as_json(item.error)}
            return results
        if dest.file_name:
            name = dest.file_name
            data = self._call_retrying(
                "download results", lambda: self._client.files.download(file=name)
            )
            parsed, bad = parse_results_jsonl(data.decode("utf-8", errors="replace"))
            if bad:
                self._note(job.name, f"{bad} unusable line(s) in {name}")
            return parsed
        return {}

    def _finish(
        self,
        opts: GeminiJobOptions,
        external_id: str,
        rows: list[BatchRow],
        results: dict[str, RowResult],
        fallback_keys: set[str],
        batch_ok: bool,
    ) -> dict[str, Any]:
        keys = [r.key for r in rows]
        rec = reconcile(keys, results, fallback_keys)
        _write_atomic(opts.output, render_results(keys, results))
        retry_file: Path | None = opts.retry_file
        if rec.retry_keys:
            wanted = set(rec.retry_keys)
            _write_atomic(opts.retry_file, render_rows([r for r in rows if r.key in wanted]))
        else:
            opts.retry_file.unlink(missing_ok=True)  # a stale retry file would mislead tomorrow
            retry_file = None
        usage, cost = job_cost(opts.model, results, fallback_keys)
        summary = summary_line(rec, cost)
        self._note(external_id, summary)
        return {
            "ok": batch_ok and rec.failed == 0 and rec.missing == 0,
            "reconciliation": rec.as_dict(),
            "tokens": usage.as_dict(),
            "cost_usd": round(cost, 6),
            "summary": summary,
            "output": str(opts.output),
            "retry_file": str(retry_file) if retry_file else None,
        }

    def collect(self, spec: JobSpec, external_id: str) -> dict[str, Any]:
        """Once final: fetch results, write output + retry file, reconcile and price them."""
        opts = GeminiJobOptions.from_spec(spec)
        rows = load_batch_input(opts.input)
        job = self._call("get batch", lambda: self._client.batches.get(name=external_id))
        raw = _state_name(job.state)
        results = self._batch_results(job, rows)
        return self._finish(opts, external_id, rows, results, set(), raw == "SUCCEEDED")

    def fallback(self, spec: JobSpec, external_id: str) -> dict[str, Any]:
        """Cancel the batch, keep its results, answer the other rows through generateContent.

        With ``fallback: none`` nothing is sent on demand; the batch is still cancelled and
        whatever it produced is collected.
        """
        opts = GeminiJobOptions.from_spec(spec)
        rows = load_batch_input(opts.input)
        job = self._call("get batch", lambda: self._client.batches.get(name=external_id))
        if not _STATES.get(_state_name(job.state), ExternalState.RUNNING).final:
            try:
                self.cancel(external_id)
            except BackendError as exc:  # answering the rows matters more than the cancel
                self._note(external_id, f"cancel failed: {exc}")
            job = self._call("get batch", lambda: self._client.batches.get(name=external_id))
        results = self._batch_results(job, rows)
        # rows that errored in the batch get one on-demand attempt too
        todo = [r for r in rows if (results.get(r.key) or {}).get("response") is None]
        if opts.fallback == "none":
            todo = []
        self._note(external_id, f"fallback: {len(todo)} row(s) on demand")
        with ThreadPoolExecutor(max_workers=self._fallback_concurrency) as pool:
            answers = list(pool.map(lambda row: self._generate(opts.model, row), todo))
        fallback_keys = set()
        for row, answer in zip(todo, answers, strict=True):
            if "response" in answer or row.key not in results:
                results[row.key] = answer
            if "response" in answer:
                fallback_keys.add(row.key)
        return self._finish(opts, external_id, rows, results, fallback_keys, True)

    def _generate(self, model: str, row: BatchRow) -> RowResult:
        contents, config = sdk_request(row.request)
        try:
            response = self._call(
                f"generate {row.key}",
                lambda: self._client.models.generate_content(
                    model=model,
                    contents=contents,
                    config=types.GenerateContentConfig.model_validate(config) if config else None,
                ),
            )
        except BackendError as exc:
            code = getattr(exc.__cause__, "code", None) or 0
            return {"error": {"code": code, "message": str(exc)}}
        return {"response": _as_json(response)}
