"""Replay synthetic nights through the pure detector: stalls named how soon, false alerts how often.

Each job's dwell in ``queued`` and in ``running`` is log-normal (its own median and spread per
state). 30 days of history give each (job, state) its p50/p95 (numpy, as the budgets will). Then
test nights replay every job through ``Detector``: the watcher sees the true state and when it
began (backend-reported times) on a fixed poll (default: the 30 s poll cap), or also wakes at the
detector's next level moment (``--wake``). Some job-nights get a stall: the state never ends
before the 24 h SLA. Prints, per stall, when it was named, and false alerts per 100 normal
job-nights. The distribution's parameters are fixed up front; nothing here is tuned to the aims.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np

from nightshift.budgets.lookup import Budget
from nightshift.config.durations import format_duration
from nightshift.engine.detection import BudgetTable, Detector

STATES = ("queued", "running")
MEDIAN_RANGE_S = {"queued": (2 * 60, 30 * 60), "running": (5 * 60, 90 * 60)}  # log-uniform
SIGMA_RANGE = (0.3, 0.8)  # log-normal spread per (job, state): p95/p50 from 1.6x to 3.7x
HISTORY_DAYS = 30
SLA_S = 24 * 3600.0
T0 = datetime(2026, 11, 29, 1, 0, tzinfo=UTC)


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


def job_shapes(rng: np.random.Generator, jobs: int) -> dict[tuple[str, str], tuple[float, float]]:
    """(label, state) -> (mu, sigma) of the log of its dwell in seconds."""
    shapes = {}
    for i in range(jobs):
        for state in STATES:
            lo, hi = MEDIAN_RANGE_S[state]
            median = float(np.exp(rng.uniform(np.log(lo), np.log(hi))))
            shapes[(f"job-{i:02d}", state)] = (np.log(median), float(rng.uniform(*SIGMA_RANGE)))
    return shapes


def learn(rng: np.random.Generator, shapes: dict) -> BudgetTable:
    """p50/p95 per (job, state) from HISTORY_DAYS nights of normal dwell."""
    table = {}
    for key, (mu, sigma) in shapes.items():
        history = rng.lognormal(mu, sigma, HISTORY_DAYS)
        p50, p95 = np.percentile(history, [50, 95])
        table[key] = Budget(p50=float(p50), p95=float(p95))
    return BudgetTable(table)


def night_phases(rng: np.random.Generator, shapes: dict, label: str) -> tuple[Phase, ...]:
    """One normal job-night: queued, then running, each for a fresh log-normal dwell."""
    phases, t = [], 0.0
    for state in STATES:
        mu, sigma = shapes[(label, state)]
        dwell = float(rng.lognormal(mu, sigma))
        phases.append(Phase(state, t, t + dwell))
        t += dwell
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=40)
    parser.add_argument("--nights", type=int, default=30)
    parser.add_argument("--stalls", type=int, default=24, help="half queued, half running")
    parser.add_argument("--poll", type=float, default=30.0, help="seconds between checks")
    parser.add_argument("--wake", action="store_true", help="also wake at the next level moment")
    args = parser.parse_args()

    started = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    shapes = job_shapes(rng, args.jobs)
    budgets = learn(rng, shapes)
    labels = [f"job-{i:02d}" for i in range(args.jobs)]
    picks = rng.choice(args.nights * args.jobs, size=args.stalls, replace=False)
    stall_at = {
        (int(k) // args.jobs, labels[int(k) % args.jobs]): STATES[i % 2]
        for i, k in enumerate(picks)
    }

    stalls: list[tuple[Stall, list[tuple[str, str, float]]]] = []
    false_watch = false_alert = normal = calls = 0
    for night in range(args.nights):
        detector = Detector(f"night-{night:02d}", "bench", budgets)
        for label in labels:
            phases = night_phases(rng, shapes, label)
            state = stall_at.get((night, label))
            if state is not None:
                phases = stalled(phases, state)
            seen = replay(detector, label, phases, args.poll, args.wake)
            calls += int(phases[-1].end // args.poll) + 1
            if state is None:
                normal += 1
                false_watch += sum(level == "watch" for _, level, _ in seen)
                false_alert += sum(level == "alert" for _, level, _ in seen)
            else:
                stalls.append((Stall(night, label, state, phases), seen))
    elapsed = time.perf_counter() - started

    mode = f"poll every {args.poll:g} s" + (" + wake at the next level moment" if args.wake else "")
    print(f"{args.jobs} jobs x {args.nights} nights, budgets from {HISTORY_DAYS} days; {mode}")
    print("times are after the job's submit; 'past ...': how long after it the alert fired")
    print(
        f"{'night':>5} {'job':<7} {'state':<8} {'p95':>6} {'stuck at':>9} {'watch at':>9} "
        f"{'alert at':>9} {'past 2xp95':>10} {'past p95':>8} {'x vs SLA':>9}"
    )
    alerted, ratios, lags = 0, [], []
    for stall, seen in stalls:
        budget = budgets.budget(stall.label, stall.state)
        assert budget is not None
        start = stall.phases[-1].start
        mine = {level: t for state, level, t in seen if state == stall.state}
        watch_t, alert_t = mine.get("watch"), mine.get("alert")
        row = (
            f"{stall.night:>5} {stall.label:<7} {stall.state:<8} {_d(budget.p95):>6} "
            f"{_d(start):>9} {_d(watch_t):>9} {_d(alert_t):>9}"
        )
        if alert_t is None:
            print(row + "  NOT ALERTED before the SLA")
            continue
        alerted += 1
        lag = alert_t - (start + budget.alert_at)
        lags.append(lag)
        ratios.append(SLA_S / alert_t)
        print(row + f" {lag:>9.1f}s {_d(alert_t - start - budget.p95):>8} {SLA_S / alert_t:>8.1f}x")
    print(f"stalls alerted: {alerted}/{len(stalls)} (aim: all)")
    if ratios:
        print(
            f"alert after passing 2 x p95: median {np.median(lags):.1f} s, max {max(lags):.1f} s; "
            f"earlier than the 24 h SLA: min {min(ratios):.1f}x, median {np.median(ratios):.1f}x "
            f"(aim: 20x; {sum(r >= 20 for r in ratios)}/{len(ratios)} reach it)"
        )
    print(
        f"normal job-nights: {normal}; false alerts {false_alert} = "
        f"{100 * false_alert / normal:.2f} per 100 (aim: <= 1); "
        f"watches {false_watch} = {100 * false_watch / normal:.1f} per 100"
    )
    print(f"~{calls} observations replayed in {elapsed:.2f} s")


def _d(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return "0s" if seconds < 1 else format_duration(seconds)


if __name__ == "__main__":
    main()
