"""Validate a Gemini batch input file: JSONL, one ``{"key": .., "request": {..}}`` per line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from nightshift.errors import InputFileError, InputProblem

if TYPE_CHECKING:
    from nightshift.config.catalogue import Catalogue

__all__ = [
    "BatchRow",
    "catalogue_input_problems",
    "load_batch_input",
    "parse_batch_input",
    "render_rows",
    "sdk_request",
]

# how far ahead we look when a line might be the start of a record split across lines
_SPLIT_LOOKAHEAD = 50
# REST GenerateContentRequest fields that google-genai takes inside GenerateContentConfig
_CONFIG_FIELDS = ("systemInstruction", "tools", "toolConfig", "safetySettings", "cachedContent")


class BatchRow(NamedTuple):
    """One valid input row: its key, the REST request and the 1-based line it came from."""

    key: str
    request: dict[str, Any]
    line: int


class _DuplicateJsonKey(ValueError):
    """A JSON object names one key twice (``json`` would silently keep the last)."""


def _strict_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for name, value in pairs:
        if name in seen:
            raise _DuplicateJsonKey(f"key {name!r} given twice in one object")
        seen[name] = value
    return seen


def _loads(text: str) -> Any:
    """``json.loads`` that refuses an object naming a key twice."""
    return json.loads(text, object_pairs_hook=_strict_object)


def _split_record_end(lines: list[str], start: int) -> int | None:
    """Index of the line that completes a JSON object begun on ``lines[start]``, if any."""
    if not lines[start].lstrip().startswith("{"):
        return None
    joined = lines[start]
    for end in range(start + 1, min(len(lines), start + 1 + _SPLIT_LOOKAHEAD)):
        joined += "\n" + lines[end]
        try:
            obj = _loads(joined)
        except ValueError:
            continue
        return end if isinstance(obj, dict) else None
    return None


def _check_record(obj: Any, line: int, first_seen: dict[str, int]) -> list[str]:
    """Reasons a parsed line is not a valid row (empty when it is)."""
    if not isinstance(obj, dict):
        return [f"expected a JSON object, got {type(obj).__name__}"]
    reasons = []
    key = obj.get("key")
    if "key" not in obj:
        reasons.append("missing 'key'")
    elif not isinstance(key, str):
        reasons.append(f"'key' must be a string, got {type(key).__name__}")
    elif not key.strip():
        reasons.append("'key' is empty")
    elif key in first_seen:
        reasons.append(f"duplicate key {key!r} (first on line {first_seen[key]})")
    else:
        first_seen[key] = line
    request = obj.get("request")
    if not isinstance(request, dict):
        reasons.append("missing 'request' object")
    elif not request.get("contents"):
        reasons.append("request has no 'contents'")
    elif not isinstance(request["contents"], list):
        reasons.append("request 'contents' must be a list")
    return reasons


def parse_batch_input(text: str, path: Path | str = "<input>") -> list[BatchRow]:
    """Rows of a JSONL input text; raises InputFileError listing every bad line."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline ends the last line; it is not a blank line
    problems: list[InputProblem] = []
    rows: list[BatchRow] = []
    first_seen: dict[str, int] = {}
    index = 0
    while index < len(lines):
        raw, line_no = lines[index], index + 1
        index += 1
        if not raw.strip():
            problems.append(InputProblem(line_no, "blank line"))
            continue
        try:
            obj = _loads(raw)
        except _DuplicateJsonKey as exc:
            problems.append(InputProblem(line_no, f"invalid JSON: {exc}"))
            continue
        except json.JSONDecodeError as exc:
            end = _split_record_end(lines, line_no - 1)
            if end is not None:
                reason = f"record split across lines {line_no}-{end + 1} (one record per line)"
                problems.append(InputProblem(line_no, reason))
                index = end + 1
            else:
                problems.append(InputProblem(line_no, f"invalid JSON: {exc.msg} (col {exc.colno})"))
            continue
        reasons = _check_record(obj, line_no, first_seen)
        if reasons:
            problems.append(InputProblem(line_no, "; ".join(reasons)))
        else:
            rows.append(BatchRow(obj["key"], obj["request"], line_no))
    if not rows and not problems:
        problems.append(InputProblem(1, "file has no requests"))
    if problems:
        raise InputFileError(Path(path), problems)
    return rows


def load_batch_input(path: Path | str) -> list[BatchRow]:
    """Read and validate an input file; unreadable files are an InputFileError too."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        reason = f"cannot read file: {getattr(exc, 'strerror', None) or exc}"
        raise InputFileError(path, [InputProblem(0, reason)]) from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        reason = f"not UTF-8: invalid byte 0x{data[exc.start]:02x} at column {column}"
        raise InputFileError(path, [InputProblem(line, reason)]) from None
    return parse_batch_input(text, path)


def render_rows(rows: list[BatchRow]) -> str:
    """Rows back as JSONL input text (valid input for the next night)."""
    return "".join(json.dumps({"key": r.key, "request": r.request}) + "\n" for r in rows)


def sdk_request(request: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """A REST GenerateContentRequest as google-genai ``(contents, config)`` arguments."""
    config: dict[str, Any] = dict(request.get("generationConfig") or {})
    for name in _CONFIG_FIELDS:
        if name in request:
            config[name] = request[name]
    return list(request["contents"]), config


def catalogue_input_problems(catalogue: Catalogue) -> tuple[list[str], list[str]]:
    """Every bad line of the batch inputs a catalogue names, and notes on inputs not there yet.

    A missing input of a job that depends on others is only a note: an earlier step may write it.
    """
    home = catalogue.home
    errors: list[str] = []
    notes: list[str] = []
    for job in catalogue.jobs:
        if job.backend != "gemini_batch":
            continue
        path = home / job.input
        if job.depends_on and not path.exists():
            notes.append(f"{path}: job {job.label!r}: not there yet (an earlier step may write it)")
            continue
        try:
            load_batch_input(path)
        except InputFileError as exc:
            # one problem, one line: a path with a line break in it is shown escaped
            shown = [f"{p.where(path)}: job {job.label!r}: {p.reason}" for p in exc.problems]
            errors += [line.replace("\n", "\\n").replace("\r", "\\r") for line in shown]
    return errors, notes
