"""Reading a catalogue file: YAML with the line of every key, validated against the schema.

Every problem names the file, line, job and field (``CatalogueError``); a duplicate key, which
YAML would silently keep the last of, is one too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from nightshift.config.catalogue import BACKENDS, Catalogue
from nightshift.config.graph import graph_problems
from nightshift.config.http_api import http_problems
from nightshift.config.timers import timer_problems
from nightshift.errors import CatalogueError, CatalogueProblem

__all__ = ["load_catalogue", "not_utf8", "parse_catalogue"]


def load_catalogue(path: str | Path) -> Catalogue:
    """Read and validate a catalogue file; raise CatalogueError naming file, line, job, field."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        reason = f"cannot read: {exc.strerror}"
        if isinstance(exc, FileNotFoundError):
            reason += " (`nightshift init` writes a starter catalogue)"
        raise CatalogueError(path, [CatalogueProblem(reason)]) from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CatalogueError(path, [not_utf8(data, exc)]) from None
    return parse_catalogue(text, path)


def not_utf8(data: bytes, exc: UnicodeDecodeError) -> CatalogueProblem:
    """Where a file stops being UTF-8 text: its line, and the byte within the line."""
    line = data.count(b"\n", 0, exc.start) + 1
    column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
    byte = data[exc.start]
    return CatalogueProblem(
        f"not UTF-8 text (a binary file?): invalid byte 0x{byte:02x} at column {column}", line
    )


def parse_catalogue(text: str, path: str | Path = "<catalogue>") -> Catalogue:
    """Validate catalogue YAML text; ``path`` is only used in error messages."""
    path = Path(path)
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise CatalogueError(path, [CatalogueProblem(f"not valid YAML: {problem}", line)]) from exc
    if node is None:
        raise CatalogueError(path, [CatalogueProblem("empty catalogue: no jobs", 1)])
    lines: dict[tuple[Any, ...], int] = {}
    try:
        data = _to_python(node, (), lines)
    except _DuplicateKey as dup:
        raise CatalogueError(path, [dup.problem(lines)]) from None
    if not isinstance(data, dict):
        raise CatalogueError(path, [CatalogueProblem("the top level must be a mapping", 1)])
    try:
        catalogue = Catalogue.model_validate({**data, "path": path})
    except ValidationError as exc:
        problems = [_locate(err, data, lines) for err in exc.errors()]
        raise CatalogueError(path, problems) from None
    catalogue._lines = lines
    problems = graph_problems(catalogue, lines) + timer_problems(catalogue, lines)
    problems += http_problems(catalogue, lines)
    if problems:
        raise CatalogueError(path, problems)
    return catalogue


class _DuplicateKey(Exception):
    """A mapping names the same key twice (YAML would silently keep the last)."""

    def __init__(
        self, key: Any, line: int, first: int, at: tuple[Any, ...], label: Any = None
    ) -> None:
        self.key, self.line, self.first, self.at, self.label = key, line, first, at, label

    def problem(self, lines: dict[tuple[Any, ...], int]) -> CatalogueProblem:
        job = None
        if len(self.at) >= 2 and self.at[0] == "jobs":
            job = str(self.label) if self.label else f"#{self.at[1] + 1}"
        where = ".".join(str(p) for p in self.at[2:] if job) if job else ".".join(map(str, self.at))
        name = f"{where}.{self.key}" if where else str(self.key)
        message = f"duplicate key (first on line {self.first})"
        return CatalogueProblem(message, self.line, job, name)


def _to_python(node: yaml.Node, at: tuple[Any, ...], lines: dict[tuple[Any, ...], int]) -> Any:
    """Build plain data from a YAML node, remembering the line of every key and item."""
    lines[at] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = yaml.SafeLoader(key_node.value).construct_object(key_node)
            if key in out:
                first = lines[(*at, key)]
                label = out.get("label") if len(at) == 2 and at[0] == "jobs" else None
                raise _DuplicateKey(key, key_node.start_mark.line + 1, first, at, label)
            lines[(*at, key)] = key_node.start_mark.line + 1
            value = _to_python(value_node, (*at, key), lines)
            lines[(*at, key)] = key_node.start_mark.line + 1
            out[key] = value
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_to_python(item, (*at, i), lines) for i, item in enumerate(node.value)]
    loader = yaml.SafeLoader("")
    return loader.construct_object(node)


def _locate(err: Any, data: dict[str, Any], lines: dict[tuple[Any, ...], int]) -> CatalogueProblem:
    """Turn one pydantic error into a problem with line, job label and field."""
    loc = list(err["loc"])
    if len(loc) >= 3 and loc[0] == "jobs" and loc[2] in BACKENDS:
        del loc[2]  # the union's tag, not a key of the file (a job may have a `deployment:`)
    elif loc[:1] == ["limits"] and loc[-1:] == ["[key]"]:  # a limit for no known backend
        loc = loc[:-1]
        err = {**err, "type": "union_tag_invalid"}
    job = None
    if len(loc) >= 2 and loc[0] == "jobs" and isinstance(loc[1], int):
        raw = data.get("jobs") or []
        item = raw[loc[1]] if loc[1] < len(raw) else None
        label = item.get("label") if isinstance(item, dict) else None
        job = str(label) if label else f"#{loc[1] + 1}"
        field_parts = loc[2:]
    else:
        field_parts = loc
    line = None
    for cut in range(len(loc), 0, -1):
        if tuple(loc[:cut]) in lines:
            line = lines[tuple(loc[:cut])]
            break
    message = err["msg"]
    if err["type"] == "extra_forbidden":
        message = "unknown key"
    elif err["type"] == "missing":
        message = "required field is missing"
    elif err["type"] == "union_tag_invalid":
        message = f"unknown backend; use one of: {', '.join(BACKENDS)}"
        field_parts = ["backend"] if job else field_parts
    elif err["type"] == "union_tag_not_found":
        message = f"missing 'backend'; use one of: {', '.join(BACKENDS)}"
        field_parts = ["backend"]
    elif err["type"] == "string_pattern_mismatch" and field_parts[-1:] == ["label"]:
        message = "labels use only a-z, 0-9 and : _ . -"
    elif err["type"] == "string_pattern_mismatch" and field_parts[-1:] == ["deployment"]:
        message = 'name the deployment as "flow-name/deployment-name"'
    elif err["type"] == "string_pattern_mismatch" and field_parts[-1:] == ["api_url"]:
        message = "must be an http(s):// URL of a Prefect API"
    elif err["type"] == "greater_than":
        message = f"must be more than {err['ctx']['gt']}"
    elif message.startswith("Value error, "):
        message = message.removeprefix("Value error, ")
    field_name = ".".join(str(p) for p in field_parts) or None
    return CatalogueProblem(message, line, job, field_name)
