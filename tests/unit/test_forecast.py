"""The night's forecast: a discrete-event simulation of the plan, caps, pace and chains."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from nightshift.budgets.lookup import Budget, Budgets
from nightshift.config.catalogue import Catalogue
from nightshift.engine.forecast import Span, durations_of, forecast
from nightshift.engine.plan import Plan

START = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)


def _at(seconds: float) -> datetime:
    return START + timedelta(seconds=seconds)


def _run(plan: Plan, spans: dict[str, Span], **kw):  # type: ignore[no-untyped-def]
    backends = kw.pop("backends", None) or {x: "cli" for x in plan.labels}
    kw.setdefault("deadline_s", 3600.0)
    return forecast(plan, backends, spans, start=START, **kw)


def test_a_chain_runs_in_order_and_is_the_critical_path() -> None:
    plan = Plan(["solo"], [["extract", "load", "report"]])
    spans = {
        "solo": Span(100, 150),
        "extract": Span(60, 90),
        "load": Span(120, 200),
        "report": Span(30, 40),
    }
    f = _run(plan, spans)

    jobs = {j.label: j for j in f.jobs}
    assert jobs["load"].start_p50 == jobs["extract"].end_p50 == _at(60)
    assert jobs["report"].start_p50 == jobs["load"].end_p50 == _at(180)
    assert jobs["report"].end_p95 == _at(90 + 200 + 40)
    assert (f.finish_p50, f.finish_p95) == (_at(210), _at(330))
    assert f.critical_path == ["extract", "load", "report"]
    assert all(j.wait_s == 0 for j in f.jobs)


def test_a_cap_of_two_queues_four_equal_jobs_and_doubles_the_finish() -> None:
    plan = Plan(["a", "b", "c", "d"], [])
    spans = {x: Span(600, 900) for x in plan.labels}

    capped = _run(plan, spans, caps={"cli": 2})
    free = _run(plan, spans)

    waits = {j.label: j.wait_s for j in capped.jobs}
    assert waits == {"a": 0, "b": 0, "c": 600, "d": 600}
    assert capped.finish_p50 == _at(1200) and free.finish_p50 == _at(600)
    assert capped.finish_p95 == _at(1800)
    assert capped.critical_path[-1] in {"c", "d"} and len(capped.critical_path) == 2
    assert capped.critical_path == ["a", "c"]  # c took a's slot (priority order)
    assert all(j.wait_s == 0 for j in free.jobs)


def test_the_stagger_and_a_rate_space_submissions_per_backend() -> None:
    plan = Plan(["a", "b", "c"], [])
    spans = {x: Span(10, 10) for x in plan.labels}
    backends = {"a": "cli", "b": "cli", "c": "http"}

    f = _run(plan, spans, backends=backends, stagger=0.5, rates={"cli": 0.1})

    starts = {j.label: j.start_p50 for j in f.jobs}
    assert starts == {"a": _at(0), "b": _at(10), "c": _at(0)}  # cli: 1/rate; http: its own pace


def test_a_capped_chain_step_waits_behind_every_independent_job() -> None:
    plan = Plan(["x", "y"], [["s1", "s2"]])
    spans = {"x": Span(100, 100), "y": Span(100, 100), "s1": Span(10, 10), "s2": Span(10, 10)}

    f = _run(plan, spans, caps={"cli": 2})

    jobs = {j.label: j for j in f.jobs}
    assert jobs["s1"].start_p50 == _at(100) and jobs["s1"].wait_s == 100
    assert jobs["s2"].start_p50 == _at(110)
    assert f.critical_path == ["x", "s1", "s2"]


def test_late_jobs_are_named_with_how_late() -> None:
    plan = Plan(["long", "short"], [])
    spans = {"long": Span(3000, 4000), "short": Span(10, 20)}

    f = _run(plan, spans, deadline_s=3600.0, caps={"cli": 1})

    assert f.late == []
    assert [(x.label, x.seconds, x.submitted) for x in f.late_p95] == [
        ("short", 420.0, False),  # its submit would come after the deadline: not submitted
        ("long", 400.0, True),
    ]


def test_durations_come_from_the_whole_job_else_the_states_else_none() -> None:
    catalogue = Catalogue.model_validate(
        {
            "name": "team",
            "jobs": [
                {"label": "known", "backend": "cli", "task": "t"},
                {"label": "states", "backend": "cli", "task": "t"},
                {"label": "new", "backend": "cli", "task": "t"},
            ],
        }
    )
    budgets = Budgets(
        states={
            ("team", "states", "queued"): Budget(10, 20, 8),
            ("team", "states", "running"): Budget(100, 150, 8),
        },
        jobs={("team", "known"): Budget(300, 500, 9)},
    )

    spans = durations_of(budgets, catalogue, ["known", "states", "new"])

    assert spans == {
        "known": Span(300, 500, "learned"),
        "states": Span(110, 170, "fallback"),
        "new": Span(0, 0, "none"),
    }
