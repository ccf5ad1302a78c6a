"""Reading a catalogue file: YAML with the line of every key, validated against the schema.

Every problem names the file, line, job and field (``CatalogueError``); a duplicate key, which
YAML would silently keep the last of, is one too. YAML as teams write it (anchors, merge keys),
``apis:`` declarations and ``${NAME}`` values are read by ``yaml_tree`` and ``expand``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from nightshift.config.catalogue import BACKENDS, Catalogue
from nightshift.config.expand import expand
from nightshift.config.graph import graph_problems
from nightshift.config.hints import type_hint, unknown_key
from nightshift.config.http_api import http_problems
from nightshift.config.timers import timer_problems
from nightshift.config.yaml_tree import Tree, YamlRefused, read_yaml
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


def parse_catalogue(
    text: str, path: str | Path = "<catalogue>", environ: Mapping[str, str] | None = None
) -> Catalogue:
    """Validate catalogue YAML text; ``path`` is only used in error messages. ``${NAME}``
    values are read from ``environ`` (the process's environment by default)."""
    path = Path(path)
    try:
        tree = read_yaml(text)
    except RecursionError:  # PyYAML composes recursively: ~500 levels of nesting
        deep = CatalogueProblem("nested too deeply to be a catalogue", None)
        raise CatalogueError(path, [deep]) from None
    except YamlRefused as exc:
        raise CatalogueError(path, [_refused(exc)]) from None
    except yaml.YAMLError as exc:
        raise CatalogueError(path, [_not_yaml(exc, text)]) from None
    if tree.data is None:
        raise CatalogueError(path, [CatalogueProblem("empty catalogue: no jobs", 1)])
    if not isinstance(tree.data, dict):
        raise CatalogueError(path, [CatalogueProblem("the top level must be a mapping", 1)])
    if problems := expand(tree, os.environ if environ is None else environ):
        raise CatalogueError(path, problems)
    data, lines = tree.data, tree.lines
    try:
        catalogue = Catalogue.model_validate({**data, "path": path})
    except ValidationError as exc:
        problems = [_locate(err, data, tree) for err in exc.errors()]
        raise CatalogueError(path, problems) from None
    catalogue._lines = lines
    catalogue._sources = tree.sources
    problems = graph_problems(catalogue, lines) + timer_problems(catalogue, lines)
    problems += http_problems(catalogue, lines)
    if problems:
        raise CatalogueError(path, [_with_source(p, catalogue) for p in problems])
    return catalogue


def _with_source(problem: CatalogueProblem, catalogue: Catalogue) -> CatalogueProblem:
    """A job's problem found after validation, naming where a merged or declared field came
    from (the checks know the job's line only)."""
    if problem.source or not problem.job or not problem.field:
        return problem
    index = next((i for i, j in enumerate(catalogue.jobs) if j.label == problem.job), None)
    if index is None:
        return problem
    source = catalogue.source("jobs", index, *problem.field.split("."))
    return replace(problem, source=source) if source else problem


def _not_yaml(exc: yaml.YAMLError, text: str) -> CatalogueProblem:
    """YAML that does not parse, in one line: what is wrong and its line."""
    mark = getattr(exc, "problem_mark", None)
    line = mark.line + 1 if mark else None
    if isinstance(exc, yaml.reader.ReaderError):  # a character YAML does not allow
        line = text.count("\n", 0, exc.position) + 1
        problem = f"character {exc.character!r} is not allowed in YAML (a binary file?)"
    else:
        problem = getattr(exc, "problem", None) or str(exc)
    return CatalogueProblem("not valid YAML: " + " ".join(str(problem).split()), line)


def _refused(exc: YamlRefused) -> CatalogueProblem:
    """What the YAML may not hold, named as a catalogue problem: its job and field, if any."""
    at = exc.at
    if len(at) >= 2 and at[0] == "jobs" and isinstance(at[1], int):
        job = str(exc.label) if exc.label else f"#{at[1] + 1}"
        return CatalogueProblem(exc.message, exc.line, job, _dotted(at[2:]))
    return CatalogueProblem(exc.message, exc.line, None, _dotted(at))


def _unknown(field_parts: list[Any], in_job: bool, data: dict[str, Any], loc: list[Any]) -> str:
    """An unknown key's message: where it belongs, or the key it is likely a typo of."""
    from nightshift.config.catalogue import Catalogue, Defaults, job_model

    key = str(field_parts[-1]) if field_parts else ""
    defaults = list(Defaults.model_fields)
    if in_job and len(field_parts) == 1:
        raw = data.get("jobs") or []
        item = raw[loc[1]] if isinstance(loc[1], int) and loc[1] < len(raw) else {}
        backend = item.get("backend") if isinstance(item, dict) else None
        known = list(job_model(str(backend)).model_fields) if backend else []
        return unknown_key(key, known, in_job=True, defaults=defaults)
    if not in_job and len(field_parts) == 1:
        return unknown_key(key, list(Catalogue.model_fields), in_job=False, defaults=defaults)
    if not in_job and field_parts[:1] == ["defaults"] and len(field_parts) == 2:
        return unknown_key(key, defaults, in_job=False)
    return unknown_key(key, (), in_job=in_job)


def _dotted(parts: tuple[Any, ...]) -> str | None:
    return ".".join(str(p) for p in parts) or None


def _locate(err: Any, data: dict[str, Any], tree: Tree) -> CatalogueProblem:
    """Turn one pydantic error into a problem with line, job label and field (and where a
    value not written in the job came from)."""
    lines = tree.lines
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
    line, source = None, None
    for cut in range(len(loc), 0, -1):
        if tuple(loc[:cut]) in lines:
            line = lines[tuple(loc[:cut])]
            source = tree.sources.get(tuple(loc[:cut]))
            break
    message = err["msg"]
    if err["type"] == "extra_forbidden":
        message = _unknown(field_parts, job is not None, data, loc)
    elif (hint := type_hint(str(field_parts[-1]) if field_parts else "", err["type"],
                            err.get("input"))) is not None:  # fmt: skip
        message = hint
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
    return CatalogueProblem(message, line, job, field_name, source)
