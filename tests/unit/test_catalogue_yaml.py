"""The catalogue as teams write it: anchors and merge keys, `apis:` declared once, `${NAME}`."""

from __future__ import annotations

import pytest

from nightshift.config.loader import parse_catalogue
from nightshift.errors import CatalogueError

CMD = "jobs:\n  - {label: a, backend: command, argv: [x]}\n"
HTTP_API = """\
apis:
  reports:
    backend: http
    base_url: http://127.0.0.1:9
    submit: {url: /jobs, body: {task: x, size: 1}}
    id_path: job_id
    status_url: "/jobs/{id}"
    state_path: status
    states: {succeeded: [done], failed: [bad]}
"""


def problems(text: str, environ: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(CatalogueError) as info:
        parse_catalogue(text, "night.yaml", environ=environ or {})
    return [p.render("night.yaml") for p in info.value.problems]


def test_merge_keys_work_with_overrides_and_a_list_of_merges() -> None:
    text = """\
x-cmd: &cmd {backend: command, argv: [run], timeout: 5m}
definitions:
  slow: &slow {timeout: 20m, queued_timeout: 2m}
jobs:
  - {<<: *cmd, label: a}
  - <<: [*slow, *cmd]
    label: b
  - <<: *cmd
    label: c
    timeout: 1m
"""
    catalogue = parse_catalogue(text, "night.yaml", environ={})
    timeouts = {j.label: (j.timeout, j.queued_timeout) for j in catalogue.jobs}
    # the first merge wins over the later ones, a key written beside them over all
    assert timeouts == {"a": (300.0, None), "b": (1200.0, 120.0), "c": (60.0, None)}
    assert catalogue.line("jobs", 2, "timeout") == 10
    assert catalogue.line("jobs", 1, "argv") == 6  # merged: the line of its `<<`


def test_a_wrong_field_in_a_merged_anchor_names_the_job_and_the_anchor() -> None:
    text = "x-cmd: &cmd\n  backend: command\n  argv: [x]\n  timeout: never\njobs:\n"
    text += "  - label: a\n    <<: *cmd\n"
    assert problems(text) == [
        "night.yaml:7: job 'a': field 'timeout': not a duration: 'never' (use e.g. 500ms, 2s, "
        "30m, 24h or plain seconds) (merged from line 4)"
    ]


def test_a_job_takes_its_apis_declaration_its_own_fields_winning_key_by_key() -> None:
    text = HTTP_API + "jobs:\n  - label: r\n    api: reports\n    submit: {body: {task: r}}\n"
    (job,) = parse_catalogue(text, "night.yaml", environ={}).jobs
    assert job.backend == "http" and str(job.base_url).startswith("http://127.0.0.1:9")
    assert job.submit.url == "/jobs" and job.submit.body == {"task": "r", "size": 1}


def test_a_wrong_field_in_a_declaration_names_the_job_and_the_declaration() -> None:
    text = HTTP_API.replace("state_path: status", "state_path: [oops]")
    text += "jobs:\n  - label: r\n    api: reports\n"
    assert problems(text) == [
        "night.yaml:12: job 'r': field 'state_path': Input should be a valid string "
        "(from apis.reports, line 8)"
    ]


def test_an_unknown_api_names_the_ones_declared() -> None:
    text = HTTP_API + "jobs:\n  - label: r\n    api: report\n"
    assert problems(text) == [
        "night.yaml:12: job 'r': field 'api': no api 'report' in `apis:` (reports)"
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "jobs:\n  - ? [a, b]\n    : 1\n",
            "night.yaml:2: job '#1': a key must be plain text, not a mapping or a list "
            "(`? [a, b]`): write `name: value`",
        ),
        (
            "jobs:\n  - {label: !weird a, backend: command, argv: [x]}\n",
            "night.yaml:2: job '#1': field 'label': tag !weird is not allowed: a catalogue "
            "holds plain text, numbers, lists and mappings (remove the tag, or quote the value)",
        ),
        (
            "jobs:\n  - {label: a, backend: command, argv: [!!binary aGVsbG8=]}\n",
            "night.yaml:2: job '#1': field 'argv.0': tag !!binary is not allowed: a catalogue "
            "holds plain text, numbers, lists and mappings (remove the tag, or quote the value)",
        ),
        (
            CMD + "---\n" + CMD,
            "night.yaml:4: a second document (after `---`): one catalogue per file, or one "
            "document",
        ),
        (
            "jobs:\n  - label: a\n    on: 1\n",
            "night.yaml:3: job '#1': key 'on' is read as bool, not text: quote it (\"on\": ...)",
        ),
        (
            "jobs:\n  - {<<: 3, label: a}\n",
            "night.yaml:2: job '#1': `<<` merges a mapping or a list of mappings: write "
            "`<<: *name` or `<<: [*a, *b]`",
        ),
    ],
)
def test_what_a_catalogue_cannot_hold_is_refused_in_one_line(text: str, expected: str) -> None:
    assert problems(text) == [expected]


def test_values_come_from_the_environment_with_defaults_and_literals() -> None:
    text = (
        "jobs:\n  - label: a\n    backend: command\n"
        "    argv: ['${TOOL}', '--env=${STAGE:-staging}', '$${KEPT}']\n"
    )
    job = parse_catalogue(text, "n.yaml", environ={"TOOL": "/bin/run"}).jobs[0]
    assert job.argv == ["/bin/run", "--env=staging", "${KEPT}"]


def test_an_unset_variable_without_a_default_names_its_place() -> None:
    text = "jobs:\n  - label: a\n    backend: command\n    argv: ['${TOOL}']\n"
    assert problems(text) == [
        "night.yaml:4: job 'a': field 'argv.0': ${TOOL} is not set (give a default: ${TOOL:-value})"
    ]


def test_a_variable_never_fills_a_credential_field() -> None:
    text = (
        "jobs:\n  - label: a\n    backend: command\n    argv: [x]\n"
        "    env: {API_TOKEN: '${TOKEN}'}\n"
    )
    (problem,) = problems(text, {"TOKEN": "s3cret"})
    assert problem.startswith("night.yaml:5: job 'a': field 'env.API_TOKEN': ${TOKEN} may not")
    assert "s3cret" not in problem


def test_anchor_keys_at_the_top_are_not_part_of_the_schema() -> None:
    text = "x-anything: {a: 1}\ndefinitions: {b: [2]}\n" + CMD
    assert [j.label for j in parse_catalogue(text, "n.yaml", environ={}).jobs] == ["a"]


def test_aliases_that_blow_up_are_refused_not_expanded() -> None:
    text = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    for name, prev in zip("bcdefghi", "abcdefgh", strict=True):
        text += f"{name}: &{name} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"
    text += CMD
    (problem,) = problems(text)
    assert "values once aliases are expanded" in problem
