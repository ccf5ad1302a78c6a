"""Pure policies: the poll backoff, the join's verdict, the night's plan."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from nightshift.backoff import Backoff
from nightshift.config.loader import parse_catalogue
from nightshift.engine.outcomes import JobOutcome, Outcome, Severity, join
from nightshift.engine.plan import Plan, plan_night, which_night


def test_poll_backoff_doubles_from_2s_to_a_30s_cap() -> None:
    assert Backoff().delays(7) == [2, 4, 8, 16, 30, 30, 30]
    assert Backoff(0.5, 3, 10).delays(4) == [0.5, 1.5, 4.5, 10]
    assert Backoff().delay(10_000) == 30


def test_poll_policy_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        Backoff(initial=5, max=1)


def outcome(label: str, state: Outcome, seconds: float = 60) -> JobOutcome:
    return JobOutcome(label=label, state=state, duration_s=seconds, attempts=1)


def test_join_all_ok_is_exit_0() -> None:
    summary = join([outcome("a", Outcome.SUCCEEDED), outcome("b", Outcome.SUCCEEDED)])
    assert (summary.severity, summary.exit_code) == (Severity.OK, 0)
    assert summary.not_ok == []


def test_join_partial_is_exit_2_and_lines_read_like_the_brief() -> None:
    summary = join(
        [
            outcome("generate:article-a", Outcome.SUCCEEDED),
            outcome("audit:internal-links", Outcome.FAILED, 12 * 60),
            outcome("report:x", Outcome.PARTIAL),
        ]
    )
    assert (summary.severity, summary.exit_code) == (Severity.PARTIAL, 2)
    assert summary.not_ok[0].line() == "audit:internal-links (12m, failed)"
    assert summary.headline() == "partial: 1/3 succeeded (1 failed, 1 partial)"


def test_the_flow_runs_message_names_its_worst_jobs_with_their_duration_as_the_digest() -> None:
    summary = join(
        [
            outcome("generate:article-a", Outcome.SUCCEEDED),
            outcome("report:x", Outcome.PARTIAL, 95),
            outcome("audit:internal-links", Outcome.FAILED, 12 * 60),
        ]
    )
    assert summary.message() == (
        "partial: 1/3 succeeded (1 failed, 1 partial); "
        "worst: audit:internal-links (12m, failed), report:x (2m, partial)"
    )


def test_join_all_partial_is_a_partial_night_not_a_failed_one() -> None:
    summary = join([outcome("a", Outcome.PARTIAL), outcome("b", Outcome.PARTIAL)])
    assert (summary.severity, summary.exit_code) == (Severity.PARTIAL, 2)
    summary = join([outcome("a", Outcome.PARTIAL), outcome("b", Outcome.FAILED)])
    assert (summary.severity, summary.exit_code) == (Severity.PARTIAL, 2)


def test_join_none_succeeded_is_exit_1() -> None:
    states = [Outcome.FAILED, Outcome.TIMEOUT, Outcome.STUCK_QUEUED, Outcome.SKIPPED]
    summary = join([outcome(f"j{i}", s) for i, s in enumerate(states)])
    assert (summary.severity, summary.exit_code) == (Severity.FAILED, 1)


def test_plan_maps_independent_jobs_longest_first_and_orders_chains() -> None:
    catalogue = parse_catalogue(
        """\
jobs:
  - {label: short, backend: command, argv: [x]}
  - {label: long, backend: command, argv: [x]}
  - {label: link, backend: command, argv: [x], depends_on: [gen]}
  - {label: gen, backend: command, argv: [x]}
  - {label: publish, backend: command, argv: [x], depends_on: [link]}
"""
    )
    plan = plan_night(catalogue, expected_s={"long": 600, "short": 5})
    assert plan.independent == ["long", "short"]
    assert plan.chains == [["gen", "link", "publish"]]
    narrowed = plan_night(catalogue, only=["link", "short"])
    assert narrowed.independent == ["short", "link"]
    assert narrowed.chains == []
    with pytest.raises(ValueError, match="unknown job label"):
        plan_night(catalogue, only=["nope"])


def test_a_plan_says_what_it_holds_in_words() -> None:
    assert Plan(["a", "b"], [["c", "d"]]).describe() == "4 jobs: 2 independent, 1 chain"
    assert Plan(["a"], []).describe() == "1 job: 1 independent, 0 chains"
    assert Plan([], [["a", "b"], ["c", "d"]]).describe() == "4 jobs: 0 independent, 2 chains"


def test_the_night_of_a_run_is_the_one_given_else_the_date_of_its_scheduled_start() -> None:
    scheduled = datetime(2026, 12, 2, 1, 30, tzinfo=timezone(timedelta(hours=-5)))
    assert which_night(None, scheduled) == "2026-12-02"  # 06:30 UTC
    assert which_night("20261130", scheduled) == "2026-11-30"
    with pytest.raises(ValueError, match="--night must be a date"):
        which_night("tomorrow", scheduled)
