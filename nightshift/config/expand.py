"""A catalogue as written -> as it runs: ``apis:`` declarations merged into their jobs, ``${NAME}``
values read from the environment, anchor-only keys (``x-...``, ``definitions``) dropped.

Pure: the data, its lines and the environment are handed in; every problem is returned with the
line it is on (a value that came from a declaration names that line too).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from nightshift.config.settings import is_secret_variable
from nightshift.config.yaml_tree import Tree
from nightshift.errors import CatalogueProblem

__all__ = ["expand"]

_VAR = re.compile(r"\$(\$)?\{([^}]*)\}")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_COPIED = 500_000  # values copied from declarations into jobs, at most
# fields that name where a credential is (its variable, its block): never the credential itself
_CREDENTIALS = frozenset({"token", "webhook", "token_block", "webhook_block", "secret_block"})


def expand(tree: Tree, environ: Mapping[str, str]) -> list[CatalogueProblem]:
    """Expand ``tree.data`` in place (it must be a mapping); the problems found on the way."""
    data = tree.data
    for key in [k for k in data if k == "definitions" or k.startswith("x-")]:
        del data[key]  # places to keep anchors: already merged where they are used
    problems = _apis(tree)
    problems += _environment(tree, data, (), environ)
    return problems


def _apis(tree: Tree) -> list[CatalogueProblem]:
    """Each job's ``api: NAME`` replaced by that declaration, the job's own fields winning."""
    data, lines = tree.data, tree.lines
    apis = data.pop("apis", {})
    if not isinstance(apis, dict) or not all(isinstance(v, dict) for v in apis.values()):
        return [CatalogueProblem("`apis:` maps names to backend settings", lines.get(("apis",)))]
    problems: list[CatalogueProblem] = []
    jobs = data.get("jobs")
    declared = _Declared(tree)
    for i, job in enumerate(jobs if isinstance(jobs, list) else []):
        if not isinstance(job, dict) or "api" not in job:
            continue
        name = job.pop("api")
        line = lines.get(("jobs", i, "api"), lines.get(("jobs", i)))
        if not isinstance(name, str) or name not in apis:
            known = ", ".join(sorted(map(str, apis))) or "none declared"
            label = str(job.get("label") or f"#{i + 1}")
            problems.append(
                CatalogueProblem(f"no api {name!r} in `apis:` ({known})", line, label, "api")
            )
            continue
        try:
            declared.merge_into(job, apis[name], ("jobs", i), ("apis", name), int(line or 0))
        except _TooLarge:
            message = f"`apis:` copied into the jobs comes to more than {_COPIED} values"
            return [CatalogueProblem(message, lines.get(("apis",)))]
    return problems


class _TooLarge(Exception):
    """The declarations copied into their jobs grew past ``_COPIED`` values."""


class _Declared:
    """The lines of the ``apis:`` section, indexed once: a job's copy reads them per key."""

    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        self.copied = 0  # values copied into jobs: a huge declaration used often is refused
        self.children: dict[tuple, list[tuple]] = {}
        for path in tree.lines:
            if len(path) >= 3 and path[0] == "apis":
                self.children.setdefault(path[:-1], []).append(path)

    def merge_into(
        self, job: dict[str, Any], declared: dict[str, Any], at: tuple, src: tuple, line: int
    ) -> None:
        """Copy what the job lacks from ``declared``, nested mappings key by key; what is
        copied reads as written on the job's ``api:`` line, from the declaration's line."""
        for key, value in declared.items():
            if key in job and isinstance(job[key], dict) and isinstance(value, dict):
                self.merge_into(job[key], value, (*at, key), (*src, key), line)
            elif key not in job:
                job[key] = _copy(value)
                self._lines(at, (*src, key), len(src), line)

    def _lines(self, at: tuple, src: tuple, depth: int, line: int) -> None:
        lines, sources = self.tree.lines, self.tree.sources
        self.copied += 1
        if self.copied > _COPIED:
            raise _TooLarge
        target = (*at, *src[depth:])
        lines[target] = line
        where = lines.get(src)
        sources[target] = sources.get(src) or f"from {src[0]}.{src[1]}, line {where}"
        for child in self.children.get(src, ()):
            self._lines(at, child, depth, line)


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _environment(
    tree: Tree, value: Any, at: tuple, environ: Mapping[str, str]
) -> list[CatalogueProblem]:
    """Fill every ``${NAME}`` and ``${NAME:-default}`` of the strings below ``value``."""
    problems: list[CatalogueProblem] = []
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        path = (*at, key)
        if isinstance(item, dict | list):
            problems += _environment(tree, item, path, environ)
        elif isinstance(item, str) and "${" in item:
            try:
                value[key], names = _fill(item, environ, _secret_field(path))
            except ValueError as exc:
                problems.append(_problem(tree, path, str(exc)))
                continue
            if names and path not in tree.sources:
                tree.sources[path] = "from " + ", ".join(f"${{{n}}}" for n in names)
    return problems


def _fill(text: str, environ: Mapping[str, str], secret: bool) -> tuple[str, list[str]]:
    """``text`` with its variables filled, and the names it read (a default taken, too)."""
    names: list[str] = []

    def one(match: re.Match[str]) -> str:
        if match.group(1):  # $${...}: a literal ${...}
            return "${" + match.group(2) + "}"
        name, sep, default = match.group(2).partition(":-")
        if not _NAME.match(name):
            raise ValueError(f"${{{match.group(2)}}} names no environment variable")
        if secret:
            raise ValueError(
                f"${{{name}}} may not fill a credential field: a token would show wherever the "
                "job is shown; give its variable's name (`auth: {env: NAME}`, `pass_env`)"
            )
        names.append(name)
        if environ.get(name) or (name in environ and not sep):
            return environ[name]
        if sep:  # unset or empty: the default, as the shell's ${NAME:-default}
            return default
        raise ValueError(f"${{{name}}} is not set (give a default: ${{{name}:-value}})")

    return _VAR.sub(one, text), names


def _secret_field(path: tuple) -> bool:
    """A field that holds (or names) a credential: under ``auth``, or a secret-like key."""
    keys = [p for p in path if isinstance(p, str)]
    if not keys:
        return False
    last = keys[-1].lower()
    return "auth" in keys or is_secret_variable(keys[-1]) or last in _CREDENTIALS


def _problem(tree: Tree, path: tuple, message: str) -> CatalogueProblem:
    job, field = None, ".".join(str(p) for p in path)
    if len(path) >= 2 and path[0] == "jobs" and isinstance(path[1], int):
        jobs = tree.data.get("jobs") or []
        label = jobs[path[1]].get("label") if isinstance(jobs[path[1]], dict) else None
        job, field = str(label or f"#{path[1] + 1}"), ".".join(str(p) for p in path[2:])
    source = tree.sources.get(path)
    return CatalogueProblem(message, tree.lines.get(path), job, field or None, source)
