"""The HTTP job API backend's pure rules: paths into answers, states, errors, templates, SSE.

No I/O here: the backend (``http.py``) sends requests and hands the answers to these.

| answer | meaning | the night |
|---|---|---|
| 2xx | ok | reads it |
| 429 (``Retry-After``) | backpressure: the quota is full | waits: no failure, no retry used |
| 5xx, a timeout, a dropped connection | transient | retries (the night's ``retries``) |
| 404 on a known id | unknown: not visible yet, or expired | the watcher tells which (seen yet?) |
| other 4xx | permanent, with the body's message | fails the job |
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Literal

from nightshift.backends.base import COST_USD, ExternalState, JobStatus
from nightshift.config.http_api import PATH_PATTERN, placeholders

__all__ = [
    "PATH_PATTERN",
    "Answer",
    "Paths",
    "SseEvent",
    "StateMap",
    "classify_answer",
    "error_message",
    "extract",
    "fill",
    "fill_url",
    "parse_retry_after",
    "placeholders",
    "sse_events",
    "to_status",
]

_PLACEHOLDER = re.compile(r"\{([A-Za-z_]+)\}")
_MISSING = object()
DEFAULT_RETRY_AFTER_S = 1.0
MAX_RETRY_AFTER_S = 300.0
_MESSAGE_KEYS = ("error", "message", "detail", "error_description", "title")


def extract(data: Any, path: str, default: Any = _MISSING) -> Any:
    """The value at dotted ``path`` in ``data`` (list items by index); KeyError naming the part
    that is missing unless a ``default`` is given."""
    here = data
    for part in path.split("."):
        if isinstance(here, Mapping) and part in here:
            here = here[part]
        elif isinstance(here, list) and part.isdigit() and int(part) < len(here):
            here = here[int(part)]
        else:
            if default is not _MISSING:
                return default
            raise KeyError(f"no {part!r} at {path!r} in the answer")
    return here


def fill(value: Any, values: Mapping[str, str]) -> Any:
    """``value`` (JSON: dicts, lists, strings) with each ``{name}`` of ``values`` filled in.

    Other braces are left as they are, so a JSON-looking string survives.
    """
    if isinstance(value, str):
        return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), value)
    if isinstance(value, Mapping):
        return {k: fill(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [fill(v, values) for v in value]
    return value


def fill_url(template: str, values: Mapping[str, str]) -> str:
    """A URL template with its placeholders filled in, each value percent-encoded."""
    from urllib.parse import quote

    return _PLACEHOLDER.sub(
        lambda m: quote(values[m.group(1)], safe=",") if m.group(1) in values else m.group(0),
        template,
    )


@dataclass(frozen=True)
class StateMap:
    """The API's state values -> ExternalState (each value in one list of the catalogue)."""

    values: Mapping[str, ExternalState]

    @classmethod
    def of(cls, lists: Mapping[str, Iterable[str]]) -> StateMap:
        """From the catalogue's ``states: {queued: [...], running: [...], ...}``."""
        out: dict[str, ExternalState] = {}
        for ours, theirs in lists.items():
            for value in theirs:
                out[str(value).lower()] = ExternalState(ours)
        return cls(out)

    def state(self, value: Any) -> ExternalState:
        """Our state of the API's value; ValueError naming an unmapped one."""
        try:
            return self.values[str(value).lower()]
        except KeyError:
            known = ", ".join(sorted(self.values))
            raise ValueError(
                f"state {value!r} is not mapped (the catalogue maps: {known})"
            ) from None


@dataclass(frozen=True)
class Paths:
    """Where things are in a job's answer (dotted paths; None: not given)."""

    state: str
    id: str | None = None
    result: str | None = None
    error: str | None = None
    cost: str | None = None
    created_at: str | None = None
    started_at: str | None = None
    finished_at: str | None = None


def _time(value: Any) -> datetime | None:
    if value in (None, ""):
        return None
    try:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return datetime.fromtimestamp(float(value), UTC)
        parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except (TypeError, ValueError, OverflowError):
        return None  # a time we can't read is no time: the night dates the change itself
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def to_status(answer: Any, paths: Paths, states: StateMap) -> JobStatus:
    """A JobStatus of one job's answer; ValueError when its state is missing or unmapped."""
    try:
        raw = extract(answer, paths.state)
    except KeyError as exc:
        raise ValueError(str(exc).strip("'\"")) from None
    state = states.state(raw)

    def get(path: str | None) -> Any:
        return None if path is None else extract(answer, path, None)

    error = get(paths.error)
    detail = None
    if state is ExternalState.FAILED or (state.final and error):
        detail = _text(error) if error not in (None, "") else f"the API says {raw!r}"
    extra: dict[str, Any] = {"state": raw}
    if paths.result is not None and (result := get(paths.result)) is not None:
        extra["result"] = result
    if paths.id is not None and (found := get(paths.id)) is not None:
        extra["job_id"] = found
    if state.final and (usd := _usd(get(paths.cost))) is not None:
        extra[COST_USD] = usd
    return JobStatus(
        state=state,
        started_at=_time(get(paths.started_at)),
        finished_at=_time(get(paths.finished_at)),
        created_at=_time(get(paths.created_at)),
        detail=detail,
        extra=extra,
    )


def _usd(value: Any) -> float | None:
    """A cost the answer gives (a number, or a number as text); None: none, or not a number."""
    if isinstance(value, bool):
        return None
    try:
        usd = float(value) if isinstance(value, int | float | str) else math.nan
    except ValueError:
        return None
    return usd if math.isfinite(usd) and usd >= 0 else None


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, Mapping):
        for key in _MESSAGE_KEYS:
            if isinstance(value.get(key), str | Mapping):
                return _text(value[key])
    return json.dumps(value, default=str)[:500]


Kind = Literal["ok", "backpressure", "transient", "permanent", "expired"]


@dataclass(frozen=True)
class Answer:
    """What one HTTP answer means to the night."""

    kind: Kind
    message: str = ""
    retry_after_s: float | None = None  # backpressure: how long to wait


def parse_retry_after(value: str | None, now: datetime | None = None) -> float:
    """Seconds to wait from a ``Retry-After`` header (seconds or an HTTP date), bounded."""
    if not value:
        return DEFAULT_RETRY_AFTER_S
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return DEFAULT_RETRY_AFTER_S
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


def error_message(body: str, limit: int = 300) -> str:
    """The message in an error answer's body (JSON ``error``/``message``/``detail``), else its
    text, cut to ``limit`` characters."""
    text = body.strip()
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if data is not None:
        text = _text(data)
    text = " ".join(text.split())
    return (text[: limit - 1] + "…") if len(text) > limit else text or "(empty body)"


def classify_answer(
    status_code: int,
    body: str = "",
    headers: Mapping[str, str] | None = None,
    *,
    known_id: bool = False,
    now: datetime | None = None,
) -> Answer:
    """What an HTTP answer means: ok, backpressure, transient, permanent or expired.

    ``known_id``: the request named a job the night submitted, so a 404 means the API does
    not know it (not visible yet, or its record expired: the API's TTL), not a wrong URL.
    """
    headers = {k.lower(): v for k, v in (headers or {}).items()}
    if 200 <= status_code < 300:
        return Answer("ok")
    message = f"HTTP {status_code}: {error_message(body)}"
    if status_code == 429:
        wait = parse_retry_after(headers.get("retry-after"), now)
        return Answer("backpressure", message, wait)
    if status_code == 404 and known_id:
        return Answer("expired", f"the API does not know the job: {message}")
    if status_code >= 500 or status_code in (408, 425):
        return Answer("transient", message)
    return Answer("permanent", message)


@dataclass
class SseEvent:
    """One Server-Sent Event."""

    event: str = "message"
    data: str = ""
    id: str | None = None
    retry_ms: int | None = None


@dataclass
class SseParser:
    """Server-Sent Events from lines, as the spec says (``data`` lines joined, comments skipped)."""

    _event: str = ""
    _data: list[str] = field(default_factory=list)
    _id: str | None = None
    _retry: int | None = None

    def feed(self, line: str) -> SseEvent | None:
        """Take one line (without its end); an event when a blank line completes one."""
        if line == "":
            if not self._data and not self._event:
                return None
            done = SseEvent(self._event or "message", "\n".join(self._data), self._id, self._retry)
            self._event, self._data, self._retry = "", [], None
            return done
        if line.startswith(":"):
            return None  # a comment (a keep-alive)
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            self._id = value
        elif name == "retry" and value.isdigit():
            self._retry = int(value)
        return None


def sse_events(lines: Iterable[str]) -> Iterator[SseEvent]:
    """The events in a sequence of lines."""
    parser = SseParser()
    for line in lines:
        if (event := parser.feed(line.rstrip("\r\n"))) is not None:
            yield event
