"""The catalogue's job fields, per backend, drawn from the models themselves: docs/reference.md.

``render_reference()`` is the page: for each backend its fields (those every job has, then its
own) with their type, default and whether they are required, a line on each, and a worked
example that validates. A field the models gain without a line here fails
``tests/unit/test_reference.py``, as does a page that drifted from the models:
``python -m nightshift.config.reference > docs/reference.md`` writes it again.
"""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from nightshift.config.catalogue import BACKENDS, job_model

__all__ = ["CONTRACTS", "DESCRIPTIONS", "EXAMPLES", "field_rows", "render_reference"]

DESCRIPTIONS: dict[str, str] = {
    # every job
    "label": "the job's name in every page and the ledger: a-z, 0-9 and `: _ . -`",
    "backend": "which service runs it",
    "depends_on": "labels that must succeed first: the job and they run as one chain, in order",
    "timeout": "cancel it past this (`learned`: past its usual p95 plus `over_expected`)",
    "queued_timeout": "give up on it when queued longer than this (`defaults.queued_timeout`)",
    "visible_within": "how long a fresh id may be unknown there (`defaults.visible_within`)",
    "over_expected": "with `timeout: learned`: the margin over its usual p95 before a cancel",
    "cost": "what one run costs, `4.10` or `{usd: 4.10}`, until its results say (paid job)",
    "expect": "how long it usually takes, until its own nights teach it (plan, forecast, watch)",
    "spend": "its own spend cap, `{usd: 10}`: a paid submit past it is not made",
    # command
    "argv": 'the program and its arguments, a list: `[python, x.py]`, `[sh, -c, "a | b"]`',
    "cwd": "the folder it runs in (default: the night's)",
    "env": "variables it gets besides the night's environment minus secrets",
    "pass_env": "names of secret variables it may see (they are removed otherwise)",
    # cli
    "task": "the task text handed to the job CLI (`agy run --json --task ...`)",
    "model": "the model the job uses (job CLI: its `--model`; Gemini: the batch's model)",
    # gemini_batch
    "input": "the JSONL file of requests, one per line, relative to the catalogue",
    "output": "where the rows' answers are written (JSONL), relative to the catalogue",
    "sla": "the batch's deadline: at `sla_fallback_at` of it missing rows are answered on demand",
    "fallback": "answer missing rows on demand at 80 % of the SLA (`false`: never)",
    "inline_threshold_rows": "above this many rows the input is uploaded as a file",
    "inline_threshold_bytes": "above this size the input is uploaded as a file",
    # deployment
    "deployment": 'the Prefect deployment to run, `"flow-name/deployment-name"`',
    "parameters": "the flow run's parameters",
    "work_queue": "the work queue to put the flow run on (default: the deployment's)",
    "job_variables": "the flow run's job variables (the work pool's overrides)",
    # http
    "base_url": "the service's URL; paths below are relative to it",
    "submit": "the request that creates a job: `{url, method, headers, body}`",
    "auth": "how requests authenticate: `{env: TOKEN_VAR}` or a Prefect Secret block",
    "id_path": "where the job's id is in the create answer (dotted: `data.id`)",
    "status_url": "the job's status URL, `{id}` in it",
    "state_path": "where the state is in a status answer (dotted)",
    "states": "the service's state names for queued, running, succeeded, failed (cancelled)",
    "result_path": "where the job's result is in its final answer",
    "error_path": "where a failed job's error is in its final answer",
    "cost_path": "where what the job cost (USD) is in its final answer",
    "created_at_path": "where the job's creation time is in an answer",
    "started_at_path": "where the job's start time is in an answer",
    "finished_at_path": "where the job's end time is in an answer",
    "cancel": "the request that cancels a job, `{url, method}`",
    "list": "a listing of many jobs at once (fewer status calls)",
    "lookup": "how to find the job of a create answer that was lost",
    "logs_url": "the job's log URL, `{id}` in it (its tail is kept when it fails)",
    "stream_url": "a Server-Sent Events URL of job answers (fewer status calls)",
    "request_timeout": "one HTTP request's timeout",
    "quota_wait": "how long a 429 answer is waited out before the submit gives up",
}

EXAMPLES: dict[str, str] = {
    "command": """\
jobs:
  - label: audit:internal-links
    backend: command
    argv: [sh, -c, "python scripts/audit.py --site docs | tee audit.log"]
    timeout: 20m
""",
    "cli": """\
jobs:
  - label: generate:articles
    backend: cli
    task: "write the three articles of tomorrow's newsletter"
    expect: 40m
""",
    "gemini_batch": """\
jobs:
  - label: report:weekly
    backend: gemini_batch
    model: gemini-2.5-flash
    input: batches/weekly.jsonl   # one request a line: {"key": "r1", "request": {...}}
    output: out/weekly.jsonl
    sla: 24h
""",
    "deployment": """\
jobs:
  - label: reindex:search
    backend: deployment
    deployment: reindex/nightly
    parameters: {full: false}
""",
    "http": """\
jobs:
  - label: export:orders
    backend: http
    base_url: https://jobs.internal
    auth: {env: JOBS_TOKEN}
    submit: {url: /jobs, body: {task: export-orders}}
    id_path: id
    status_url: "/jobs/{id}"
    state_path: status
    states: {queued: [queued], running: [started], succeeded: [finished], failed: [failed]}
""",
}


# what the other side must do: the contract a backend speaks to
CONTRACTS: dict[str, str] = {
    "command": (
        "The other side: a program. Its exit code decides (0 succeeded, anything else failed); "
        "its output goes to the job's log, whose last 40 lines are kept when it fails. A pipe or "
        'a whole command line is `[sh, -c, "a | b"]`. It runs detached: it outlives the '
        "night's process, and a rerun re-attaches to it."
    ),
    "cli": (
        "The other side: a job CLI (`NIGHTSHIFT_AGY` or `cli.executable`), spoken to only "
        "through JSON. `run --detach --json --task T [--model M] [--name KEY]` prints "
        '`{"job_id": "..."}`; `jobs get ID --json` and `jobs list --json` print job objects '
        '`{"job_id", "state", "exit_code", "started_at", "finished_at", "task", "model", '
        '"created_at", "name"}` (`created_at` and `name` optional; times ISO 8601), `state` one '
        "of `queued`, `running`, `succeeded`, `failed`, `cancelled`; `jobs cancel ID` cancels. "
        'Exit code 75 means "busy, try again"; human output is never read. `model` defaults '
        "to `gemini-3.5-flash`."
    ),
    "gemini_batch": (
        "The other side: the Gemini Batch API (google-genai). One line of `input`: "
        '`{"key": "r1", "request": {"contents": [{"parts": [{"text": "Summarize ..."}]}]}}`; '
        "each key comes back in `output` or in `<output stem>.retry.jsonl` "
        "([Gemini batches](gemini.md))."
    ),
    "deployment": (
        "The other side: a Prefect deployment; its flow run is the job (its final state "
        "decides), on whatever work pool it names."
    ),
    "http": (
        "The other side: your job API: a POST that creates a job and answers its id, a GET "
        "of its status; the rest is declared in the job ([HTTP job APIs](http-backend.md))."
    ),
}


def _type(annotation: Any) -> str:
    """A field's type in words: ``duration``, ``list of strings``, ``mapping``, ``cli``."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        if any("parse_duration" in repr(m) for m in args[1:]):
            return "duration (`90s`, `20m`, `1h`)"
        return _type(args[0])
    if origin in (typing.Union, types.UnionType):
        kept = [a for a in args if a is not type(None)]
        return " or ".join(_type(a) for a in kept)
    if origin is typing.Literal:
        return " or ".join(f"`{a}`" for a in args)
    if origin is list:
        return f"list of {_type(args[0])}s" if args else "list"
    if origin is dict:
        return "mapping"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "mapping"
    names = {str: "string", int: "whole number", float: "number", bool: "true or false"}
    if annotation in names:
        return names[annotation]
    return getattr(annotation, "__name__", str(annotation)).lower()


def _default(field: Any) -> str:
    if field.is_required():
        return ""
    default = field.default
    if default is PydanticUndefined or default is None:
        return "none"
    if default in ([], {}):
        return "empty"
    return f"`{default}`"


def field_rows(backend: str) -> list[tuple[str, str, str, bool, str]]:
    """(field, type, default, required, what it is) of a job of ``backend``."""
    model = job_model(backend)
    rows = []
    for name, field in model.model_fields.items():
        if field.exclude:  # set by another field (`timeout: learned`), never written
            continue
        rows.append(
            (
                name,
                _type(field.annotation),
                _default(field),
                field.is_required(),
                DESCRIPTIONS[name],
            )
        )
    return rows


def render_reference() -> str:
    """docs/reference.md."""
    out = [
        "# Catalogue reference: every job field, per backend",
        "",
        "Generated from the catalogue's models (`python -m nightshift.config.reference >",
        "docs/reference.md`); a test keeps it equal to what the models accept. The night-wide",
        "settings (`defaults:`, `limits:`, `notify:`, ...) are in [catalogue.md](catalogue.md).",
    ]
    for backend in BACKENDS:
        out += ["", f"## `{backend}`", "", "| field | type | default | required | what it is |"]
        out.append("|---|---|---|---|---|")
        for name, kind, default, required, what in field_rows(backend):
            what = what.replace("|", "\\|")  # a pipe in a cell is text, not a column
            out.append(f"| `{name}` | {kind} | {default} | {'yes' if required else ''} | {what} |")
        out += ["", "Example:", "", "```yaml", EXAMPLES[backend].rstrip("\n"), "```"]
        out += ["", CONTRACTS[backend]]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(render_reference(), end="")
