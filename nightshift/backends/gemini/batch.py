"""Gemini Batch API backend through google-genai: submit, poll, collect, fall back on demand.

Gotcha: google-genai retries API calls (HttpRetryOptions) but never the bytes of a file upload
or download, so those two are retried here.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from google import genai
from google.genai import types

from nightshift.backends.base import ExternalState, JobSpec, JobStatus
from nightshift.backends.gemini.batch_input import BatchRow, load_batch_input, sdk_request
from nightshift.backends.gemini.capped import answer_within
from nightshift.backends.gemini.client import (
    Failure,
    RetryPolicy,
    SdkCaller,
    build_gemini_client,
)
from nightshift.backends.gemini.options import GeminiJobOptions
from nightshift.backends.gemini.reconcile import RowResult
from nightshift.backends.gemini.results import (
    batch_results,
    finish_job,
    read_manifest,
    write_manifest,
)
from nightshift.backends.gemini.sdk_values import sdk_json, sdk_state_name
from nightshift.backends.gemini.submit import BatchCreator
from nightshift.backends.gemini.wait import (
    BATCH_STATES,
    CancelWait,
    batch_started,
    is_final_state,
    settle,
)
from nightshift.backends.patience import Patience
from nightshift.backends.submission import resume_since, submission_key
from nightshift.errors import BackendError, PermanentBackendError, TransientBackendError

__all__ = ["GeminiBatchBackend", "GeminiJobOptions", "RetryPolicy", "build_gemini_client"]


def _now() -> str:
    return datetime.now(UTC).strftime("%H:%M:%S")


class GeminiBatchBackend:
    """Backend for ``gemini_batch`` jobs: one Batch API job per spec, results matched by key.

    ``cancel_wait`` bounds how long collect/fallback wait for a cancelled batch to settle.
    """

    name = "gemini_batch"

    def __init__(
        self,
        client: genai.Client,
        *,
        retry: RetryPolicy | None = None,
        fallback_concurrency: int = 4,
        list_limit: int = 500,
        cancel_wait: CancelWait | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rand: Callable[[], float] = random.random,
        patience: Patience | None = None,
    ) -> None:
        self._client = client
        self._sdk = SdkCaller(client, retry or RetryPolicy(), sleep, rand)
        self._fallback_concurrency = max(1, fallback_concurrency)
        self._list_limit = list_limit  # batches status_many reads before asking one by one
        self._cancel_wait = cancel_wait or CancelWait()
        # patience: how long a create refused for now (429, 5xx) is tried again; none: once
        self._creator = BatchCreator(client, self._sdk, list_limit, patience or Patience())
        self._sleep = sleep
        self._history: dict[str, list[str]] = {}
        self._submitted_rows: dict[str, int] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"GeminiBatchBackend(fallback_concurrency={self._fallback_concurrency})"

    def _note(self, external_id: str, line: str) -> None:
        with self._lock:
            self._history.setdefault(external_id, []).append(f"{_now()} {line}")

    # -- Backend protocol ----------------------------------------------------------------
    def submit(self, spec: JobSpec) -> str:
        """Validate the input (InputFileError: nothing sent), then create the batch at most once.

        The batch's display name is ``options.submission_key`` (else the label). With
        ``options.resume_since`` (an earlier try of this attempt may have made the batch) it
        is looked for first and returned if found.
        """
        opts = GeminiJobOptions.from_spec(spec)
        rows = load_batch_input(opts.input)
        name = submission_key(spec) or spec.label
        since = resume_since(spec)
        found = self._creator.find(name, since) if since is not None else None
        if found is not None:
            return self._submitted(found, opts, rows, "found after an interrupted submit")
        src, how = self._creator.source(opts, rows, spec.label)
        return self._submitted(self._creator.create(opts.model, src, name), opts, rows, how)

    def _submitted(self, job: Any, opts: GeminiJobOptions, rows: list[BatchRow], how: str) -> str:
        external_id = str(job.name)
        with self._lock:
            self._submitted_rows[external_id] = len(rows)
        state = sdk_state_name(job.state)
        self._note(external_id, f"submitted {len(rows)} rows ({how}) -> {state}")
        try:  # the batch exists now: a lost manifest must not lose its id
            if read_manifest(opts.output, external_id) is None:
                write_manifest(opts.output, external_id, rows, model=opts.model, mode=how)
        except (OSError, PermanentBackendError) as exc:
            self._note(external_id, f"manifest not written ({exc}): collect reads the input")
        return external_id

    def status(self, external_id: str) -> JobStatus:
        """Current state; unknown states count as running (poll with your own deadline)."""
        return self._to_status(external_id, self._get(external_id))

    def status_many(self, external_ids: Iterable[str]) -> dict[str, JobStatus | BackendError]:
        """Many states from one ``batches.list`` walk; ids it doesn't reach are left out.

        The watcher asks those singly, each on a call of its own with its own deadline, so one
        hung ``batches.get`` never holds an answer this listing has in hand. A refused key
        (401/403) on the listing is every id's value. Only a transient failure of the listing
        raises; another permanent one (the SDK rejects a page for one bad operation) leaves out
        the ids not reached before it.
        """
        wanted = set(external_ids)
        if not wanted:
            return {}
        found: dict[str, Any] = {}

        def walk() -> None:
            pager = self._client.batches.list(config=types.ListBatchJobsConfig(page_size=100))
            for seen, job in enumerate(pager, start=1):
                if job.name in wanted:
                    found[str(job.name)] = job
                if len(found) == len(wanted) or seen >= self._list_limit:
                    return

        listed = self._sdk.attempt("list batches", walk)
        out: dict[str, JobStatus | BackendError] = {
            name: self._to_status(name, job) for name, job in found.items()
        }
        if isinstance(listed, Failure):
            if isinstance(listed.error, TransientBackendError):
                raise listed.error
            if listed.auth:  # every single get would be refused the same way
                return {**out, **dict.fromkeys(wanted - set(found), listed.error)}
        return out

    def _to_status(self, external_id: str, job: Any) -> JobStatus:
        raw = sdk_state_name(job.state)
        state = BATCH_STATES.get(raw, ExternalState.RUNNING)
        with self._lock:
            history = self._history.setdefault(external_id, [])
            if not history or not history[-1].endswith(f"-> {raw}"):
                history.append(f"{_now()} state -> {raw}")
        return JobStatus(
            state=state,
            exit_code=None if not state.final else int(state != ExternalState.SUCCEEDED),
            started_at=batch_started(job, state),
            finished_at=(job.end_time or job.update_time) if state.final else None,
            detail=f"batch {raw.lower()}",
            extra={
                "batch_state": raw,
                "display_name": job.display_name,
                "submitted_rows": self._submitted_rows.get(external_id),
            },
            created_at=job.create_time,
        )

    def cancel(self, external_id: str) -> None:
        """Cancel the batch; one already final is left alone by the API."""
        self._sdk.call("cancel batch", lambda: self._client.batches.cancel(name=external_id))
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

    def close(self) -> None:
        """Close the google-genai client (its HTTP connections); later calls fail clearly."""
        self._sdk.close()

    # -- results ---------------------------------------------------------------------------
    def _rows(self, opts: GeminiJobOptions, external_id: str, notes: list[str]) -> list[BatchRow]:
        """The rows submitted in this batch: its manifest, else (older batch) the input file."""
        rows = read_manifest(opts.output, external_id)
        if rows is None:
            notes.append("no submit manifest: reconciled against the current input file")
            rows = load_batch_input(opts.input)
        return rows

    def _batch_results(
        self, job: Any, rows: list[BatchRow], notes: list[str]
    ) -> dict[str, RowResult]:
        def download(name: str) -> bytes:
            return self._sdk.call_retrying(
                "download results", lambda: self._client.files.download(file=name)
            )

        return batch_results(job.dest, rows, notes, download)

    def _get(self, external_id: str) -> Any:
        return self._sdk.call(
            "get batch", lambda: self._client.batches.get(name=external_id), names_job=True
        )

    def _settle(self, external_id: str, job: Any, notes: list[str]) -> Any:
        """After a cancel: the batch once final, or as it is when the bounded wait runs out."""
        job, note = settle(
            lambda: self._get(external_id), job, self._cancel_wait, sleep=self._sleep
        )
        if note:
            notes.append(note)
        return job

    def _finish(
        self,
        opts: GeminiJobOptions,
        external_id: str,
        rows: list[BatchRow],
        results: dict[str, RowResult],
        fallback_keys: set[str],
        batch_ok: bool,
        notes: list[str],
    ) -> dict[str, Any]:
        for note in notes:
            self._note(external_id, note)
        outcome = finish_job(opts, rows, results, fallback_keys, batch_ok, notes)
        self._note(external_id, outcome["summary"])
        return outcome

    def collect(self, spec: JobSpec, external_id: str) -> dict[str, Any]:
        """Once final: fetch results, write output + retry file, reconcile and price them.

        Called on a batch not yet final (a cancel is settling), it first waits, bounded by
        ``cancel_wait``, for the batch to become final. A cancelled (or failed) batch gives what
        it has; every other row is missing and goes to the retry file.
        """
        opts = GeminiJobOptions.from_spec(spec)
        notes: list[str] = []
        rows = self._rows(opts, external_id, notes)
        job = self._settle(external_id, self._get(external_id), notes)
        raw = sdk_state_name(job.state)
        if is_final_state(raw) and raw != "SUCCEEDED":
            notes.append(f"batch {raw}: rows without a result go to the retry file")
        results = self._batch_results(job, rows, notes)
        return self._finish(opts, external_id, rows, results, set(), raw == "SUCCEEDED", notes)

    def fallback(self, spec: JobSpec, external_id: str) -> dict[str, Any]:
        """Cancel the batch, keep its results, answer the other rows through generateContent.

        With ``fallback: none`` nothing is sent on demand; the batch is still cancelled and
        whatever it produced is collected.
        """
        opts = GeminiJobOptions.from_spec(spec)
        notes: list[str] = []
        rows = self._rows(opts, external_id, notes)
        job = self._get(external_id)
        if not is_final_state(sdk_state_name(job.state)):
            try:
                self.cancel(external_id)
            except BackendError as exc:  # answering the rows matters more than the cancel
                self._note(external_id, f"cancel failed: {exc}")
            # the cancel is asynchronous: rows finished meanwhile must not be paid twice
            job = self._settle(external_id, self._get(external_id), notes)
        results = self._batch_results(job, rows, notes)
        # rows that errored in the batch get one on-demand attempt too
        todo = [r for r in rows if (results.get(r.key) or {}).get("response") is None]
        if opts.fallback == "none":
            todo = []
        self._note(external_id, f"fallback: {len(todo)} row(s) on demand")
        # a job's own spend cap holds here, where its cost grows row by row
        answers, capped = answer_within(
            todo,
            lambda row: row.key,
            lambda row: self._generate(opts.model, row),
            model=opts.model,
            kept=results,
            cap_usd=opts.spend_usd,
            concurrency=self._fallback_concurrency,
            prices=opts.prices,
        )
        if capped is not None:
            notes.append(capped)
        fallback_keys = set()  # rows whose result (answer or error) came from the fallback
        for row in todo:
            answer = answers.get(row.key)
            if answer is not None and ("response" in answer or row.key not in results):
                results[row.key] = answer
                fallback_keys.add(row.key)
        return self._finish(opts, external_id, rows, results, fallback_keys, True, notes)

    def _generate(self, model: str, row: BatchRow) -> RowResult:
        contents, config = sdk_request(row.request)
        response, error = self._sdk.try_call(
            f"generate {row.key}",
            lambda: self._client.models.generate_content(
                model=model,
                contents=contents,
                config=types.GenerateContentConfig.model_validate(config) if config else None,
            ),
        )
        if error is not None:
            return {"error": error}
        return {"response": sdk_json(response)}
