"""A night's forecast against what happened: the checks, and how the pages say them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from nightshift.budgets.lookup import Budget, Budgets
from nightshift.config.loader import parse_catalogue
from nightshift.engine.forecast_check import accuracy, check_night, run_spans, worst
from nightshift.engine.night_forecast import forecast_body, forecast_night
from nightshift.engine.outcomes import JobOutcome, NightSummary, Outcome, Severity
from nightshift.engine.plan import Plan
from nightshift.orchestration.forecast_report import (
    forecast_lines,
    forecast_section,
    render_forecast,
)
from nightshift.orchestration.night_report import build_report, render_report
from nightshift.store.forecasts import StoredForecast
from nightshift.store.ledger import Transition

START = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)
CATALOGUE = """\
name: team-a
defaults: {deadline: 6h, stagger: 0s}
limits: {cli: 1}
jobs:
  - {label: "report:weekly", backend: cli, task: r}
  - {label: tidy, backend: cli, task: t}
  - {label: extract, backend: command, argv: [x]}
  - {label: load, backend: command, argv: [x], depends_on: [extract]}
"""


def _at(minutes: float) -> datetime:
    return START + timedelta(minutes=minutes)


def _budgets(minutes: dict[str, float]) -> Budgets:
    jobs = {("team-a", x): Budget(60 * m, 90 * m, 30, "job") for x, m in minutes.items()}
    return Budgets(jobs=jobs)


def _stored(run_id: str = "run-1", kept: tuple[str, ...] = ()) -> StoredForecast:
    catalogue = parse_catalogue(CATALOGUE)
    plan = Plan(["report:weekly", "tidy"], [["extract", "load"]])
    budgets = _budgets({"report:weekly": 100, "tidy": 20, "extract": 30, "load": 40})
    made = forecast_night(catalogue, plan, budgets, start=START, kept=kept)
    return StoredForecast(
        "2026-03-01",
        run_id,
        START,
        START,
        made.finish_p50,
        made.finish_p95,
        made.critical_path,
        forecast_body(made, kept),
    )


def _rows(ends: dict[str, tuple[float, float, str]], run_id: str = "run-1") -> list[Transition]:
    """Each job's submitting row and its last row (minutes from the start, its state)."""
    rows = []
    for label, (start, end, state) in ends.items():
        for i, (at, to) in enumerate([(start, "submitting"), (end, state)]):
            rows.append(
                Transition(
                    len(rows), "2026-03-01", run_id, label, "cli", None, None, to, _at(at), None, i
                )
            )
    return rows


def test_the_night_forecast_caps_the_backend_and_keeps_what_the_morning_needs() -> None:
    stored = _stored()

    # one cli slot: tidy waits for report:weekly; the chain runs beside them
    assert stored.finish_p50 == _at(120) and stored.critical_path == ["report:weekly", "tidy"]
    jobs = {j["label"]: j for j in stored.body["jobs"]}
    assert jobs["tidy"]["wait_s"] == 6000 and jobs["load"]["start_p50"] == _at(30).isoformat()
    assert set(jobs["tidy"]) >= {"start_p50", "end_p50", "start_p95", "end_p95", "basis"}
    # a job kept from an earlier run takes no time tonight
    assert _stored(kept=("report:weekly",)).finish_p50 == _at(70)


def test_a_run_is_checked_against_its_own_rows_and_its_late_jobs_named() -> None:
    stored = _stored()
    ends = {
        "report:weekly": (0, 300, "succeeded"),  # 3x its usual
        "tidy": (300, 318, "failed"),
        "extract": (0, 30.5, "succeeded"),  # 30 s late: not worth a line
        "load": (30.5, 70, "succeeded"),
    }
    rows = _rows(ends) + _rows({"tidy": (400, 500, "running")}, run_id="run-2")

    check = check_night(stored, rows)

    assert check.finished == _at(318) and check.error_s == 198 * 60
    assert check.error_pct == 165.0  # of a 120-minute night
    assert [j.label for j in worst(check)] == ["report:weekly", "tidy"]
    weekly = next(j for j in check.jobs if j.label == "report:weekly")
    assert weekly.ratio == 3.0 and weekly.late_s == 200 * 60
    assert run_spans(rows, "run-2") == {"tidy": (_at(400), None)}  # not ended in that run
    # a run that did not end every job it forecast has no finish
    assert check_night(stored, _rows({"tidy": (0, 10, "succeeded")})).finished is None


def test_the_report_says_forecast_against_actual_and_the_worst_jobs() -> None:
    ends = {
        "report:weekly": (0, 300, "succeeded"),
        "tidy": (300, 318, "succeeded"),
        "extract": (0, 31, "succeeded"),
        "load": (31, 70, "succeeded"),
    }
    section = forecast_section(check_night(_stored(), _rows(ends)))

    lines = forecast_lines(section)

    assert lines[0] == "## Forecast against actual"
    assert lines[2] == (
        "Expected to finish at 04:00 UTC (p95 05:00), finished 07:18: "
        "3h18m later than forecast (+165 %)."
    )
    assert "- `report:weekly`: expected 03:40, finished 07:00 (3h20m late), 3.0x its usual" in lines
    assert "- `tidy`: expected 04:00, finished 07:18 (3h18m late)" in lines
    assert "`extract`" not in "\n".join(lines[3:])  # on time: not among the worst

    summary = NightSummary(Severity.OK, [JobOutcome("tidy", Outcome.SUCCEEDED, 1080.0)])
    page = build_report(summary, night="2026-03-01", catalogue="team-a", forecast=section)
    text = render_report(page)
    assert "## Forecast against actual" in text and page["forecast"] == section
    assert "Forecast" not in render_report(build_report(summary, night="n", catalogue="c"))


def test_a_night_on_time_and_one_not_finished_are_said_so() -> None:
    stored = _stored()
    ends = {
        "report:weekly": (0, 100, "succeeded"),
        "tidy": (100, 120, "succeeded"),
        "extract": (0, 30, "succeeded"),
        "load": (30, 70, "succeeded"),
    }
    on_time = forecast_lines(forecast_section(check_night(stored, _rows(ends))))
    assert on_time[2].endswith(", finished 04:00: on time.") and on_time[-1].startswith("Forecast")

    unfinished = forecast_section(check_night(stored, []))
    assert forecast_lines(unfinished)[2].endswith("this run did not end every job it forecast.")


def test_the_forecast_artifact_names_the_finish_the_path_and_the_latest_jobs() -> None:
    text = render_forecast(_stored(), "team-a")

    assert text.startswith("# Forecast · night 2026-03-01 · team-a\n")
    assert "finish at **04:00 UTC** (p50), 05:00 in the late case (p95)" in text
    assert "Critical path: `report:weekly` -> `tidy`" in text
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert rows[0] == "| `tidy` | cli | 03:40 | 04:00 | 05:00 | 1h40m | learned |"


def test_accuracy_is_the_median_and_the_worst_absolute_error() -> None:
    stored = _stored()
    checks = []
    for finish in (120, 130, 90, 125):  # +0, +10, -30, +5 minutes against 04:00
        ends = {
            "report:weekly": (0, finish - 20, "succeeded"),
            "tidy": (finish - 20, finish, "succeeded"),
            "extract": (0, 30, "succeeded"),
            "load": (30, 70, "succeeded"),
        }
        checks.append(check_night(stored, _rows(ends)))
    checks.append(check_night(stored, []))  # no finish: left out

    measured = accuracy(checks)

    assert measured is not None and len(measured.nights) == 4
    assert measured.median_abs_s == 7.5 * 60
    assert measured.worst.error_s == -30 * 60 and measured.median_abs_pct == 6.25
    assert measured.p90_abs_s == 30 * 60  # nearest rank of 0, 5, 10, 30 minutes
    # the nights of +10 and +5 minutes: both jobs of the critical path a minute or more late
    assert measured.often_late == [("report:weekly", 2), ("tidy", 2)]
    assert accuracy([]) is None
