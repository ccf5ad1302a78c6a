"""At-most-once batch creates: a batch carries its submission key as display name, and is looked
for by that name before a create is repeated.

Gotcha: google-genai retries a ``batches.create`` POST itself (HttpRetryOptions), so a batch
made by a request whose answer was lost is made again. Creates go out with SDK retries off;
only the lookup below decides whether to create again. A create refused for now (429, 5xx, a
timeout) is tried again within ``patience``, honouring Retry-After, the batch looked for by
its display name before every resend.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from google import genai
from google.genai import types

from nightshift.backends.gemini.batch_input import BatchRow
from nightshift.backends.gemini.client import Failure, SdkCaller
from nightshift.backends.gemini.options import GeminiJobOptions
from nightshift.backends.gemini.results import inline_request
from nightshift.backends.patience import Patience, submit_patiently
from nightshift.errors import PermanentBackendError, TransientBackendError

__all__ = ["LOOKUP_SKEW", "BatchCreator"]

# how much earlier than our clock the API's create_time of our batch may read
LOOKUP_SKEW = timedelta(minutes=2)
# one request, whatever the client's HttpRetryOptions say
_NO_RETRY = types.HttpOptions(retry_options=types.HttpRetryOptions(attempts=1))


@dataclass(frozen=True)
class BatchCreator:
    """Creates a batch at most once per display name, finding one whose answer was lost."""

    client: genai.Client
    sdk: SdkCaller
    list_limit: int = 500  # batches one lookup reads, newest first
    patience: Patience = field(default_factory=Patience)  # how long a refused create retries

    def find(self, name: str, since: datetime) -> Any | None:
        """The batch named ``name`` created since ``since``; None if there is none.

        Several are a PermanentBackendError: which one the night is watching can't be known.
        """
        found = self.sdk.call("look for the batch", lambda: self._walk(name, since - LOOKUP_SKEW))
        if len(found) > 1:
            ids = ", ".join(str(job.name) for job in found)
            raise PermanentBackendError(
                f"{len(found)} batches named {name!r} since {since:%Y-%m-%d %H:%M:%S}Z ({ids}): "
                "a duplicate may exist; keep one (`batches.list`, display name above), "
                "cancel the others"
            )
        return found[0] if found else None

    def _walk(self, name: str, since: datetime) -> list[Any]:
        pager = self.client.batches.list(config=types.ListBatchJobsConfig(page_size=100))
        found = []
        for seen, job in enumerate(pager, start=1):
            made = job.create_time
            if job.display_name == name and (made is None or _aware(made) >= since):
                found.append(job)
            if seen >= self.list_limit:
                break
        return found

    def source(self, opts: GeminiJobOptions, rows: list[BatchRow], label: str) -> tuple[Any, str]:
        """The batch's ``src`` (inline requests or an uploaded file) and how it was sent."""
        size = opts.input.stat().st_size
        if len(rows) <= opts.inline_threshold_rows and size <= opts.inline_threshold_bytes:
            return [inline_request(row) for row in rows], "inline"
        # a retried upload only costs storage: the SDK and we may retry it
        config = types.UploadFileConfig(mime_type="application/jsonl", display_name=label)
        file = self.sdk.call_retrying(
            "upload input", lambda: self.client.files.upload(file=opts.input, config=config)
        )
        return file.name, f"file {file.name}"

    def create(self, model: str, src: Any, name: str) -> Any:
        """Create the batch once; a lost answer is resolved by looking, never by re-sending."""
        began = datetime.now(UTC)
        config = types.CreateBatchJobConfig(display_name=name, http_options=_NO_RETRY)
        asked: dict[int, float | None] = {}

        def send() -> Any:
            result = self.sdk.attempt(
                "create batch",
                lambda: self.client.batches.create(model=model, src=src, config=config),
            )
            if isinstance(result, Failure):
                asked[id(result.error)] = result.retry_after
                raise result.error
            return result

        try:
            return submit_patiently(
                send, lambda: self.find(name, began), self.patience, lambda e: asked.get(id(e))
            )
        except TransientBackendError as exc:
            raise TransientBackendError(
                f"{exc}; no batch named {name!r} found: the retry looks again before creating"
            ) from None
        except PermanentBackendError as exc:
            if "a duplicate may exist" not in str(exc):
                raise
            raise PermanentBackendError(
                f"a batch named {name!r} may exist, check `batches.list` before rerunning: {exc}"
            ) from None


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
