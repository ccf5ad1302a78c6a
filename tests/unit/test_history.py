"""sandbox/history.py's made-up month: deterministic, and shaped as a night writes its rows."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, date, datetime
from itertools import pairwise
from typing import Any

import pytest

from nightshift.sandbox.history import Habits, History, Usual, generate

TONIGHT = date(2026, 11, 29)
USUAL = [
    Usual("gen:a", "cli", (("queued", 1.5), ("running", 3.0))),
    Usual("gen:short-queue", "cli", (("queued", 0.01), ("running", 2.0)), start_s=0.2),
    Usual("cmd:b", "command", (("running", 2.0),), start_s=5.0),
    Usual("batch:c", "gemini_batch", (("queued", 600.0), ("running", 1200.0)), start_s=1.0),
]
TEN = [Usual(f"job:{i}", "cli", (("queued", 1.0 + i), ("running", 2.0 + i))) for i in range(10)]


def _by_job_night(history: History) -> dict[tuple[str, str], list[dict[str, Any]]]:
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in history.transitions:
        groups[(row["night"], row["label"])].append(row)
    return groups


def test_the_same_arguments_give_the_same_rows_and_another_seed_others() -> None:
    assert generate(USUAL, TONIGHT) == generate(USUAL, TONIGHT)
    assert generate(USUAL, TONIGHT) != generate(USUAL, TONIGHT, habits=Habits(seed=9))


def test_every_job_has_one_chain_a_night_for_the_nights_before_tonight() -> None:
    history = generate(USUAL, TONIGHT, nights=30)
    groups = _by_job_night(history)
    nights = sorted({night for night, _ in groups})
    assert len(nights) == 30
    assert nights[0] == "2026-10-30" and nights[-1] == "2026-11-28"
    assert len(groups) == 30 * len(USUAL)
    assert len(history.jobs) == 30 * len(USUAL)
    assert all(row["at"] < datetime(2026, 11, 29, tzinfo=UTC) for row in history.transitions)
    assert len({row["run_id"] for row in history.transitions}) == 30  # one run a night


@pytest.mark.parametrize("job", USUAL, ids=lambda job: job.label)
def test_each_chain_goes_through_the_states_a_night_writes_in_order(job: Usual) -> None:
    history = generate(USUAL, TONIGHT)
    usual_states = [state for state, _ in job.states]
    for (_, label), rows in _by_job_night(history).items():
        if label != job.label:
            continue
        states = [row["to_state"] for row in rows]
        assert states[:2] == ["submitting", "submitted"]
        assert states[-1] in ("succeeded", "failed")
        middle = states[2:-1]
        assert middle == [s for s in usual_states if s in middle]  # in order, some maybe unseen
        # each row names the state it left and how long it stayed there
        assert rows[0]["from_state"] is None and rows[0]["dwell_s"] is None
        assert rows[0]["external_id"] is None  # the submit has not answered yet
        for before, row in pairwise(rows):
            assert row["from_state"] == before["to_state"]
            seconds = (row["at"] - before["at"]).total_seconds()
            assert row["dwell_s"] == pytest.approx(seconds, abs=1e-5)
            assert row["dwell_s"] > 0
        assert {row["attempt"] for row in rows} == {1}
        assert len({row["external_id"] for row in rows[1:]}) == 1


def test_the_usual_times_are_what_the_dwells_center_on() -> None:
    dwells: dict[tuple[str, str], list[float]] = defaultdict(list)
    for row in generate(USUAL, TONIGHT).transitions:
        if row["dwell_s"] is not None:
            dwells[(row["label"], row["from_state"])].append(row["dwell_s"])

    def median(values: list[float]) -> float:
        return sorted(values)[len(values) // 2]

    # seen at polls 2 s apart at most: a 20-minute state is measured to within a poll or two
    assert median(dwells[("batch:c", "running")]) == pytest.approx(1200, rel=0.25)
    assert median(dwells[("batch:c", "queued")]) == pytest.approx(600, rel=0.25)
    # a queue shorter than the first poll is never seen
    assert ("gen:short-queue", "queued") not in dwells
    assert median(dwells[("gen:a", "submitted")]) < 1.0  # the first poll comes after 0.5 s


def test_a_few_nights_fail_and_their_job_rows_say_so() -> None:
    history = generate(TEN, TONIGHT)
    groups = _by_job_night(history)
    failed = [key for key, rows in groups.items() if rows[-1]["to_state"] == "failed"]
    assert 0 < len(failed) <= 0.1 * len(groups)
    records = {(job["night"], job["label"]): job for job in history.jobs}
    for key, rows in groups.items():
        record = records[key]
        assert record["state"] == rows[-1]["to_state"]
        assert record["submitted_at"] == rows[0]["at"]
        assert record["finished_at"] == rows[-1]["at"]
        assert record["external_id"] == rows[-1]["external_id"]
        assert (record["detail"] is not None) == (record["state"] == "failed")


def test_no_failures_when_the_habits_say_none() -> None:
    history = generate(TEN, TONIGHT, habits=Habits(failure_rate=0.0))
    assert {job["state"] for job in history.jobs} == {"succeeded"}


def test_a_job_that_ends_before_its_first_look_has_no_states_between_and_may_fail() -> None:
    instant = [Usual(f"cmd:{i}", "command", ()) for i in range(5)]
    history = generate(instant, TONIGHT, habits=Habits(failure_rate=0.5))
    chains = {tuple(r["to_state"] for r in rows) for rows in _by_job_night(history).values()}
    assert chains == {
        ("submitting", "submitted", "succeeded"),
        ("submitting", "submitted", "failed"),
    }
