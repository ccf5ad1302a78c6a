"""A night's forecast held against the night itself: a month of seeded history, then tonight run
through the engine (admission, caps, chains) on fake backends, on a fake clock.

Each job's duration is drawn from one distribution per job (``means``, log-normal, seeded): the
past nights are written through the Ledger (a chain's step submitted a hand-off after the step
before it ended, as the night's own poll sees it), the budgets learned from them, tonight
forecast as the night forecasts itself at its start (and as it did before it counted its own
gaps: a chain's step, a freed slot taken the instant the job before ended), then run on fake
backends whose jobs take new draws from the same distributions. Used by
``tests/unit/test_forecast_accuracy.py`` and ``bench/plan.py --accuracy``.
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
from nightshift.budgets.lookup import Budgets
from nightshift.config.catalogue import Catalogue
from nightshift.config.loader import parse_catalogue
from nightshift.engine.admission import Admission
from nightshift.engine.events import JobChanged
from nightshift.engine.forecast import Forecast, Span, durations_of, forecast
from nightshift.engine.forecast_check import NightCheck, check_night
from nightshift.engine.handoffs import Gap, handoff_gaps
from nightshift.engine.night import NightId, NightParts, finish_night, open_night
from nightshift.engine.night_forecast import forecast_body, forecast_night, seen_after
from nightshift.engine.plan import Plan, expected_durations, plan_night
from nightshift.engine.watcher import Watcher
from nightshift.loop import NightLoop
from nightshift.states import is_final
from nightshift.store.forecasts import Forecasts, StoredForecast
from nightshift.store.ledger import Ledger, Transition
from tests.night_kit import run_jobs
from tests.support import EPOCH, FakeClock, new_ledger_url

__all__ = [
    "ONE_CHAIN",
    "ONE_CHAIN_MEANS",
    "TWO_CHAINS",
    "TWO_CHAINS_MEANS",
    "MeasuredNight",
    "TimedBackend",
    "ends_of",
    "measure_night",
    "took_of",
]

NIGHT = "2030-01-01"
ONE_CHAIN = """\
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
ONE_CHAIN_MEANS = {
    "c1": 110,
    "c2": 100,
    "c3": 90,
    "c4": 80,
    "c5": 70,
    "c6": 60,
    "x1": 120,
    "x2": 60,
}
ONE_CHAIN_MEANS |= {"extract": 100, "load": 150, "publish": 90}
# and a second chain behind the capped cli's queue
TWO_CHAINS = ONE_CHAIN.replace("name: measured", "name: two-chains") + (
    "  - {label: fetch, backend: cli, task: fetch}\n"
    "  - {label: index, backend: command, argv: [x], depends_on: [fetch]}\n"
    "  - {label: report, backend: command, argv: [x], depends_on: [index]}\n"
)
TWO_CHAINS_MEANS = ONE_CHAIN_MEANS | {"fetch": 60, "index": 120, "report": 130}


def _draw(rng: random.Random, means: dict[str, float], label: str) -> float:
    return means[label] * rng.lognormvariate(0.0, 0.08)


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
    one submitted, every free slot of a capped backend taken, every other job submitted.
    Only then may the fake clock move on: else it would run ahead while a step is still on its
    way to its submit."""

    def __init__(
        self, backends: dict[str, str], caps: dict[str, int], chains: list[list[str]]
    ) -> None:
        self._backends, self._caps, self._chains = backends, caps, chains
        self._later = {step for chain in chains for step in chain[1:]}
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
        for chain in self._chains:
            for a, b in itertools.pairwise(chain):
                if a in ended and b not in states:
                    return False
        for label, backend in self._backends.items():
            if label in states or label in self._later:
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


def seed_history(
    ledger: Ledger,
    catalogue: Catalogue,
    means: dict[str, float],
    rng: random.Random,
    nights: int = 30,
) -> None:
    """``nights`` past nights of every job, their rows written through the Ledger: a chain's
    step submitted a hand-off after the step before it ended (the poll that saw it end)."""
    hand = random.Random(7)  # the hand-offs' own draws: the jobs' draws stay as they were
    for i in range(nights):
        night = (EPOCH - timedelta(days=i + 1)).date().isoformat()
        rows = []
        ended: dict[str, datetime] = {}
        for job in catalogue.jobs:
            start = EPOCH - timedelta(days=i + 1)
            if job.depends_on:  # seen ended at the clock's next tick (1 s here), submitted then
                start = ended[job.depends_on[0]] + timedelta(seconds=hand.uniform(0.0, 1.0))
            took = _draw(rng, means, job.label)
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


def ends_of(rows: list[Transition]) -> dict[str, tuple[datetime, datetime]]:
    """Each job's submit and end tonight, by its ledger rows."""
    out: dict[str, tuple[datetime, datetime]] = {}
    for row in rows:
        began = out[row.label][0] if row.label in out else row.at
        out[row.label] = (began, row.at)
    return out


def took_of(rows: list[Transition]) -> dict[str, float]:
    """Each job's time tonight, from its submitted row to its end (its span, as learned)."""
    return {label: (end - began).total_seconds() for label, (began, end) in ends_of(rows).items()}


@dataclass(frozen=True)
class MeasuredNight:
    """Tonight's forecast (``made``; ``unaided``: the spans alone, a job acted on the instant
    the one before it ended), the night's own check against it, its rows, and what it was
    made from."""

    catalogue: Catalogue
    plan: Plan
    start: datetime
    gaps: dict[str, Gap]
    budgets: Budgets
    made: Forecast
    unaided: Forecast
    check: NightCheck
    rows: list[Transition]
    exit_code: int

    @property
    def length_s(self) -> float:
        """The night's length, from its start to its last end."""
        finished = self.check.finished
        return (finished - self.start).total_seconds() if finished is not None else 0.0

    def replayed_off_s(self, *, gaps: bool) -> float:
        """How far the simulation is from the night when handed tonight's own durations (the
        draws' luck taken out: what is left is the model's), with the learned hand-offs
        counted or not (signed as ``off_s``)."""
        actual = {label: Span(took, took) for label, took in took_of(self.rows).items()}
        c = self.catalogue
        seen = seen_after(c, self.plan, actual, self.gaps) if gaps else None
        again = forecast(
            self.plan, {j.label: j.backend for j in c.jobs}, actual, start=self.start,
            deadline_s=c.defaults.deadline, caps=c.caps, stagger=c.defaults.stagger,
            rates=c.rates, seen=seen,
        )  # fmt: skip
        return self.off_s(again)

    def off_s(self, forecast: Forecast) -> float:
        """How far ``forecast``'s p50 finish is from the night's actual finish (signed:
        positive, the night ended later than said)."""
        assert self.check.finished is not None
        return (self.check.finished - forecast.finish_p50).total_seconds()


def measure_night(
    folder: Path,
    catalogue_text: str,
    means: dict[str, float],
    loop: NightLoop,
    seed: int = 20300101,
    nights: int = 30,
) -> MeasuredNight:
    """Seed ``nights`` of history in a ledger in ``folder``, forecast tonight, run it."""
    rng = random.Random(seed)
    catalogue = parse_catalogue(catalogue_text, folder / "nightshift.yaml")
    ledger = Ledger(new_ledger_url(folder / "ledger.db"), catalogue.key)
    try:
        seed_history(ledger, catalogue, means, rng, nights)
        clock = FakeClock(epoch=EPOCH)
        start = clock.wall()
        # as the night does at its start: its plan, the budgets it watches with, its caps
        plan = plan_night(catalogue, None, expected_durations(catalogue, ledger, start))
        budgets = current_budgets(ledger, start, catalogue.defaults.min_samples)
        # and the night's own gaps: how long after a chain step ends the next one is submitted
        backend_of = {j.label: j.backend for j in catalogue.jobs}
        gaps = handoff_gaps(plan.chains, backend_of, ledger.state_times, start)
        made = forecast_night(catalogue, plan, budgets, start=start, gaps=gaps)
        unaided = forecast(
            plan, backend_of, durations_of(budgets, catalogue, plan.labels), start=start,
            deadline_s=catalogue.defaults.deadline, caps=catalogue.caps,
            stagger=catalogue.defaults.stagger, rates=catalogue.rates,
        )  # fmt: skip
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

        tonight = {x: _draw(rng, means, x) for x in means}
        names = sorted({j.backend for j in catalogue.jobs})
        backends = {b: TimedBackend(b, clock, tonight) for b in names}
        parts = NightParts(
            backends=dict(backends),
            ledger=ledger,
            admission=Admission(0, catalogue.caps, clock=clock),
            clock=clock,
            wall=clock.wall,
            budgets=lambda *_: budgets,
            poll_hints=None,
            cancel_poll_s=None,
            loop=loop,
        )
        settled = Settled(backend_of, catalogue.caps, plan.chains)
        parts.sinks.append(settled)
        where = NightId(NIGHT, "tonight", folder / "run")
        with open_night(catalogue, parts, plan, where) as ctx, Driver(clock, ctx.watcher, settled):
            run_jobs(ctx, plan)
        summary = finish_night(ctx, plan, start.isoformat())
        rows = ledger.dwells(NIGHT)
        check = check_night(Forecasts(ledger.engine, catalogue.key).of_night(NIGHT)[0], rows)
    finally:
        ledger.close()
    return MeasuredNight(
        catalogue, plan, start, gaps, budgets, made, unaided, check, rows, summary.exit_code
    )
