"""Tonight before it runs: a discrete-event simulation of the plan (pure: no I/O, no Prefect).

The night is simulated as the engine runs it: independent jobs all ready at the start, a
``depends_on`` chain's steps one after another, admission in priority order (the plan's order:
longest expected first, chain steps after every independent job), at most ``caps[b]`` jobs of a
capped backend in flight (a slot held from admission to the job's end), and each backend's
submissions a gap apart (``1 / rate``, else ``stagger``). It runs twice: with every job's p50
(the expected night) and with every p95 (the late one). Jobs are assumed to succeed first time.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Literal

from nightshift.engine.admission import Pace
from nightshift.states import PATH

if TYPE_CHECKING:
    from nightshift.budgets.lookup import Budgets
    from nightshift.config.catalogue import Catalogue
    from nightshift.engine.plan import Plan

__all__ = [
    "Basis",
    "Forecast",
    "JobForecast",
    "Late",
    "Span",
    "durations_of",
    "forecast",
    "past",
]

# learned: the whole job's own budget; fallback: the sum of its states' budgets (its own, else
# its backend's); declared: its own `expect:`; none: nothing learned, counted as 0 s
Basis = Literal["learned", "fallback", "declared", "none"]


@dataclass(frozen=True)
class Span:
    """A job's usual whole-job duration in seconds, and where it comes from."""

    p50: float
    p95: float
    basis: Basis = "learned"


@dataclass(frozen=True)
class JobForecast:
    """One job's forecast: start and end (p50 and p95), its wait for a slot, its basis."""

    label: str
    backend: str
    start_p50: datetime
    end_p50: datetime
    start_p95: datetime
    end_p95: datetime
    wait_s: float  # waiting for a slot of a capped backend, in the expected (p50) night
    basis: Basis


@dataclass(frozen=True)
class Late:
    """A job that would end past the night's deadline (which ends most jobs ``timeout``)."""

    label: str
    seconds: float
    submitted: bool  # False: even its submit would come after the deadline


@dataclass(frozen=True)
class Forecast:
    """The night's forecast: its jobs in plan order, its finish, what decides it, what is late."""

    start: datetime
    jobs: list[JobForecast]
    finish_p50: datetime
    finish_p95: datetime
    critical_path: list[str]  # end-to-start links from the job that ends last (p50)
    deadline: datetime
    late: list[Late]  # by the expected (p50) ends
    late_p95: list[Late]  # by the late (p95) ends


@dataclass
class _Run:
    ready: float = 0.0
    granted: float = 0.0
    start: float = 0.0
    end: float = 0.0
    after: str | None = None  # the job whose end let it start (chain step or freed slot)


def durations_of(budgets: Budgets, catalogue: Catalogue, labels: list[str]) -> dict[str, Span]:
    """Each job's whole-job span: learned, else its declared ``expect:``, else the sum of its
    state budgets, else none (0 s)."""
    out: dict[str, Span] = {}
    for label in labels:
        backend = catalogue.job(label).backend
        whole = budgets.job(catalogue.key, label)
        if whole is not None:
            out[label] = Span(whole.p50, whole.p95, "learned")
            continue
        expect = catalogue.job(label).expect
        if expect is not None:  # said by the catalogue until its own nights teach it
            out[label] = Span(expect, expect, "declared")
            continue
        states = [
            b for s in PATH if (b := budgets.budget(catalogue.key, label, s, backend)) is not None
        ]
        if states:
            out[label] = Span(sum(b.p50 for b in states), sum(b.p95 for b in states), "fallback")
        else:
            out[label] = Span(0.0, 0.0, "none")
    return out


def forecast(
    plan: Plan,
    backends: Mapping[str, str],
    spans: Mapping[str, Span],
    *,
    start: datetime,
    deadline_s: float,
    caps: Mapping[str, int] | None = None,
    stagger: float = 0.0,
    rates: Mapping[str, float] | None = None,
    seen: Mapping[str, tuple[float, float]] | None = None,
) -> Forecast:
    """Simulate ``plan`` from ``start``: ``backends`` and ``spans`` by label, caps and pace;
    ``seen``: how long after each job ends (p50, p95) the night acts on it (its chain's next
    step submitted, its slot handed on; ``engine/handoffs.py``), none by default."""
    runs = {}
    for i, pick in enumerate(("p50", "p95")):
        seconds = {x: getattr(spans[x], pick) for x in plan.labels}
        lags = {x: lag[i] for x, lag in (seen or {}).items()}
        runs[pick] = _simulate(
            plan, backends, seconds, dict(caps or {}), stagger, dict(rates or {}), lags
        )
    p50, p95 = runs["p50"], runs["p95"]

    def at(seconds: float) -> datetime:
        return start + timedelta(seconds=seconds)

    jobs = [
        JobForecast(
            x,
            backends[x],
            at(p50[x].start),
            at(p50[x].end),
            at(p95[x].start),
            at(p95[x].end),
            p50[x].granted - p50[x].ready,
            spans[x].basis,
        )
        for x in plan.labels
    ]
    return Forecast(
        start=start,
        jobs=jobs,
        finish_p50=at(max((r.end for r in p50.values()), default=0.0)),
        finish_p95=at(max((r.end for r in p95.values()), default=0.0)),
        critical_path=_critical_path(plan.labels, p50),
        deadline=at(deadline_s),
        late=past(jobs, at(deadline_s)),
        late_p95=past(jobs, at(deadline_s), p95=True),
    )


def _simulate(
    plan: Plan,
    backends: Mapping[str, str],
    seconds: Mapping[str, float],
    caps: dict[str, int],
    stagger: float,
    rates: dict[str, float],
    lags: Mapping[str, float] | None = None,
) -> dict[str, _Run]:
    """One night of events: a job ready, a job's end seen (``lags`` after it ended: then its
    slot and its chain's next step go on); admission after each instant's events."""
    priority = {label: i for i, label in enumerate(plan.labels)}
    following = {a: b for chain in plan.chains for a, b in itertools.pairwise(chain)}
    runs = {label: _Run() for label in plan.labels}
    pace = Pace(stagger, rates)
    in_use: dict[str, int] = {}
    waiting: dict[str, list[tuple[int, str]]] = {}
    freed: dict[str, list[str]] = {}  # per backend: jobs ended this instant, slots to hand on
    # (time, kind, order, label): at one instant ends (0) come before readies (1)
    events: list[tuple[float, int, int, str]] = [(0.0, 1, priority[x], x) for x in plan.independent]
    events += [(0.0, 1, priority[chain[0]], chain[0]) for chain in plan.chains if chain]
    heapq.heapify(events)
    while events:
        now = events[0][0]
        freed.clear()
        while events and events[0][0] == now:
            _, kind, _, label = heapq.heappop(events)
            backend = backends[label]
            if kind == 0:
                if backend in caps:
                    in_use[backend] -= 1
                    freed.setdefault(backend, []).append(label)
                if (step := following.get(label)) is not None:
                    runs[step].ready, runs[step].after = now, label
                    heapq.heappush(events, (now, 1, priority[step], step))
            else:
                heapq.heappush(waiting.setdefault(backend, []), (priority[label], label))
        for backend, queue in waiting.items():
            while queue and in_use.get(backend, 0) < caps.get(backend, len(queue) + 1):
                _, label = heapq.heappop(queue)
                run = runs[label]
                run.granted = now
                if now > run.ready and freed.get(backend):
                    run.after = freed[backend].pop(0)  # it waited for this job's slot
                if backend in caps:
                    in_use[backend] = in_use.get(backend, 0) + 1
                run.start = pace.reserve(backend, now)
                run.end = run.start + seconds[label]
                seen_at = run.end + (lags or {}).get(label, 0.0)
                heapq.heappush(events, (seen_at, 0, priority[label], label))
    return runs


def _critical_path(labels: list[str], runs: Mapping[str, _Run]) -> list[str]:
    """From the job that ends last back along what each waited for, in running order."""
    if not labels:
        return []
    last = max(labels, key=lambda x: (runs[x].end, -labels.index(x)))
    path: list[str] = []
    node: str | None = last
    while node is not None and node not in path:
        path.append(node)
        node = runs[node].after
    return path[::-1]


def past(jobs: list[JobForecast], at: datetime, *, p95: bool = False) -> list[Late]:
    """Jobs whose expected (or ``p95``) end is after ``at`` (the deadline, ``finish_by``),
    latest first, with how late; ``submitted`` False when even their start is after it."""
    late = []
    for job in jobs:
        end, start = (job.end_p95, job.start_p95) if p95 else (job.end_p50, job.start_p50)
        if (seconds := (end - at).total_seconds()) > 0:
            late.append(Late(job.label, seconds, start <= at))
    return sorted(late, key=lambda x: -x.seconds)
