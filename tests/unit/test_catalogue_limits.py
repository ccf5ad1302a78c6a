"""`limits:` in the catalogue: a plain concurrency, or a concurrency and a rate; errors located."""

from __future__ import annotations

import pytest

from nightshift.config.limits import format_rate, parse_rate
from nightshift.config.loader import parse_catalogue
from nightshift.errors import CatalogueError

JOBS = "jobs:\n  - {label: a, backend: cli, task: t}\n"


def load(limits: str, defaults: str = ""):  # type: ignore[no-untyped-def]
    return parse_catalogue(f"name: n\n{defaults}limits:\n{limits}\n{JOBS}", "nightshift.yaml")


def problem(limits: str) -> str:
    with pytest.raises(CatalogueError) as caught:
        load(limits)
    return str(caught.value).splitlines()[1].strip()


def test_a_plain_number_stays_the_concurrency() -> None:
    catalogue = load("  cli: 4\n  command: 2")
    assert (catalogue.caps, catalogue.rates) == ({"cli": 4, "command": 2}, {})


def test_a_backend_may_have_a_concurrency_and_a_rate() -> None:
    catalogue = load("  cli: {concurrency: 4, rate: 2/s}\n  gemini_batch: {rate: 30/min}")
    assert catalogue.caps == {"cli": 4}
    assert catalogue.rates == {"cli": 2.0, "gemini_batch": 0.5}


@pytest.mark.parametrize(
    ("text", "per_s"),
    [("2/s", 2.0), ("30/min", 0.5), ("0.5/s", 0.5), ("3600/h", 1.0), ("1 / second", 1.0)],
)
def test_rates_are_counts_per_unit(text: str, per_s: float) -> None:
    assert parse_rate(text) == per_s


def test_rates_print_in_a_whole_unit() -> None:
    rates = (2.0, 0.5, 1 / 3600, 0.3, 1 / 7)
    assert [format_rate(r) for r in rates] == ["2/s", "30/min", "1/h", "18/min", "0.142857/s"]


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ("  cli: 0", "nightshift.yaml:3: field 'limits.cli.concurrency': Input should be greater"),
        ("  cli: {rate: 2}", "nightshift.yaml:3: field 'limits.cli.rate': not a rate: 2 (use e.g."),
        ("  cli: {rate: 0/s}", "nightshift.yaml:3: field 'limits.cli.rate': a rate must be more"),
        ("  cli: {rate: 2/day}", "field 'limits.cli.rate': not a rate: '2/day'"),
        (
            "  cli: {}",
            "nightshift.yaml:3: field 'limits.cli': give a concurrency, a rate, an incident: "
            "setting, or several",
        ),
        ("  cli: {concurrency: 2, rte: 1/s}", "field 'limits.cli.rte': unknown key"),
        ("  cli: true", "field 'limits.cli': a limit is a number (the concurrency) or"),
        ("  cli: 2\n  gpu: 1", "nightshift.yaml:4: field 'limits.gpu': unknown backend; use one"),
        ("  cli:\n    concurrency: 2\n    rate: fast", "yaml:5: field 'limits.cli.rate'"),
    ],
)
def test_a_bad_limit_names_its_line_and_field(limits: str, expected: str) -> None:
    assert expected in problem(limits)


def test_the_stagger_still_paces_every_backend_without_a_rate() -> None:
    catalogue = load("  cli: {rate: 4/s}", defaults="defaults: {stagger: 2s}\n")
    assert catalogue.defaults.stagger == 2.0 and catalogue.rates == {"cli": 4.0}
