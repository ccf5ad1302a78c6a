"""Missed nights: the schedule's nights due and what a run does about them, per policy."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from nightshift.config.missed import Missed
from nightshift.engine.missed import decide, schedule_nights

D = ["2026-12-04", "2026-12-05", "2026-12-06"]  # D-2, D-1, tonight: all three late


def test_the_schedules_nights_are_the_utc_dates_of_its_slots() -> None:
    since = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
    until = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)
    got = schedule_nights("0 2 * * *", "UTC", since, until)
    assert list(got) == D
    assert got["2026-12-06"] == datetime(2026, 12, 6, 2, 0, tzinfo=UTC)
    # 23:30 in Tokyo is 14:30 UTC the same day; Sunday-only nights skip the week
    tokyo = schedule_nights("30 23 * * *", "Asia/Tokyo", since, until)
    assert tokyo["2026-12-04"] == datetime(2026, 12, 4, 14, 30, tzinfo=UTC)
    assert list(schedule_nights("0 2 * * 0", None, since, until)) == ["2026-12-06"]


def test_a_bad_cron_or_zone_is_a_value_error() -> None:
    at = datetime(2026, 12, 3, tzinfo=UTC)
    with pytest.raises(ValueError, match="cron"):
        schedule_nights("every night", "UTC", at, at)
    with pytest.raises(ValueError, match="time zone"):
        schedule_nights("0 2 * * *", "Mars/Olympus", at, at)


@pytest.mark.parametrize("run", ["latest", "none"])
def test_by_default_only_tonight_runs_and_the_earlier_nights_are_named(run: str) -> None:
    policy = Missed(run=run)  # type: ignore[arg-type]
    stale = decide(D[0], D, set(), set(), policy)
    assert (stale.runs_own, stale.first, stale.named) == (False, [], [D[0], D[1]])
    assert stale.latest == D[2]
    tonight = decide(D[2], D, set(), set(), policy)
    assert (tonight.runs_own, tonight.first, tonight.named) == (True, [], [D[0], D[1]])
    # once named (by whichever run came first), a night is not named again
    assert decide(D[2], D, set(), {D[0], D[1]}, policy).quiet
    again = decide(D[1], D, set(), {D[0], D[1]}, policy)
    assert (again.runs_own, again.named) == (False, [])


def test_all_runs_every_missed_night_oldest_first_whichever_run_comes_first() -> None:
    policy = Missed(run="all")
    # the oldest run first: its own night; then the next; then tonight
    assert decide(D[0], D, set(), set(), policy).nights == [D[0]]
    assert decide(D[1], D, {D[0]}, set(), policy).nights == [D[1]]
    assert decide(D[2], D, {D[0], D[1]}, set(), policy).nights == [D[2]]
    # tonight's run first: the two earlier nights before its own, in order
    first = decide(D[2], D, set(), set(), policy)
    assert (first.first, first.runs_own, first.named) == ([D[0], D[1]], True, [])
    # the stale runs after it find their nights done
    late = decide(D[0], D, {D[0], D[1], D[2]}, set(), policy)
    assert (late.nights, late.named, late.why) == ([], [], f"night {D[0]} already ran")


def test_all_keeps_to_max_nights_and_names_the_older_ones() -> None:
    due = [f"2026-12-0{d}" for d in range(1, 7)]
    got = decide(due[-1], due, set(), set(), Missed(run="all", max_nights=2))
    assert got.first == ["2026-12-04", "2026-12-05"]
    assert got.named == ["2026-12-01", "2026-12-02", "2026-12-03"]
    old = decide("2026-12-02", due, set(), set(), Missed(run="all", max_nights=2))
    assert (old.runs_own, old.first) == (False, [])
    assert "2026-12-02" in old.named


def test_all_newest_first_runs_tonight_then_back_in_time() -> None:
    got = decide(D[2], D, set(), set(), Missed(run="all", order="newest"))
    assert got.nights == [D[2], D[1], D[0]]


def test_a_run_of_a_night_off_the_schedule_runs() -> None:
    assert decide("2026-12-07", D, set(D), set(), Missed()).quiet


def test_a_night_on_time_with_nothing_missed_says_nothing() -> None:
    from nightshift.engine.missed import late_line

    slot = datetime(2026, 12, 6, 2, 0, tzinfo=UTC)
    assert late_line(slot, slot.replace(minute=14), []) is None
    assert late_line(None, slot, []) is None


def test_a_late_night_says_its_slot_its_start_and_the_nights_missed_before_it() -> None:
    from nightshift.engine.missed import late_line

    slot = datetime(2026, 12, 6, 2, 0, tzinfo=UTC)
    line = late_line(slot, slot.replace(hour=9, minute=12), [(D[0], "never run"), (D[1], "ok")])
    assert line == (
        "ran late: scheduled 2026-12-06 02:00 UTC, started 2026-12-06 09:12 UTC (7h12m late); "
        "missed before it: 2026-12-04 (never run), 2026-12-05 (ok)"
    )


def test_all_runs_a_missed_night_named_before_by_the_watchdog_within_its_window() -> None:
    # the worker was down: the watchdog named D-2 and D-1; the worker is back
    got = decide(D[2], D, set(), {D[0], D[1]}, Missed(run="all"))
    assert (got.first, got.named) == ([D[0], D[1]], [])
    # latest keeps them named, not run
    assert decide(D[2], D, set(), {D[0], D[1]}, Missed()).quiet


def test_the_crons_nights_count_from_the_catalogues_first_night_its_runs_always() -> None:
    from nightshift.engine.missed import due_nights

    at = datetime(2026, 12, 1, 2, 0, tzinfo=UTC)
    cron = {f"2026-12-0{d}": at.replace(day=d) for d in range(1, 7)}
    runs = {"2026-11-30": at.replace(month=11, day=30)}
    # a new catalogue (or ledger): no cron night is missed, a run waiting at a slot is due
    assert list(due_nights(cron, {}, None)) == []
    assert due_nights(cron, runs, None) == runs
    assert sorted(due_nights(cron, runs, "2026-12-03")) == [
        "2026-11-30",
        "2026-12-04",
        "2026-12-05",
        "2026-12-06",
    ]


def test_the_backfill_command_runs_exactly_the_nights_named() -> None:
    from nightshift.engine.missed import backfill_command

    assert backfill_command("n.yaml", [D[1], D[0]]) == (
        "nightshift backfill --catalogue n.yaml --from 2026-12-04 --to 2026-12-05"
    )
    # a weekday schedule's missed Friday and Monday: not the weekend between them
    assert backfill_command(None, ["2026-12-04", "2026-12-07"]) == (
        "nightshift backfill --nights 2026-12-04,2026-12-07"
    )


def test_several_crons_merge_their_nights_and_name_what_cannot_be_read() -> None:
    from nightshift.engine.missed import crons_nights

    since = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
    until = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)
    nights, problems = crons_nights(
        [("0 2 * * *", "UTC"), ("0 1 * * 0", "UTC"), ("every night", None)], since, until
    )
    assert list(nights) == D and nights[D[2]] == datetime(2026, 12, 6, 1, 0, tzinfo=UTC)
    assert len(problems) == 1 and "every night" in problems[0]
