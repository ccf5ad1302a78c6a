"""The forecast measured, not asserted: 30 nights of history, then a night run on fake backends.

Each job's duration is drawn from one distribution per job (seeded): 30 past nights are written
through the Ledger, the budgets learned from them, tonight forecast as the night forecasts itself
at its start, and the night then run through the engine (admission, the cap, the chain) on fake
backends whose jobs take new draws from the same distributions, on the tests' fake clock
(``tests/forecast_night.py``). The forecast is then held against the night's own ledger rows, as
the report and ``plan --accuracy`` hold it.
"""

from __future__ import annotations

import itertools
from datetime import datetime
from pathlib import Path

from nightshift.engine.night_forecast import forecast_night
from nightshift.loop import NightLoop
from tests.forecast_night import ONE_CHAIN, ONE_CHAIN_MEANS, ends_of, measure_night

CATALOGUE, MEANS = ONE_CHAIN, ONE_CHAIN_MEANS
CHAIN = ["extract", "load", "publish"]


def _actual_path(ends: dict[str, tuple[datetime, datetime]], backends: dict[str, str]) -> list[str]:
    """From the job that ended last back along what each waited for: the chain step before it,
    else the job of its backend whose end let it start (a slot), else nothing."""
    before = {b: a for a, b in itertools.pairwise(CHAIN)}
    node: str | None = max(ends, key=lambda x: ends[x][1])
    path: list[str] = []
    while node is not None:
        path.append(node)
        began = ends[node][0]
        if node in before:
            node = before[node]
            continue
        freed = [
            x for x in ends if backends[x] == backends[node] and x != node and ends[x][1] <= began
        ]
        near = [x for x in freed if (began - ends[x][1]).total_seconds() <= 5]
        node = max(near, key=lambda x: ends[x][1]) if near else None
    return path[::-1]


def test_the_forecast_finish_is_within_five_percent_of_a_night_run_on_fake_backends(
    tmp_path: Path,
    night_loop: NightLoop,
) -> None:
    night = measure_night(tmp_path, CATALOGUE, MEANS, night_loop)
    catalogue, plan, start, gaps, made = (
        night.catalogue, night.plan, night.start, night.gaps, night.made
    )  # fmt: skip
    budgets = night.budgets
    assert set(gaps) == {"command"} and 0.0 < gaps["command"].p50 < 1.0
    assert night.exit_code == 0
    check, rows, length = night.check, night.rows, night.length_s
    assert length > 300  # the chain, about 340 s
    assert check.error_s is not None and abs(check.error_s) <= 0.05 * length, (
        check.error_s,
        length,
    )
    assert check.finished is not None and made.finish_p95 >= check.finished  # p95 never below
    # tonight's own durations in the simulation: what is left is the night's own gaps, which
    # the learned hand-offs account for and the spans alone do not
    off_with, off_without = (abs(night.replayed_off_s(gaps=g)) for g in (True, False))
    print(f"oracle off by {off_with:.2f} s with the gaps, {off_without:.2f} s without")
    assert off_with < off_without and off_with <= 0.01 * length
    # the critical path is the one the night ran
    of = {job.label: job.backend for job in catalogue.jobs}
    ends = ends_of(rows)
    assert made.critical_path == CHAIN == _actual_path(ends, of)

    # the cap of 2 queues four cli jobs: the forecast shows their waits, and when they start
    forecast_start = {j.label: j.start_p50 for j in made.jobs}
    waited = sorted(j.label for j in made.jobs if j.wait_s > 0)
    assert waited == ["c3", "c4", "c5", "c6"]
    cli = [x for x in of if of[x] == "cli"]
    for label in cli:
        off = abs((forecast_start[label] - ends[label][0]).total_seconds())
        assert off <= 0.10 * length, (label, off)
    # never more than two in flight there tonight
    for label in cli:
        at = ends[label][0]
        assert sum(1 for x in cli if ends[x][0] <= at < ends[x][1]) <= 2, label
    # a forecast that ignored the cap would have started them all at once: far off
    uncapped = forecast_night(catalogue, plan, budgets, start=start, caps={"cli": 100})
    worst_off = max(
        abs((j.start_p50 - ends[j.label][0]).total_seconds())
        for j in uncapped.jobs
        if j.label in cli
    )
    assert worst_off > 0.10 * length
