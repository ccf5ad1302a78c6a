"""Catalogue jobs of the ``http`` backend: a good declaration loads; each bad one exits 4 naming
file:line, job and field; a token is never printed."""

from __future__ import annotations

from pathlib import Path

import pytest

from nightshift.cli.main import main
from nightshift.config.catalogue import HttpJob
from nightshift.config.loader import parse_catalogue
from nightshift.engine.jobspec import job_spec

TOKEN = "s3cr3t-token-value"
GOOD = """\
defaults: {deadline: 8h}
jobs:
  - label: etl:orders
    backend: http
    base_url: "http://jobs.internal:8000"
    submit:
      method: post
      url: /jobs
      body: {task: "orders for {label}", key: "{key}", seconds: 1}
      headers: {X-Team: data}
    auth: {env: JOBS_API_TOKEN}
    id_path: job_id
    status_url: "/jobs/{id}"
    state_path: status
    states:
      queued: [queued, deferred]
      running: [started]
      succeeded: [finished]
      failed: [failed]
      cancelled: [canceled, stopped]
    result_path: result
    error_path: error
    cancel: {url: "/jobs/{id}/cancel"}
    list: {url: "/jobs?ids={ids}", items_path: jobs}
    lookup: {url: "/jobs?key={key}", items_path: jobs}
    logs_url: "/jobs/{id}/logs"
    stream_url: "/jobs/{id}/stream"
    timeout: 2h
    over_expected: 30m
"""


def test_a_good_http_job_loads_and_reaches_its_backend(tmp_path: Path) -> None:
    catalogue = parse_catalogue(GOOD, tmp_path / "nightshift.yaml")
    job = catalogue.job("etl:orders")
    assert isinstance(job, HttpJob)
    assert (job.submit.method, job.timeout, job.over_expected, job.learned) == (
        "POST",
        7200,
        1800,
        True,
    )
    spec = job_spec(catalogue, "etl:orders", "cat/n/etl:orders/1")
    assert spec.options["submit"]["body"]["key"] == "{key}"  # filled in by the backend
    assert spec.options["submission_key"] == "cat/n/etl:orders/1"


def test_timeout_learned_alone_means_the_default_margin(tmp_path: Path) -> None:
    text = GOOD.replace("    timeout: 2h\n    over_expected: 30m\n", "    timeout: learned\n")
    job = parse_catalogue(text, tmp_path / "n.yaml").job("etl:orders")
    assert (job.learned, job.timeout, job.over_expected) == (True, None, None)


def _swap(old: str, new: str) -> str:
    assert old in GOOD, old
    return GOOD.replace(old, new, 1)


# (what is wrong, the catalogue, the field named, words in the message)
BAD = [
    ("submit url not http", _swap("url: /jobs\n", "url: ftp://x/jobs\n"), "submit.url", "http(s)"),
    ("bad method", _swap("method: post", "method: FETCH"), "submit.method", "POST"),
    ("status url without id", _swap('status_url: "/jobs/{id}"', 'status_url: "/jobs"'),
     "status_url", "{id}"),
    ("status url unknown placeholder", _swap('status_url: "/jobs/{id}"',
     'status_url: "/jobs/{id}/{job}"'), "status_url", "{job}"),
    ("id path with a gap", _swap("id_path: job_id", "id_path: data..id"), "id_path", "pattern"),
    ("id path missing", _swap("    id_path: job_id\n", ""), "id_path", "required"),
    ("state path missing", _swap("    state_path: status\n", ""), "state_path", "required"),
    ("state path bad", _swap("state_path: status", 'state_path: "state of"'), "state_path",
     "pattern"),
    ("no succeeded state", _swap("      succeeded: [finished]\n", ""), "states.succeeded",
     "required"),
    ("no failed state", _swap("      failed: [failed]\n", ""), "states.failed", "required"),
    ("empty failed list", _swap("failed: [failed]", "failed: []"), "states.failed", "at least 1"),
    ("state mapped twice", _swap("running: [started]", "running: [started, queued]"), "states",
     "both"),
    ("unknown state name", _swap("      cancelled:", "      done: [ok]\n      cancelled:"),
     "states.done", "unknown key"),
    ("auth with two sources", _swap("auth: {env: JOBS_API_TOKEN}",
     "auth: {env: JOBS_API_TOKEN, secret_block: jobs-token}"), "auth", "exactly one"),
    ("auth with none", _swap("auth: {env: JOBS_API_TOKEN}", "auth: {header: X-Key}"), "auth",
     "exactly one"),
    ("auth env not a name", _swap("auth: {env: JOBS_API_TOKEN}", "auth: {env: 9-TOKEN}"),
     "auth.env", "pattern"),
    ("a token in the headers", _swap("headers: {X-Team: data}",
     f"headers: {{Authorization: Bearer {TOKEN}}}"), "submit.headers", "credential"),
    ("cancel url without id", _swap('cancel: {url: "/jobs/{id}/cancel"}',
     'cancel: {url: "/jobs/cancel"}'), "cancel.url", "{id}"),
    ("list url without ids", _swap('list: {url: "/jobs?ids={ids}", items_path: jobs}',
     'list: {url: "/jobs", items_path: jobs}'), "list.url", "{ids}"),
    ("lookup url without key", _swap('lookup: {url: "/jobs?key={key}", items_path: jobs}',
     'lookup: {url: "/jobs?key={id}", items_path: jobs}'), "lookup.url", "{id}"),
    ("logs url without id", _swap('logs_url: "/jobs/{id}/logs"', 'logs_url: "/logs"'),
     "logs_url", "{id}"),
    ("stream url without id", _swap('stream_url: "/jobs/{id}/stream"', 'stream_url: "/stream"'),
     "stream_url", "{id}"),
    ("a /path with no base_url", _swap('    base_url: "http://jobs.internal:8000"\n', ""),
     "submit.url", "base_url"),
    ("base_url not http", _swap('base_url: "http://jobs.internal:8000"', "base_url: jobs:8000"),
     "base_url", "pattern"),
    ("quota_wait zero", _swap("    id_path: job_id\n", "    id_path: job_id\n    quota_wait: 0s\n"),
     "quota_wait", "more than 0"),
    ("request timeout zero", _swap("    id_path: job_id\n",
     "    id_path: job_id\n    request_timeout: 0s\n"), "request_timeout", "more than 0"),
    ("result path bad", _swap("result_path: result", "result_path: .result"), "result_path",
     "pattern"),
    ("unknown key", _swap("    id_path: job_id\n", "    id_path: job_id\n    id_pth: x\n"),
     "id_pth", "unknown key"),
    ("over_expected zero", _swap("over_expected: 30m", "over_expected: 0s"), "over_expected",
     "more than 0"),
    ("submit missing", _swap("    submit:\n      method: post\n      url: /jobs\n"
     '      body: {task: "orders for {label}", key: "{key}", seconds: 1}\n'
     "      headers: {X-Team: data}\n", ""), "submit", "required"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "field", "words"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_a_bad_http_declaration_exits_4_naming_file_line_job_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, field: str, words: str
) -> None:
    path = tmp_path / "nightshift.yaml"
    path.write_text(text, encoding="utf-8")
    assert main(["validate", "--catalog", str(path)]) == 4
    err = capsys.readouterr().err
    line = next(x for x in err.splitlines() if f"field {field!r}" in x)
    assert f"{path}:" in line and "job 'etl:orders'" in line, err
    where = int(line.split(f"{path}:")[1].split(":")[0])
    assert 2 <= where <= len(text.splitlines()), line
    assert words in line, line
    assert TOKEN not in err


def test_there_are_at_least_20_bad_declarations() -> None:
    assert len(BAD) >= 20


def test_the_example_catalogue_http_job_is_valid(tmp_path: Path) -> None:
    text = (Path(__file__).resolve().parents[2] / "nightshift.example.yaml").read_text()
    head, block = text[: text.index("jobs:\n")], text[text.index("  # - label: etl:orders") :]
    lines = [line.replace("  # ", "  ", 1) for line in block.splitlines()]
    catalogue = parse_catalogue(head + "jobs:\n" + "\n".join(lines) + "\n", tmp_path / "x.yaml")
    job = catalogue.job("etl:orders")
    assert isinstance(job, HttpJob) and job.learned and job.stream_url == "/jobs/{id}/stream"
