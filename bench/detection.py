"""Replay a month of varied jobs through the pure detector: stalls named how soon, false alerts.

30 days of history teach each (job, state) its p50/p95 (numpy's linear percentiles, as the
budgets' pandas does). Then 20 nights are replayed through ``Detector`` with the night's floor
(``dwell_floor`` of the poll cap) and 3 stalls injected per night: a job stuck in its queue or its
run until the 24 h SLA. The watcher sees the true state and when it began (backend-reported
times) on a fixed poll (default: the 30 s poll cap; ``--wake`` also wakes at the detector's next
level moment, as a night's dwell timer does).

The jobs vary the way a real catalogue does: each (job, state) has its own log-normal spread
from 0.15 to 0.6; every job has a sub-second ``submitted`` phase (normally instant: no levels);
queues of minutes; runs of minutes to an hour; one job is bimodal (a short or a long run). The
parameters are fixed up front; nothing here is tuned to the aims, which are: every stall alerted
within 2 x p95 plus one poll tick of its start, at most 1 false alert per 100 normal job-nights,
no level announced twice. ``--no-floor`` replays the same nights without the floor and the
instant rule, for comparison.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np

from nightshift.budgets.lookup import Budget, dwell_floor
from nightshift.config.durations import format_duration
from nightshift.engine.detection import BudgetTable, Detector

STATES = ("submitted", "queued", "running")
WATCHED = ("queued", "running")  # where stalls are injected: submitted is normally instant
MEDIAN_RANGE_S = {
    "submitted": (0.1, 0.6),  # the backend answered: sub-second
    "queued": (2 * 60, 10 * 60),  # a queue of minutes
    "running": (3 * 60, 60 * 60),
}  # log-uniform per (job, state)
SIGMA_RANGE = (0.15, 0.6)  # log-normal spread per (job, state): p95/p50 from 1.3x to 2.7x
BIMODAL = "job-00"  # its run is short (6 min) 75 % of nights, long (25 min) the rest
BIMODAL_RUNS_S, BIMODAL_LONG = (6 * 60.0, 25 * 60.0), 0.25
HISTORY_DAYS = 30
SLA_S = 24 * 3600.0
T0 = datetime(2026, 11, 29, 1, 0, tzinfo=UTC)

Shapes = dict[tuple[str, str], tuple[float, float]]


@dataclass(frozen=True)
class Phase:
    state: str
    start: float  # seconds after submit
    end: float


@dataclass(frozen=True)
class Stall:
    night: int
    label: str
    state: str
    phases: tuple[Phase, ...]


def job_shapes(rng: np.random.Generator, labels: list[str]) -> Shapes:
    """(label, state) -> (mu, sigma) of the log of its dwell in seconds."""
    shapes = {}
    for label in labels:
        for state in STATES:
            lo, hi = MEDIAN_RANGE_S[state]
            median = float(np.exp(rng.uniform(np.log(lo), np.log(hi))))
            shapes[(label, state)] = (np.log(median), float(rng.uniform(*SIGMA_RANGE)))
    return shapes


def dwell(rng: np.random.Generator, shapes: Shapes, label: str, state: str) -> float:
    """One normal dwell of ``label`` in ``state``."""
    mu, sigma = shapes[(label, state)]
    if label == BIMODAL and state == "running":
        mu = np.log(BIMODAL_RUNS_S[int(rng.random() < BIMODAL_LONG)])
    return float(rng.lognormal(mu, sigma))


def learn(rng: np.random.Generator, shapes: Shapes, labels: list[str]) -> BudgetTable:
    """p50/p95 per (job, state) from HISTORY_DAYS nights of normal dwells."""
    table = {}
    for label in labels:
        for state in STATES:
            history = [dwell(rng, shapes, label, state) for _ in range(HISTORY_DAYS)]
            p50, p95 = np.percentile(history, [50, 95])
            table[(label, state)] = Budget(p50=float(p50), p95=float(p95), n=HISTORY_DAYS)
    return BudgetTable(table)


def night_phases(rng: np.random.Generator, shapes: Shapes, label: str) -> tuple[Phase, ...]:
    """One normal job-night: submitted, queued, then running, each a fresh dwell."""
    phases, t = [], 0.0
    for state in STATES:
        length = dwell(rng, shapes, label, state)
        phases.append(Phase(state, t, t + length))
        t += length
    return tuple(phases)


def stalled(phases: tuple[Phase, ...], state: str) -> tuple[Phase, ...]:
    """The same job-night, stuck in ``state`` from its start until the SLA."""
    kept = [p for p in phases if STATES.index(p.state) < STATES.index(state)]
    start = kept[-1].end if kept else 0.0
    return (*kept, Phase(state, start, SLA_S))


def replay(
    detector: Detector, label: str, phases: tuple[Phase, ...], poll_s: float, wake: bool
) -> list[tuple[str, str, float]]:
    """(state, level, seconds after submit) of each level change the detector announced."""
    seen: list[tuple[str, str, float]] = []
    t, end = 0.0, phases[-1].end
    while t < end:
        phase = next(p for p in phases if p.start <= t < p.end)
        for alert in detector.observe(
            label, phase.state, entered_at=_at(phase.start), now=_at(t), backend="bench"
        ):
            seen.append((alert.state, alert.level, t))
        step = t + poll_s
        if wake and (moment := detector.next_change_at(label)) is not None:
            step = min(step, max(t + 1e-6, _s(moment)))
        t = step
    detector.forget(label)
    return seen


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _s(moment: datetime) -> float:
    return (moment - T0).total_seconds()


@dataclass
class Tally:
    """What the replay saw."""

    normal: int = 0
    false_alerts: int = 0
    false_watches: int = 0
    repeats: int = 0
    observations: int = 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=40)
    parser.add_argument("--nights", type=int, default=20)
    parser.add_argument("--stalls", type=int, default=3, help="stalls injected per night")
    parser.add_argument("--poll", type=float, default=30.0, help="seconds between checks")
    parser.add_argument("--wake", action="store_true", help="also wake at the next level moment")
    parser.add_argument("--no-floor", action="store_true", help="no floor, no instant rule")
    args = parser.parse_args()

    started = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    labels = [f"job-{i:02d}" for i in range(args.jobs)]
    shapes = job_shapes(rng, labels)
    budgets = learn(rng, shapes, labels)
    floor_s = 0.0 if args.no_floor else dwell_floor(args.poll)

    stall_at: dict[tuple[int, str], str] = {}
    for night in range(args.nights):
        for i, label in enumerate(rng.choice(labels, size=args.stalls, replace=False)):
            stall_at[(night, str(label))] = WATCHED[(night + i) % 2]

    stalls: list[tuple[Stall, list[tuple[str, str, float]]]] = []
    tally = Tally()
    for night in range(args.nights):
        detector = Detector(f"night-{night:02d}", "bench", budgets, floor_s=floor_s)
        for label in labels:
            phases = night_phases(rng, shapes, label)
            state = stall_at.get((night, label))
            if state is not None:
                phases = stalled(phases, state)
            seen = replay(detector, label, phases, args.poll, args.wake)
            tally.observations += int(phases[-1].end // args.poll) + 1
            keys = Counter((s, level) for s, level, _ in seen)
            tally.repeats += sum(n - 1 for n in keys.values())
            if state is None:
                tally.normal += 1
                alerts = sum(level == "alert" for _, level, _ in seen)
                tally.false_alerts += alerts
                tally.false_watches += sum(level == "watch" for _, level, _ in seen)
            else:
                stalls.append((Stall(night, label, state, phases), seen))
    elapsed = time.perf_counter() - started
    report(args, budgets, floor_s, stalls, tally, elapsed)


def report(
    args: argparse.Namespace,
    budgets: BudgetTable,
    floor_s: float,
    stalls: list[tuple[Stall, list[tuple[str, str, float]]]],
    tally: Tally,
    elapsed: float,
) -> None:
    """The per-stall table and the figures against the aims."""
    mode = f"poll every {args.poll:g} s" + (" + wake at the next level moment" if args.wake else "")
    floor = "no floor" if args.no_floor else f"floor {floor_s:g} s"
    print(f"{args.jobs} jobs x {args.nights} nights, budgets from {HISTORY_DAYS} days; {mode}; "
          f"{floor}; {args.stalls} stalls a night")  # fmt: skip
    submitted = [b.p95 for (_, s), b in budgets.by_key.items() if s == "submitted"]
    print(f"submitted p95: {min(submitted):.2f}-{max(submitted):.2f} s (normally instant)")
    print(
        f"{'night':>5} {'job':<7} {'state':<8} {'p95':>6} {'stuck at':>9} {'alert at':>9} "
        f"{'2xp95+tick':>10} {'within':>6}"
    )
    alerted = within = 0
    lags: list[float] = []
    for stall, seen in stalls:
        budget = budgets.budget(stall.label, stall.state)
        assert budget is not None
        start = stall.phases[-1].start
        mine = {level: t for state, level, t in seen if state == stall.state}
        alert_t = mine.get("alert")
        aim = 2 * budget.p95 + args.poll
        row = (
            f"{stall.night:>5} {stall.label:<7} {stall.state:<8} {_d(budget.p95):>6} {_d(start):>9}"
        )
        if alert_t is None:
            print(row + f" {'-':>9} {_d(aim):>10}  NOT ALERTED")
            continue
        alerted += 1
        took = alert_t - start
        lags.append(took - 2 * budget.p95)
        ok = took <= aim
        within += ok
        print(row + f" {_d(took):>9} {_d(aim):>10} {'yes' if ok else 'NO':>6}")
    print(f"stalls alerted: {alerted}/{len(stalls)}; within 2 x p95 + one poll tick: "
          f"{within}/{len(stalls)} (aim: all)")  # fmt: skip
    if lags:
        print(f"alert after 2 x p95: median {np.median(lags):.1f} s, max {max(lags):.1f} s "
              f"(a tick is {args.poll:g} s)")  # fmt: skip
    print(
        f"normal job-nights: {tally.normal}; false alerts {tally.false_alerts} = "
        f"{100 * tally.false_alerts / tally.normal:.2f} per 100 (aim: <= 1); "
        f"watches {tally.false_watches} = {100 * tally.false_watches / tally.normal:.1f} per 100"
    )
    print(f"levels announced twice: {tally.repeats} (aim: 0)")
    print(f"~{tally.observations} observations replayed in {elapsed:.2f} s")


def _d(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds:.1f}s" if seconds < 60 else format_duration(seconds)


if __name__ == "__main__":
    main()
