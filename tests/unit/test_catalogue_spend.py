"""Money in the catalogue: a bad finish_by, spend, cost or cost_path names file:line, job, field."""

from __future__ import annotations

from pathlib import Path

import pytest

from nightshift.cli.main import main
from nightshift.config.loader import parse_catalogue
from tests.unit.test_catalogue import problems

CMD = "jobs:\n  - label: a\n    backend: command\n    argv: [x]\n"
HTTP = """\
jobs:
  - label: h
    backend: http
    submit: {url: "http://api/jobs"}
    id_path: id
    status_url: "http://api/jobs/{id}"
    state_path: state
    states: {succeeded: [done], failed: [error]}
"""


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("finish_by", '"25:00"', 'a time of day as "HH:MM" (like "07:00"), not \'25:00\''),
        ("finish_by", "7:00", 'quote the time: finish_by: "07:00"'),
        ("spend", "{usd: 0}", "must be more than 0"),
        ("spend", '{usd: "$50"}', "a number of US dollars (like 4.10), not '$50'"),
        ("spend", "{usd: 50, per: week}", "Input should be 'night'"),
        ("spend", "{usd: .inf}", "a finite number of US dollars, not inf"),
    ],
)
def test_bad_night_money_and_time_names_line_and_field(field: str, value: str, said: str) -> None:
    (problem,) = problems(f"defaults:\n  {field}: {value}\n" + CMD)
    assert problem.startswith(f"night.yaml:2: field 'defaults.{field}") and said in problem


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("cost", "{usd: -1}", "Input should be greater than or equal to 0"),
        ("cost", "{usd: yes}", "a number of US dollars (like 4.10), not True"),
        ("cost", "cheap", "Input should be a valid dictionary"),
        ("spend", "{dollars: 5}", "'spend.usd': required field is missing"),
    ],
)
def test_bad_job_cost_and_spend_name_the_job(field: str, value: str, said: str) -> None:
    problem = problems(CMD + f"    {field}: {value}\n")[0]
    assert problem.startswith(f"night.yaml:5: job 'a': field '{field}") and said in problem


def test_a_bad_cost_path_names_the_job() -> None:
    (problem,) = problems(HTTP + "    cost_path: 'usage..usd'\n")
    assert problem.startswith("night.yaml:9: job 'h': field 'cost_path'")


def test_good_money_reads() -> None:
    text = "defaults:\n  finish_by: '7:05'\n  spend: {usd: 50}\n" + CMD + "    cost: 4.1\n"
    catalogue = parse_catalogue(text)
    assert catalogue.defaults.finish_by == "07:05"
    assert catalogue.defaults.spend is not None and catalogue.defaults.spend.per == "night"
    assert catalogue.jobs[0].cost is not None and catalogue.jobs[0].cost.usd == 4.1
    parse_catalogue(HTTP + "    cost_path: usage.usd\n")


def test_validate_exits_4_naming_file_line_job_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "night.yaml"
    path.write_text(CMD + "    spend: {usd: -3}\n")
    assert main(["validate", "--catalogue", str(path)]) == 4
    head, line = capsys.readouterr().err.strip().splitlines()
    assert (head, line.strip()) == (
        "invalid catalogue:",
        f"{path}:5: job 'a': field 'spend.usd': Input should be greater than or equal to 0",
    )
