"""Timers: 0 is refused, contradictions name file:line, job and field, long jobs are warned of."""

from __future__ import annotations

from pathlib import Path

import pytest

from nightshift.config.loader import load_catalogue, parse_catalogue
from nightshift.config.timers import schedule_interval, schedule_warnings
from nightshift.errors import CatalogueError
from tests.unit.test_catalogue import problems

CMD = "jobs:\n  - label: a\n    backend: command\n    argv: [x]\n"
BATCH = (
    "jobs:\n  - label: r\n    backend: gemini_batch\n    model: m\n"
    "    input: in.jsonl\n    output: out.jsonl\n"
)


@pytest.mark.parametrize("field", ["deadline", "queued_timeout", "visible_within", "sla"])
def test_a_default_timer_of_zero_is_refused(field: str) -> None:
    assert problems(f"defaults:\n  {field}: 0s\n" + CMD) == [
        f"night.yaml:2: field 'defaults.{field}': must be more than 0"
    ]


@pytest.mark.parametrize("field", ["timeout", "queued_timeout", "visible_within"])
def test_a_job_timer_of_zero_is_refused(field: str) -> None:
    assert problems(CMD + f"    {field}: 0\n") == [
        f"night.yaml:5: job 'a': field '{field}': must be more than 0"
    ]


def test_visible_within_that_is_no_duration_names_the_job_and_field() -> None:
    assert problems(CMD + "    visible_within: soon\n") == [
        "night.yaml:5: job 'a': field 'visible_within': not a duration: 'soon' "
        "(use e.g. 500ms, 2s, 30m, 24h or plain seconds)"
    ]


def test_a_batch_sla_of_zero_is_refused() -> None:
    assert problems(BATCH + "    sla: 0m\n") == [
        "night.yaml:7: job 'r': field 'sla': must be more than 0"
    ]


def test_a_batch_timeout_before_its_fallback_is_refused() -> None:
    assert problems(BATCH + "    sla: 10h\n    timeout: 7h\n") == [
        "night.yaml:8: job 'r': field 'timeout': timeout (7h00m) ends the batch before its "
        "fallback at 8h00m (0.8 x sla 10h00m); raise timeout, lower sla or set fallback: none"
    ]
    parse_catalogue(BATCH + "    sla: 10h\n    timeout: 7h\n    fallback: none\n")
    parse_catalogue(BATCH + "    sla: 10h\n    timeout: 9h\n")


def test_a_batch_queue_timer_past_its_fallback_is_refused() -> None:
    assert problems(BATCH + "    sla: 10h\n    queued_timeout: 9h\n") == [
        "night.yaml:8: job 'r': field 'queued_timeout': queued_timeout (9h00m) is not before "
        "the batch's fallback at 8h00m (0.8 x sla 10h00m), which takes over a batch still "
        "queued: it can never fire"
    ]
    parse_catalogue(BATCH + "    sla: 10h\n    queued_timeout: 2h\n")


def test_a_queue_timer_not_shorter_than_the_job_timeout_is_refused() -> None:
    assert problems(CMD + "    timeout: 5m\n    queued_timeout: 5m\n") == [
        "night.yaml:6: job 'a': field 'queued_timeout': queued_timeout (5m) is not shorter "
        "than timeout (5m): it can never fire"
    ]


def test_a_job_timeout_past_the_night_deadline_is_refused() -> None:
    assert problems("defaults: {deadline: 30m}\n" + CMD + "    timeout: 2h\n") == [
        "night.yaml:6: job 'a': field 'timeout': timeout (2h00m) is longer than the night's "
        "deadline (30m, defaults.deadline), which stops the job first"
    ]


def test_one_output_written_under_two_spellings_is_refused() -> None:
    job = "  - {label: %s, backend: gemini_batch, model: m, input: in.jsonl, output: %s}\n"
    (found,) = problems("jobs:\n" + job % ("r:a", "out/a.jsonl") + job % ("r:b", "./out/a.jsonl"))
    assert found == (
        "night.yaml:3: job 'r:b': field 'output': output './out/a.jsonl' is also written by 'r:a'"
    )


def test_a_non_utf8_catalogue_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "bin.yaml"
    path.write_bytes(b"jobs:\n  - label: \xffa\n")
    with pytest.raises(CatalogueError) as info:
        load_catalogue(path)
    (problem,) = info.value.problems
    assert problem.render(path) == (
        f"{path}:2: not UTF-8 text (a binary file?): invalid byte 0xff at column 12"
    )


def test_a_batch_that_can_outlive_a_day_warns_on_an_assumed_daily_schedule(
    tmp_path: Path,
) -> None:
    path = tmp_path / "n.yaml"
    path.write_text(CMD + BATCH.removeprefix("jobs:\n"))
    (warning,) = schedule_warnings(load_catalogue(path))
    assert warning == (
        f"{path}:5: job 'r': warning: can run for up to 24h00m, not less than the 24h00m between "
        "two nights (no schedule for it in a prefect.yaml beside it: assumed daily); the next "
        "night may start while it still runs"
    )


def test_the_schedule_comes_from_the_deployment_of_this_catalogue(tmp_path: Path) -> None:
    (tmp_path / "prefect.yaml").write_text(
        "deployments:\n"
        "  - name: other\n    parameters: {catalog: other.yaml}\n"
        "    schedules: [{cron: '* * * * *'}]\n"
        "  - name: hourly\n    parameters: {catalog: ./cat.yaml}\n"
        "    schedules: [{cron: '0 * * * *'}, {interval: 7200}]\n"
    )
    path = tmp_path / "cat.yaml"
    path.write_text("defaults: {deadline: 2h}\n" + CMD)
    assert schedule_interval(path) == (3600.0, "schedule of deployment 'hourly' in prefect.yaml")
    (warning,) = schedule_warnings(load_catalogue(path))
    assert "job 'a': warning: can run for up to 2h00m, not less than the 1h00m" in warning
    path.write_text("defaults: {deadline: 50m}\n" + CMD)
    assert schedule_warnings(load_catalogue(path)) == []


def test_min_samples_is_one_setting_read_from_either_spelling() -> None:
    assert parse_catalogue(CMD).defaults.min_samples == 7  # the default
    assert parse_catalogue("defaults:\n  min_samples: 3\n" + CMD).defaults.min_samples == 3
    # `learned_timeout.min_samples`, its place until now, is the same setting
    old = "defaults:\n  learned_timeout: {min_samples: 3}\n"
    assert parse_catalogue(old + CMD).defaults.min_samples == 3
    both = "defaults:\n  min_samples: 3\n  learned_timeout: {min_samples: 3}\n"
    assert parse_catalogue(both + CMD).defaults.min_samples == 3


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("0", "Input should be greater than or equal to 1"),
        ("31", "Input should be less than or equal to 30"),
        ("true", "a whole number from 1 to 30, not true"),
        ("2.5", "Input should be a valid integer, got a number with a fractional part"),
        ("few", "Input should be a valid integer, unable to parse string as an integer"),
    ],
)
def test_a_bad_min_samples_names_its_line_and_field(value: str, why: str) -> None:
    assert problems(f"defaults:\n  min_samples: {value}\n" + CMD) == [
        f"night.yaml:2: field 'defaults.min_samples': {why}"
    ]
    old = f"defaults:\n  deadline: 1h\n  learned_timeout: {{min_samples: {value}}}\n"
    assert problems(old + CMD) == [
        f"night.yaml:3: field 'defaults.learned_timeout.min_samples': {why}"
    ]


def test_two_min_samples_that_disagree_are_refused() -> None:
    text = "defaults:\n  min_samples: 4\n  learned_timeout: {min_samples: 3}\n" + CMD
    assert problems(text) == [
        "night.yaml:1: field 'defaults': min_samples (4) and learned_timeout.min_samples (3) "
        "are one setting: keep only min_samples"
    ]
