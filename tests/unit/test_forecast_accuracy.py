"""The forecast measured, not asserted: 30 nights of history, then a night run on fake backends.

Each job's duration is drawn from one distribution per job (seeded): 30 past nights are written
through the Ledger, the budgets learned from them, tonight forecast as the night forecasts itself
at its start, and the night then run through the engine (admission, the cap, the chain) on fake
backends whose jobs take new draws from the same distributions, on the tests' fake clock. The
forecast is then held against the night's own ledger rows, as the report and ``plan --accuracy``
hold it.
"""

from __future__ import annotations

import itertools
import random
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from nightshift.backends.base import ExternalState, JobSpec, JobStatus
from nightshift.budgets.current import current_budgets
from nightshift.config.loader import parse_catalogue
from nightshift.engine.admission import Admission
from nightshift.engine.events import JobChanged
from nightshift.engine.forecast import Span, forecast
from nightshift.engine.forecast_check import check_night
from nightshift.engine.handoffs import handoff_gaps
from nightshift.engine.night import (
    NightId,
    NightParts,
    finish_night,
    open_night,
)
from nightshift.engine.night_forecast import forecast_body, forecast_night, seen_after
from nightshift.engine.plan import expected_durations, plan_night
from nightshift.engine.watcher import Watcher
from nightshift.loop import NightLoop
from nightshift.states import is_final
from nightshift.store.forecasts import Forecasts, StoredForecast
from nightshift.store.ledger import Ledger, Transition
from tests.night_kit import run_jobs
from tests.support import EPOCH, FakeClock, new_ledger_url

NIGHT = "2030-01-01"
CATALOGUE = """\
name: measured
defaults: {poll: {initial: 1s, max: 2s}, stagger: 0s, retries: 0, deadline: 24h}
limits: {cli: 2}
jobs:
  - {label: c1, backend: cli, task: c1}
  - {label: c2, backend: cli, task: c2}
  - {label: c3, backend: cli, task: c3}
  - {label: c4, backend: cli, task: c4}
  - {label: c5, backend: cli, task: c5}
  - {label: c6, backend: cli, task: c6}
  - {label: x1, backend: command, argv: [x]}
  - {label: x2, backend: command, argv: [x]}
  - {label: extract, backend: command, argv: [x]}
  - {label: load, backend: command, argv: [x], depends_on: [extract]}
  - {label: publish, backend: command, argv: [x], depends_on: [load]}
"""
# each job's usual seconds: the chain decides the night; the capped cli queues four of six
MEANS = {"c1": 110, "c2": 100, "c3": 90, "c4": 80, "c5": 70, "c6": 60, "x1": 120, "x2": 60}
MEANS |= {"extract": 100, "load": 150, "publish": 90}
CHAIN = ["extract", "load", "publish"]


def _draw(rng: random.Random, label: str) -> float:
    return MEANS[label] * rng.lognormvariate(0.0, 0.08)


@dataclass
class TimedBackend:
    """A fake backend on the fake clock: a job runs from its submit for its drawn seconds."""

    name: str
    clock: FakeClock
    seconds: dict[str, float]
    started: dict[str, datetime] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def submit(self, spec: JobSpec) -> str:
        with self._lock:
            self.started[spec.label] = self.clock.wall()
        return spec.label

    def status(self, external_id: str) -> JobStatus:
        with self._lock:
            began = self.started[external_id]
        end = began + timedelta(seconds=self.seconds[external_id])
        if self.clock.wall() < end:
            return JobStatus(ExternalState.RUNNING, started_at=began)
        return JobStatus(ExternalState.SUCCEEDED, 0, started_at=began, finished_at=end)

    def cancel(self, external_id: str) -> None:
        raise AssertionError(f"nothing is cancelled tonight: {external_id}")

    def logs(self, external_id: str, tail: int = 40) -> str:
        return ""


class Settled:
    """A sink of the night's events that says when the engine has done all it can at this
    instant: every job submitted is watched (or said ended), every chain step after an ended
    one submitted, every free slot of the capped backend taken, every other job submitted.
    Only then may the fake clock move on: else it would run ahead while a step is still on its
    way to its submit."""

    def __init__(self, backends: dict[str, str], caps: dict[str, int]) -> None:
        self._backends, self._caps = backends, caps
        self._states: dict[str, str] = {}
        self._lock = threading.Lock()

    def __call__(self, event: object) -> None:
        if isinstance(event, JobChanged):
            with self._lock:
                self._states[event.label] = event.state

    def settled(self, watched: list[str]) -> bool:
        with self._lock:
            states = dict(self._states)
        ended = {x for x, s in states.items() if is_final(s)}
        if set(states) - ended - set(watched):
            return False  # on its way to the watcher, or seen ended and not yet said so
        for a, b in itertools.pairwise(CHAIN):
            if a in ended and b not in states:
                return False
        for label, backend in self._backends.items():
            if label in states or label in CHAIN[1:]:
                continue
            busy = [x for x in states if self._backends[x] == backend and x not in ended]
            if len(busy) < self._caps.get(backend, len(self._backends)):
                return False  # a job free to go that has not gone yet
        return True


class Driver:
    """Moves the fake clock a second at a time while jobs are out there and the engine is
    settled (``Settled``), waiting for the watcher to be idle after each step."""

    def __init__(self, clock: FakeClock, watcher: Watcher, settled: Settled) -> None:
        self._clock, self._watcher, self._settled = clock, watcher, settled
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="forecast-driver")

    def __enter__(self) -> Driver:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        waited = 0
        while not self._stop.is_set():
            watched = self._watcher.in_flight()
            if not watched or (not self._settled.settled(watched) and waited < 5000):
                self._stop.wait(0.001)
                waited += 1
                continue
            waited = 0
            self._clock.advance(1.0)
            self._watcher.poke()
            self._watcher.wait_idle(timeout=10)


def _seed(ledger: Ledger, rng: random.Random, nights: int = 30) -> None:
    """``nights`` past nights of every job, their rows written through the Ledger: a chain's
    step submitted a hand-off after the step before it ended (the poll that saw it end)."""
    catalogue = parse_catalogue(CATALOGUE)
    hand = random.Random(7)  # the hand-offs' own draws: the jobs' draws stay as they were
    for i in range(nights):
        night = (EPOCH - timedelta(days=i + 1)).date().isoformat()
        rows = []
        ended: dict[str, datetime] = {}
        for job in catalogue.jobs:
            start = EPOCH - timedelta(days=i + 1)
            if job.depends_on:  # seen ended at the clock's next tick (1 s here), submitted then
                start = ended[job.depends_on[0]] + timedelta(seconds=hand.uniform(0.0, 1.0))
            took = _draw(rng, job.label)
            ended[job.label] = start + timedelta(seconds=took)
            ledger.record_submit(night, job.label, job.backend, "x", 1, at=start)
            ledger.record_state(night, job.label, "succeeded", ended[job.label])
            for state, at in [
                ("submitting", 0.0),
                ("submitted", 0.0),
                ("running", 1.0),
                ("succeeded", took),
            ]:
                when = start + timedelta(seconds=at)
                rows.append((night, f"r{i}", job.label, job.backend, "x", state, when, 1))
        ledger.transitions(rows)


def _ends(rows: list[Transition]) -> dict[str, tuple[datetime, datetime]]:
    """Each job's submit and end tonight, by its ledger rows."""
    out: dict[str, tuple[datetime, datetime]] = {}
    for row in rows:
        began = out[row.label][0] if row.label in out else row.at
        out[row.label] = (began, row.at)
    return out


def _took(rows: list[Transition]) -> dict[str, float]:
    """Each job's time tonight, from its submitted row to its end (its span, as learned)."""
    return {label: (end - began).total_seconds() for label, (began, end) in _ends(rows).items()}


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
    rng = random.Random(20300101)
    ledger = Ledger(new_ledger_url(tmp_path / "ledger.db"), "measured")
    _seed(ledger, rng)
    catalogue = parse_catalogue(CATALOGUE, tmp_path / "nightshift.yaml")
    clock = FakeClock(epoch=EPOCH)
    start = clock.wall()
    # as the night does at its start: its plan, the budgets it watches with, its caps
    plan = plan_night(catalogue, None, expected_durations(catalogue, ledger, start))
    budgets = current_budgets(ledger, start, catalogue.defaults.min_samples)
    # and the night's own gaps: how long after a chain step ends the next one is submitted
    backend_of = {j.label: j.backend for j in catalogue.jobs}
    gaps = handoff_gaps(plan.chains, backend_of, ledger.state_times, start)
    assert set(gaps) == {"command"} and 0.0 < gaps["command"].p50 < 1.0
    made = forecast_night(catalogue, plan, budgets, start=start, gaps=gaps)
    stored = StoredForecast(
        NIGHT,
        "tonight",
        start,
        start,
        made.finish_p50,
        made.finish_p95,
        made.critical_path,
        forecast_body(made),
    )
    Forecasts(ledger.engine, catalogue.key).save(stored)

    tonight = {x: _draw(rng, x) for x in MEANS}
    backends = {b: TimedBackend(b, clock, tonight) for b in ("cli", "command")}
    parts = NightParts(
        backends=dict(backends),
        ledger=ledger,
        admission=Admission(0, catalogue.caps, clock=clock),
        clock=clock,
        wall=clock.wall,
        budgets=lambda *_: budgets,
        poll_hints=None,
        cancel_poll_s=None,
        loop=night_loop,
    )
    settled = Settled({job.label: job.backend for job in catalogue.jobs}, catalogue.caps)
    parts.sinks.append(settled)
    where = NightId(NIGHT, "tonight", tmp_path / "run")
    with open_night(catalogue, parts, plan, where) as ctx, Driver(clock, ctx.watcher, settled):
        outcomes = run_jobs(ctx, plan)
    summary = finish_night(ctx, plan, start.isoformat(), outcomes)
    assert summary.exit_code == 0, summary.message()

    rows = ledger.dwells(NIGHT)
    check = check_night(Forecasts(ledger.engine, catalogue.key).of_night(NIGHT)[0], rows)
    ledger.close()
    length = (check.finished - start).total_seconds() if check.finished else 0.0
    assert length > 300  # the chain, about 340 s
    assert check.error_s is not None and abs(check.error_s) <= 0.05 * length, (
        check.error_s,
        length,
    )
    assert check.finished is not None and made.finish_p95 >= check.finished  # p95 never below
    # tonight's own durations in the simulation: what is left is the night's own gaps, which
    # the learned hand-offs account for and the spans alone do not
    actual = {label: Span(took, took) for label, took in _took(rows).items()}
    oracle = [
        forecast(
            plan, backend_of, actual, start=start, deadline_s=86400, caps=catalogue.caps,
            seen=seen_after(catalogue, plan, actual, g) if g is not None else None,
        ).finish_p50
        for g in (gaps, None)
    ]  # fmt: skip
    assert check.finished is not None
    off_with, off_without = (abs((check.finished - f).total_seconds()) for f in oracle)
    print(f"oracle off by {off_with:.2f} s with the gaps, {off_without:.2f} s without")
    assert off_with < off_without and off_with <= 0.01 * length
    # the critical path is the one the night ran
    of = {job.label: job.backend for job in catalogue.jobs}
    ends = _ends(rows)
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
