"""Catalogue validation: good files load, bad ones name file, line, job and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from nightshift.config.durations import format_duration, parse_duration
from nightshift.config.loader import load_catalogue, parse_catalogue
from nightshift.errors import CatalogueError

GOOD = """\
defaults:
  retries: 2
  poll: {initial: 2s, factor: 2, max: 30s}
  stagger: 0.5s
  deadline: 60m
  queued_timeout: 15m
  sla: 24h
limits: {cli: 4}
jobs:
  - label: generate:article-a
    backend: cli
    task: "generate article: antigravity cli async jobs"
    model: gemini-3.5-flash
  - label: audit:internal-links
    backend: command
    argv: [python, scripts/audit_links.py]
    timeout: 20m
  - label: link:article-a
    backend: command
    argv: [python, scripts/link_article.py, a]
    depends_on: [generate:article-a]
"""


def problems(text: str) -> list[str]:
    with pytest.raises(CatalogueError) as info:
        parse_catalogue(text, "night.yaml")
    return [p.render("night.yaml") for p in info.value.problems]


def test_the_documented_example_loads_with_its_defaults(tmp_path: Path) -> None:
    path = tmp_path / "nightshift.yaml"
    path.write_text(GOOD)
    catalogue = load_catalogue(path)
    assert [j.label for j in catalogue.jobs] == [
        "generate:article-a",
        "audit:internal-links",
        "link:article-a",
    ]
    assert catalogue.defaults.deadline == 3600
    assert catalogue.defaults.poll.max == 30
    assert catalogue.job("audit:internal-links").timeout == 1200
    assert catalogue.caps == {"cli": 4} and catalogue.rates == {}
    assert catalogue.key == str(path.resolve())


def test_every_default_is_optional() -> None:
    catalogue = parse_catalogue("jobs: [{label: a, backend: command, argv: [sleep, 5]}]")
    d = catalogue.defaults
    assert (d.retries, d.stagger, d.deadline, d.queued_timeout, d.sla) == (2, 0.5, 3600, 900, 86400)
    assert (d.poll.initial, d.poll.factor, d.poll.max) == (2, 2, 30)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("500ms", 0.5), ("2s", 2), ("30m", 1800), ("24h", 86400), (45, 45), ("1.5", 1.5)],
)
def test_durations(value: str | int, seconds: float) -> None:
    assert parse_duration(value) == seconds


def test_durations_format_like_the_summary_lines() -> None:
    assert [format_duration(s) for s in (0.25, 42, 720, 3900)] == ["250ms", "42s", "12m", "1h05m"]


def test_unknown_key_names_line_job_and_field() -> None:
    text = GOOD.replace("    timeout: 20m\n", "    timeout: 20m\n    colour: red\n")
    assert problems(text) == [
        "night.yaml:18: job 'audit:internal-links': field 'colour': unknown key"
    ]


def test_bad_duration_and_bad_default_are_both_reported() -> None:
    text = GOOD.replace("timeout: 20m", "timeout: 20 minutes").replace("max: 30s", "max: soon")
    found = problems(text)
    assert len(found) == 2
    assert found[0].startswith("night.yaml:3: field 'defaults.poll.max': not a duration: 'soon'")
    assert found[1].startswith(
        "night.yaml:17: job 'audit:internal-links': field 'timeout': not a duration"
    )


def test_duplicate_label_points_at_the_second_and_names_the_first() -> None:
    text = GOOD + "  - label: audit:internal-links\n    backend: command\n    argv: [x]\n"
    assert problems(text) == [
        "night.yaml:22: job 'audit:internal-links': field 'label': "
        "duplicate label (first defined on line 14)"
    ]


def test_unknown_dependency() -> None:
    text = GOOD.replace("depends_on: [generate:article-a]", "depends_on: [generate:article-z]")
    assert problems(text) == [
        "night.yaml:21: job 'link:article-a': field 'depends_on': unknown job 'generate:article-z'"
    ]


def test_cycle_is_rejected_with_its_path() -> None:
    text = """\
jobs:
  - {label: a, backend: command, argv: [x], depends_on: [c]}
  - {label: b, backend: command, argv: [x], depends_on: [a]}
  - {label: c, backend: command, argv: [x], depends_on: [b]}
"""
    (found,) = problems(text)
    assert "dependency cycle: a -> c -> b -> a" in found
    assert found.startswith("night.yaml:2: job 'a': field 'depends_on'")


def test_backend_specific_fields_are_checked() -> None:
    text = "jobs:\n  - label: a\n    backend: command\n    task: hi\n"
    assert problems(text) == [
        "night.yaml:2: job 'a': field 'argv': required field is missing",
        "night.yaml:4: job 'a': field 'task': unknown key",
    ]


def test_bad_label_and_unknown_backend() -> None:
    text = (
        "jobs:\n  - {label: Bad Label, backend: command, argv: [x]}\n  - {label: b, backend: ftp}\n"
    )
    found = problems(text)
    assert found[0] == (
        "night.yaml:2: job 'Bad Label': field 'label': labels use only a-z, 0-9 and : _ . -"
    )
    assert found[1].startswith("night.yaml:3: job 'b': field 'backend': unknown backend")


def test_broken_yaml_and_missing_file(tmp_path: Path) -> None:
    (found,) = problems("jobs:\n  - label: [a\n")
    assert found.startswith("night.yaml:3: not valid YAML")
    with pytest.raises(CatalogueError, match="cannot read"):
        load_catalogue(tmp_path / "nope.yaml")


def test_numbers_in_argv_become_strings() -> None:
    catalogue = parse_catalogue("jobs: [{label: a, backend: command, argv: [sleep, 5]}]")
    assert catalogue.job("a").argv == ["sleep", "5"]  # type: ignore[union-attr]


def test_a_key_given_twice_is_an_error_not_a_silent_overwrite() -> None:
    text = "jobs:\n  - label: a\n    backend: command\n    argv: [x]\n    argv: [y]\n"
    assert problems(text) == [
        "night.yaml:5: job 'a': field 'argv': duplicate key (first on line 4)"
    ]


def test_poll_policy_is_checked_when_loading_not_mid_night() -> None:
    text = (
        "defaults: {poll: {initial: 10s, max: 5s}}\njobs: [{label: a, backend: command, argv: [x]}]"
    )
    assert problems(text) == [
        "night.yaml:1: field 'defaults.poll': max (5s) is below initial (10s)"
    ]


def test_two_batches_may_not_write_one_output() -> None:
    job = "  - {label: %s, backend: gemini_batch, model: m, input: in.jsonl, output: out.jsonl}\n"
    (found,) = problems("jobs:\n" + job % "r:a" + job % "r:b")
    assert (
        found
        == "night.yaml:3: job 'r:b': field 'output': output 'out.jsonl' is also written by 'r:a'"
    )


def test_a_slow_first_poll_alone_raises_the_cap_with_it() -> None:
    catalogue = parse_catalogue(
        "defaults: {poll: {initial: 60s}}\njobs: [{label: a, backend: command, argv: [x]}]"
    )
    assert (catalogue.defaults.poll.initial, catalogue.defaults.poll.max) == (60, 60)


def test_gemini_prices_per_model_reach_the_jobs_options(tmp_path: Path) -> None:
    from nightshift.backends.gemini.options import GeminiJobOptions
    from nightshift.backends.gemini.pricing import Price
    from nightshift.engine.jobspec import job_spec

    path = tmp_path / "night.yaml"
    path.write_text(
        "gemini:\n  prices:\n    gemini-3.5-flash: {input: 0.5, output: 3}\n"
        "jobs:\n  - {label: r, backend: gemini_batch, model: gemini-3.5-flash,"
        " input: in.jsonl, output: out.jsonl}\n"
    )

    options = GeminiJobOptions.from_spec(job_spec(load_catalogue(path), "r"))

    assert options.prices == {"gemini-3.5-flash": Price(0.5, 3.0)}


def test_a_bad_price_names_its_line_and_field() -> None:
    text = (
        "gemini:\n  prices:\n    gemini-x: {input: -1, output: 3}\n"
        "jobs:\n  - {label: a, backend: cli, task: t}\n"
    )

    [line] = problems(text)

    assert line.startswith("night.yaml:3") and "gemini.prices.gemini-x.input" in line


def test_submit_patience_per_catalogue_and_per_backend() -> None:
    catalogue = parse_catalogue(GOOD)
    assert catalogue.submit_patience("cli") == 300.0  # a few minutes unless it says
    text = GOOD.replace("  sla: 24h\n", "  sla: 24h\n  submit_patience: 10m\n")
    text = text.replace("limits: {cli: 4}\n", "limits: {cli: 4}\ncli: {submit_patience: 90s}\n")
    catalogue = parse_catalogue(text)
    assert catalogue.submit_patience("cli") == 90.0
    assert catalogue.submit_patience("gemini_batch") == 600.0


def test_bad_submit_patience_names_file_line_and_field() -> None:
    text = GOOD.replace("limits: {cli: 4}\n", "limits: {cli: 4}\ngemini:\n  submit_patience: -5s\n")
    found = problems(text)
    assert found[0].startswith("night.yaml:10: field 'gemini.submit_patience':"), found
    found = problems(GOOD.replace("  sla: 24h\n", "  sla: 24h\n  submit_patience: forever\n"))
    assert found[0].startswith("night.yaml:8: field 'defaults.submit_patience': not a duration")


def test_a_catalogue_loaded_by_a_relative_path_keeps_its_key_and_folder_when_the_cwd_moves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "team").mkdir()
    (tmp_path / "team" / "nightly.yaml").write_text(
        "jobs:\n  - {label: batch, backend: gemini_batch, model: m,"
        " input: in.jsonl, output: out.jsonl}\n"
    )
    monkeypatch.chdir(tmp_path)
    catalogue = load_catalogue("team/nightly.yaml")
    key, home = catalogue.key, catalogue.home
    from nightshift.engine.jobspec import job_spec

    spec = job_spec(catalogue, "batch")
    monkeypatch.chdir(tmp_path / "team")  # e.g. a deployment's pull step, or a library
    assert (
        (catalogue.key, catalogue.home)
        == (key, home)
        == (
            str(tmp_path / "team" / "nightly.yaml"),
            tmp_path / "team",
        )
    )
    assert job_spec(catalogue, "batch").options["input"] == spec.options["input"]
    assert spec.options["input"] == str(tmp_path / "team" / "in.jsonl")


JOB = "jobs: [{label: a, backend: command, argv: [sleep, '5']}]"


def test_the_missed_night_policy_defaults_to_latest_and_has_a_shorthand() -> None:
    assert parse_catalogue(JOB).defaults.missed.run == "latest"
    policy = parse_catalogue("defaults: {missed: all}\n" + JOB).defaults.missed
    assert (policy.run, policy.max_nights, policy.order) == ("all", 3, "oldest")


@pytest.mark.parametrize(
    ("block", "said"),
    [
        ("{run: everything}", "night.yaml:1: field 'defaults.missed.run': Input should be"),
        ("{run: all, max_nights: 0}", "field 'defaults.missed.max_nights'"),
        ("{order: sideways}", "field 'defaults.missed.order'"),
        ("{catch_up: true}", "field 'defaults.missed.catch_up'"),
    ],
)
def test_a_bad_missed_block_is_named_by_line_and_field(block: str, said: str) -> None:
    with pytest.raises(CatalogueError) as bad:
        parse_catalogue(f"defaults: {{missed: {block}}}\n" + JOB, "night.yaml")
    assert said in str(bad.value)
