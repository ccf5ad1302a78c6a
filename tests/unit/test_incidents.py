"""Several jobs of one backend stalled together: one incident (pure: engine/incidents.py)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from nightshift.engine.alerts import Alert
from nightshift.engine.holds import SubmitHolds
from nightshift.engine.incidents import (
    Alone,
    Closed,
    IncidentDesk,
    IncidentRule,
    Joined,
    Left,
    Opened,
)

T0 = datetime(2030, 1, 1, 2, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def alert(label: str, level: str = "alert", t: float = 10.0, backend: str = "cli") -> Alert:
    return Alert(
        night="2030-01-01",
        catalogue="c",
        label=label,
        backend=backend,
        state="queued",
        level=level,  # type: ignore[arg-type]
        dwell_s=t,
        p95_s=0.0,
        at=at(t),
        floor_s=5.0,
    )


def desk_with(jobs: dict[str, str], rule: IncidentRule | None = None) -> IncidentDesk:
    """A desk told that each job (label -> backend) is queued since T0."""
    desk = IncidentDesk(lambda _b: rule or IncidentRule(jobs=3, window_s=60.0))
    for label, backend in jobs.items():
        assert desk.entered(label, backend, "queued", T0) == []
    return desk


TEN = {f"j{i}": "cli" for i in range(10)}


def test_three_stalls_of_one_backend_open_one_incident_folding_the_levels_held_for_it() -> None:
    desk = desk_with(TEN)
    # each waits for others (their backend has jobs in the same state), then they are weighed
    assert desk.level(alert("j0", t=10.0), at(10.0)) == []
    assert desk.level(alert("j1", t=10.5), at(10.5)) == []
    assert desk.level(alert("j2", t=11.0), at(11.0)) == []
    assert desk.next_wake() == at(15.0)
    [opened] = desk.tick(at(15.0))
    assert isinstance(opened, Opened)
    assert [a.label for a in opened.alerts] == ["j0", "j1", "j2"]
    incident = opened.incident
    assert (incident.backend, incident.state, incident.key) == ("cli", "queued", "cli/queued#1")
    assert incident.labels == ("j0", "j1", "j2") and incident.level == "alert"
    assert incident.since == T0
    assert incident.headline() == "cli: 3 jobs stalled in queued since 02:00:00 UTC (j0, j1, j2)"
    assert desk.tick(at(60.0)) == []  # nothing left held: folded into the incident
    assert desk.grouped("j0") and not desk.grouped("j5")


def open_three(desk: IncidentDesk, t0: float = 10.0) -> None:
    for i, t in enumerate((t0, t0 + 0.1, t0 + 0.2)):
        desk.level(alert(f"j{i}", t=t), at(t))
    [opened] = desk.tick(at(t0 + 5.0))
    assert isinstance(opened, Opened)


def test_a_later_level_joins_and_the_headline_names_the_first_three_and_how_many_more() -> None:
    desk = desk_with(TEN)
    open_three(desk)
    [joined] = desk.level(alert("j3", "watch", t=20.0), at(20.0))
    assert isinstance(joined, Joined) and joined.alert.label == "j3"
    assert joined.incident.labels == ("j0", "j1", "j2", "j3")
    assert joined.incident.headline().endswith("(j0, j1, j2 and 1 more)")


def test_a_lone_job_on_its_backend_is_announced_at_once() -> None:
    desk = desk_with({"a": "cli", "b": "http"})
    assert desk.level(alert("a"), at(10.0)) == [Alone(alert("a"))]


def test_a_level_waits_for_others_of_its_backend_then_goes_alone() -> None:
    desk = desk_with(TEN)
    assert desk.level(alert("j0"), at(10.0)) == []
    assert desk.next_wake() == at(15.0)  # the gather: 5 s
    assert desk.tick(at(14.9)) == []
    assert desk.tick(at(15.0)) == [Alone(alert("j0"))]
    assert desk.next_wake() is None


def test_more_than_half_of_a_backends_jobs_in_flight_is_an_incident_of_two() -> None:
    desk = desk_with({"a": "cli", "b": "cli", "c": "cli", "x": "http"})
    desk.level(alert("a"), at(10.0))
    desk.level(alert("b", t=11.0), at(11.0))
    [opened] = desk.tick(at(15.0))  # 2 of 3 cli jobs in flight
    assert isinstance(opened, Opened) and opened.incident.labels == ("a", "b")
    ten = desk_with(TEN)
    ten.level(alert("j0"), at(10.0))
    ten.level(alert("j1", t=11.0), at(11.0))
    assert ten.tick(at(15.0)) == [Alone(alert("j0"))]  # 2 of 10: each alone
    assert ten.tick(at(16.0)) == [Alone(alert("j1", t=11.0))]


def test_stalls_further_apart_than_the_window_are_no_incident() -> None:
    desk = desk_with(TEN)
    for i, t in enumerate((10.0, 80.0, 150.0)):
        assert desk.level(alert(f"j{i}", t=t), at(t)) == []
        assert desk.tick(at(t + 5.0)) == [Alone(alert(f"j{i}", t=t))]


def test_another_backends_stalls_stay_its_own() -> None:
    jobs = {**TEN, "h0": "http", "h1": "http", "h2": "http", "h3": "http", "h4": "http"}
    desk = desk_with(jobs)
    open_three(desk)
    assert desk.level(alert("h0", backend="http"), at(16.0)) == []  # held for http's others
    assert desk.tick(at(21.0)) == [Alone(alert("h0", backend="http"))]
    assert desk.open_for("http") is None and desk.open_for("cli") is not None


def test_its_jobs_leaving_the_state_end_it_with_how_long_and_how() -> None:
    desk = desk_with(TEN)
    open_three(desk)
    [left] = desk.entered("j0", "cli", "running", at(40.0))
    assert isinstance(left, Left) and not left.final and left.state == "running"
    assert desk.ended("j5", "succeeded", at(41.0)) == []  # not one of its jobs
    [left] = desk.ended("j1", "stuck_queued", at(50.0))
    assert left.final and left.label == "j1"
    left, closed = desk.ended("j2", "stuck_queued", at(75.0))
    assert isinstance(closed, Closed)
    assert closed.incident.lasted_s == 60.0
    assert closed.incident.end_line() == "over after 1m: 1 moved on, 2 ended (stuck_queued)"
    assert desk.open_for("cli") is None
    # a second one of the same backend and state tonight is numbered on
    for i, t in enumerate((100.0, 100.1, 100.2), start=3):
        desk.level(alert(f"j{i}", t=t), at(t))
    desk.tick(at(105.0))
    assert [i.key for i in desk.incidents] == ["cli/queued#1", "cli/queued#2"]


def test_a_held_backend_lets_its_jobs_wait_on_the_loop_and_go_when_released() -> None:
    now = [0.0]
    holds = SubmitHolds(clock=lambda: now[0])
    holds.hold("cli", "cli: 3 jobs stalled", everything=False)  # paid jobs only
    assert holds.why("cli", paid=False) is None
    assert holds.why("cli", paid=True) == "held: cli: 3 jobs stalled"

    async def night() -> list[str | None]:
        waiting = asyncio.ensure_future(holds.clear("cli", True, deadline=100.0))
        await asyncio.sleep(0)
        assert not waiting.done()
        holds.release("cli")
        return [await waiting]

    assert asyncio.run(night()) == [None]


def test_a_refused_backend_says_why_and_the_deadline_ends_a_wait() -> None:
    now = [0.0]
    holds = SubmitHolds(clock=lambda: now[0])
    holds.hold("cli", "cli: 3 jobs stalled", everything=True)
    now[0] = 100.0
    assert asyncio.run(holds.clear("cli", False, deadline=50.0)) == "held: cli: 3 jobs stalled"
    holds.refuse("cli", "cli: 3 jobs stalled, and none moved on")
    why = asyncio.run(holds.clear("cli", False, deadline=None))
    assert why == "not submitted: cli: 3 jobs stalled, and none moved on"
    holds.interrupt()
    holds.hold("http", "http: 2 jobs stalled", everything=True)
    assert asyncio.run(holds.clear("http", False, deadline=None)) is not None  # not forever


def test_a_held_level_goes_alone_once_no_other_job_is_left_in_its_state() -> None:
    """Held for the company of the jobs queued beside it; once they moved on, nothing can
    gather: it goes now, not at the end of its wait (when the night may be over)."""
    desk = desk_with({"a": "cli", "b": "cli", "c": "cli"})
    assert desk.level(alert("a"), at(10.0)) == []  # b and c are queued too: it waits
    assert desk.entered("b", "cli", "running", at(11.0)) == []  # c still keeps it company
    assert desk.entered("c", "cli", "running", at(11.5)) == [Alone(alert("a"))]
    assert desk.next_wake() is None and desk.tick(at(15.0)) == []


def test_a_held_level_of_a_job_that_ended_is_announced_not_lost() -> None:
    desk = desk_with({"a": "cli", "b": "cli"})
    assert desk.level(alert("a"), at(10.0)) == []
    # a ends (its queued timeout) before its wait: one job left queued, no incident to gather
    assert desk.ended("a", "timeout", at(12.0)) == [Alone(alert("a"))]
    assert desk.next_wake() is None


def test_a_held_level_keeps_waiting_while_two_jobs_are_left_in_its_state() -> None:
    desk = desk_with({"a": "cli", "b": "cli", "c": "cli", "d": "cli"})
    assert desk.level(alert("a"), at(10.0)) == []
    assert desk.entered("d", "cli", "running", at(11.0)) == []  # a, b, c still queued
    assert desk.entered("c", "cli", "running", at(11.5)) == []  # a and b: still a pair
    assert desk.next_wake() == at(15.0)
