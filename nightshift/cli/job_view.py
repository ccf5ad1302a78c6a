"""A job as ``nightshift validate`` shows it: as it finally is (after merge keys, ``apis:``
declarations and ``${NAME}`` values), each field with the line it came from.

Pure: a loaded catalogue in, text and JSON-ready data out. A job holds no secret itself (a token
is named by its variable), but any value under a secret-like key (``is_secret_variable``), or a
URL carrying a password, is shown as ``***`` all the same.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import BaseModel

from nightshift.config.durations import format_duration
from nightshift.config.settings import is_secret_variable

if TYPE_CHECKING:
    from nightshift.config.catalogue import AnyJob, Catalogue

__all__ = [
    "MASK",
    "FieldView",
    "job_fields",
    "job_json",
    "masked",
    "render_fields",
    "unknown_label",
]

MASK = "***"
# a job's fields that hold seconds: shown as the catalogue writes them (20m, 90s)
DURATIONS = frozenset(
    {"timeout", "queued_timeout", "visible_within", "over_expected", "sla", "retry_delay"}
    | {"request_timeout", "quota_wait"}  # http jobs
)
_COMMENT_AT = 44  # the column comments line up at, unless a field is longer


def masked(value: Any, model: Any = None) -> Any:
    """``value`` (``model`` dumped as JSON) with what may be a secret as ``***``: any value under a
    secret-like key of a mapping the catalogue writes freely (``env``, ``body``, ``parameters``,
    ``headers``), and any URL carrying a password. The schema's own field names (``pass_env``,
    ``auth.secret_block``) hold names of secrets, never secrets: they are shown."""
    if isinstance(value, str):
        return MASK if is_secret_variable("", value) else value  # a URL with a password
    if isinstance(value, list):
        items = model if isinstance(model, list | tuple) and len(model) == len(value) else None
        return [masked(v, items[i] if items else None) for i, v in enumerate(value)]
    if not isinstance(value, dict):
        return value
    if isinstance(model, BaseModel):
        return {k: masked(v, getattr(model, k, None)) for k, v in value.items()}
    given = model if isinstance(model, dict) else {}
    return {
        k: MASK if is_secret_variable(str(k)) and not _placeholder(v) else masked(v, given.get(k))
        for k, v in value.items()
    }


def _placeholder(value: Any) -> bool:
    """``{key}``, ``{label}``: a value the night fills in, never a secret (shown as written)."""
    return isinstance(value, str) and re.fullmatch(r"\{[a-z_]+\}", value) is not None


def job_json(job: AnyJob) -> dict[str, Any]:
    """The job as it finally is, JSON-ready and masked (``learned``: a ``timeout: learned``)."""
    return {**masked(job.model_dump(mode="json"), job), "learned": job.learned}


@dataclass
class FieldView:
    """One field of a job: its value, its line and, for a value not written in the job, where it
    came from; a mapping's keys each as a field of their own."""

    value: Any
    line: int | None = None
    source: str | None = None
    keys: dict[str, FieldView] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {"value": self.value, "line": self.line, "source": self.source}


def job_fields(catalogue: Catalogue, label: str) -> dict[str, FieldView]:
    """The fields the job sets (written, merged or declared), in the order of their lines;
    those left at their defaults are not shown. KeyError for an unknown label."""
    job = catalogue.job(label)
    index = catalogue.jobs.index(job)
    values = masked(job.model_dump(mode="json", exclude_unset=True), job)
    if job.learned and job.timeout is None:  # `timeout: learned` (or `learned: true`)
        values["timeout"] = "learned"
    views = _views(catalogue, ("jobs", index), values, top=True)
    return {**views, **_inherited(catalogue, job, views)}


# what a job takes from the night when it does not say: its timers, then the retry policy
_INHERITED = ("queued_timeout", "visible_within", "retries", "retry_delay")


def _inherited(
    catalogue: Catalogue, job: AnyJob, own: dict[str, FieldView]
) -> dict[str, FieldView]:
    """The values a job takes from ``defaults:`` (written there, or the built-in default), each
    said as such; and the night's deadline, which bounds a job with no ``timeout``."""
    out: dict[str, FieldView] = {}
    for key in _INHERITED:
        if key in own or getattr(job, key, None) is not None:
            continue
        value = getattr(catalogue.defaults, key)
        line = catalogue.line("defaults", key)
        said = "from defaults" if line is not None else "the default"
        out[key] = FieldView(value, line, said)
    if "timeout" not in own and job.timeout is None:
        deadline = catalogue.defaults.deadline
        line = catalogue.line("defaults", "deadline")
        out["timeout"] = FieldView(
            None, line, f"none: the night's deadline ({format_duration(deadline)}) bounds it"
        )  # its line: the deadline's, when written
    return out


def _views(
    catalogue: Catalogue, at: tuple[Any, ...], values: dict[str, Any], top: bool = False
) -> dict[str, FieldView]:
    out: dict[str, FieldView] = {}
    for key, value in values.items():
        path = (*at, key)
        line = catalogue.line(*path)
        if line is None and top and key == "timeout":  # learned from `learned:`/`over_expected`
            line = catalogue.line(*at, "learned") or catalogue.line(*at, "over_expected")
        view = FieldView(value, line, catalogue.source(*path))
        if isinstance(value, dict) and value:
            view.keys = _views(catalogue, path, value)
        out[key] = view
    first = ("label", "backend") if top else ()

    def order(item: tuple[int, str]) -> tuple[float, int, int]:
        position, key = item
        line = out[key].line
        return (float("inf") if line is None else line, key not in first, position)

    keys = [key for _, key in sorted(enumerate(out), key=order)]
    return {key: out[key] for key in keys}


def render_fields(fields: dict[str, FieldView]) -> list[str]:
    """One line a field, ``timeout: 20m    # line 12`` or ``base_url: ...    # line 9, from
    apis.reports, line 4``; a mapping's keys indented below it."""
    rows: list[tuple[str, str]] = []
    _rows(fields, 0, rows)
    width = max([len(left) for left, _ in rows if len(left) <= _COMMENT_AT], default=0)
    out = []
    for left, comment in rows:
        out.append(f"{left}{' ' * max(width - len(left) + 4, 4)}{comment}" if comment else left)
    return out


def _rows(fields: dict[str, FieldView], depth: int, rows: list[tuple[str, str]]) -> None:
    for key, view in fields.items():
        indent = "  " * depth
        comment = f"# {view.source}" if view.source else ""  # inherited: said where from
        if view.line is not None:
            comment = f"# line {view.line}" + (f", {view.source}" if view.source else "")
        if view.keys:
            rows.append((f"{indent}{key}:", comment))
            _rows(view.keys, depth + 1, rows)
            continue
        shown = _duration(view.value) if depth == 0 and key in DURATIONS else _text(view.value)
        rows.append((f"{indent}{key}: {shown}", comment))


def _duration(value: Any) -> str:
    """Seconds as the catalogue writes them (``20m``), when that form is exact; else ``90s``."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return _text(value)
    seconds = float(value)
    if seconds < 1:
        exact = (seconds * 1000).is_integer()
    elif seconds < 60:
        exact = seconds.is_integer()
    else:
        exact = (seconds / 60).is_integer()
    return format_duration(seconds) if exact else f"{seconds:g}s"


def _text(value: Any) -> str:
    """A value as YAML would read it back: plain text bare, anything ambiguous quoted."""
    if isinstance(value, str):
        return value if _plain(value) else json.dumps(value, ensure_ascii=False)
    return json.dumps(value, ensure_ascii=False)


def _plain(text: str) -> bool:
    if not text or text != text.strip() or "\n" in text:
        return False
    try:
        return bool(yaml.safe_load(text) == text)
    except yaml.YAMLError:
        return False


def unknown_label(label: str, path: str, labels: list[str]) -> str:
    """One line: no such job, and the known labels, the closest first."""
    close = difflib.get_close_matches(label, labels, n=len(labels), cutoff=0.5)
    known = [*close, *(other for other in labels if other not in close)]
    return f"nightshift validate: no job {label!r} in {path}; known: {', '.join(known) or 'none'}"
