"""A new job's declared ``expect:``: its time in the plan and the forecast, and its first watch,
until its own nights teach them (marked ``declared``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from nightshift.budgets.lookup import Budget, Budgets
from nightshift.config.loader import parse_catalogue
from nightshift.engine.detection import Detector
from nightshift.engine.dwell_watch import CatalogueBudgets
from nightshift.engine.forecast import durations_of

CATALOGUE = """\
name: t
jobs:
  - {label: report:daily, backend: command, argv: [echo], expect: 40m}
  - {label: fresh, backend: command, argv: [echo]}
"""
T0 = datetime(2026, 12, 7, 2, 0, tzinfo=UTC)


def test_a_declared_expectation_is_the_forecasts_until_the_job_has_its_own(
    tmp_path: Path,
) -> None:
    catalogue = parse_catalogue(CATALOGUE, tmp_path / "nightshift.yaml")
    labels = ["report:daily", "fresh"]
    spans = durations_of(Budgets(), catalogue, labels)
    assert (spans["report:daily"].p50, spans["report:daily"].basis) == (2400.0, "declared")
    assert spans["fresh"].basis == "none"
    learned = Budgets(jobs={(catalogue.key, "report:daily"): Budget(600.0, 900.0, 9)})
    assert durations_of(learned, catalogue, labels)["report:daily"].basis == "learned"


def test_a_declared_expectation_is_the_first_watch_of_its_run_and_says_so(
    tmp_path: Path,
) -> None:
    catalogue = parse_catalogue(CATALOGUE, tmp_path / "nightshift.yaml")
    budgets = CatalogueBudgets(Budgets(), catalogue.key, {}, {"report:daily": 2400.0})
    detector = Detector("2026-12-07", catalogue.key, budgets)
    at = T0 + timedelta(minutes=81)
    _watch, alert = detector.observe(
        "report:daily", "running", entered_at=T0, now=at, backend="command"
    )
    assert alert.level == "alert" and "(p95 40m declared (expect:), x2.0)" in alert.line()
    assert budgets.budget("report:daily", "queued") is None  # its running time only
    own = Budgets(states={(catalogue.key, "report:daily", "running"): Budget(60.0, 90.0, 9)})
    assert CatalogueBudgets(own, catalogue.key, {}, {"report:daily": 2400.0}).budget(
        "report:daily", "running"
    ) == Budget(60.0, 90.0, 9)
