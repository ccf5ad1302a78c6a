"""The night's own gaps in its forecast: a chain's next step is submitted, and a capped slot
handed on, only once the night has seen the job before it end (learned, else the poll's wait)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from nightshift.backoff import Backoff
from nightshift.engine.forecast import Span, forecast
from nightshift.engine.handoffs import Gap, handoff_gaps, learned_gaps, poll_lag
from nightshift.engine.plan import Plan
from nightshift.usual import Usual

T0 = datetime(2026, 12, 1, 2, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_a_backends_gap_is_learned_from_its_chains_hand_offs() -> None:
    rows = []
    for i, gap in enumerate([4.0, 6.0, 5.0, 30.0]):  # four nights of a -> b
        night, run = f"n{i}", f"r{i}"
        rows += [
            (night, run, "a", "submitting", at(0)),
            (night, run, "a", "succeeded", at(100)),
            (night, run, "b", "submitting", at(100 + gap)),
            (night, run, "b", "succeeded", at(200)),
        ]
    rows.append(("n9", "other-run", "b", "submitting", at(0)))  # no end of a in its run: none
    gaps = learned_gaps(rows, {"b": "a"}, {"a": "cli", "b": "command"})
    assert gaps == {"cli": Gap(5.0, 30.0)}  # the job that ended decides: a's backend
    assert learned_gaps(rows[:8], {"b": "a"}, {"a": "cli", "b": "cli"}) == {}  # two: too few

    asked: list[tuple[list[str], list[str]]] = []

    def read(labels, states, since):  # type: ignore[no-untyped-def]
        asked.append((list(labels), list(states)))
        assert since == T0 - timedelta(days=30)
        return rows

    assert handoff_gaps([["a", "b"]], {"a": "cli", "b": "command"}, read, T0) == gaps
    assert asked[0][0] == ["a", "b"] and "submitting" in asked[0][1] and "failed" in asked[0][1]
    assert handoff_gaps([], {}, read, T0) == {} and len(asked) == 1  # no chain: nothing read


def test_with_nothing_learned_the_poll_schedule_says_when_an_end_is_seen() -> None:
    policy = Backoff(2, 2, 30)
    assert poll_lag(policy, 10.0, None) == pytest.approx(4.0)  # looks at 2, 6, 14 s
    assert poll_lag(policy, 0.0, None) == 0.0
    # a job whose usual end is known is looked at then: seen at once
    assert poll_lag(policy, 600.0, Usual(600, 600, 600)) == pytest.approx(0.0, abs=1e-6)


def test_a_chain_step_waits_for_its_predecessors_end_to_be_seen() -> None:
    plan = Plan([], [["a", "b"]])
    spans = {"a": Span(100, 120), "b": Span(50, 60)}
    backends = {"a": "cli", "b": "cli"}
    plain = forecast(plan, backends, spans, start=T0, deadline_s=3600)
    seen = forecast(plan, backends, spans, start=T0, deadline_s=3600, seen={"a": (5.0, 30.0)})
    assert (plain.finish_p50, plain.finish_p95) == (at(150), at(180))
    assert (seen.finish_p50, seen.finish_p95) == (at(155), at(210))
    assert seen.critical_path == ["a", "b"]


def test_a_capped_slot_goes_on_when_its_jobs_end_is_seen() -> None:
    plan = Plan(["a", "b"], [])
    spans = {"a": Span(100, 100), "b": Span(100, 100)}
    backends = {"a": "cli", "b": "cli"}
    capped = forecast(
        plan, backends, spans, start=T0, deadline_s=3600, caps={"cli": 1}, seen={"a": (7.0, 7.0)}
    )
    jobs = {j.label: j for j in capped.jobs}
    assert jobs["b"].start_p50 == at(107) and capped.finish_p50 == at(207)
