"""A night's forecast as ``nightshift plan`` and the night at its start make it (pure: no I/O).

Both simulate the same plan with the same learned spans, caps, stagger and rates
(``engine/forecast.py``); the night keeps what it forecast (``forecast_body``) so the morning can
hold it against what happened (``engine/forecast_check.py``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from nightshift.backoff import Backoff
from nightshift.config.names import first_few
from nightshift.engine.forecast import Forecast, Late, Span, durations_of, forecast
from nightshift.engine.handoffs import Gap, poll_lag
from nightshift.usual import Usual

if TYPE_CHECKING:
    from nightshift.budgets.lookup import Budgets
    from nightshift.config.catalogue import Catalogue
    from nightshift.engine.plan import Plan

__all__ = [
    "basis_words",
    "forecast_body",
    "forecast_night",
    "seen_after",
    "unknown_jobs",
    "unknown_line",
]


def forecast_night(
    catalogue: Catalogue,
    plan: Plan,
    budgets: Budgets,
    *,
    start: datetime,
    caps: Mapping[str, int] | None = None,
    kept: Collection[str] = (),
    gaps: Mapping[str, Gap] | None = None,
) -> Forecast:
    """The night of ``plan`` from ``start``: the catalogue's caps (``caps`` override them), its
    stagger and rates, each job's learned span; a job ``kept`` from an earlier run takes 0 s.
    ``gaps``: per backend, how long after a job ends the night acts on it, learned
    (``handoff_gaps``); a backend without one has its poll schedule's wait."""
    spans = durations_of(budgets, catalogue, plan.labels)
    for label in kept:
        if label in spans:
            spans[label] = Span(0.0, 0.0, spans[label].basis)
    seen = seen_after(catalogue, plan, spans, gaps or {})
    return forecast(
        plan,
        {x: catalogue.job(x).backend for x in plan.labels},
        spans,
        start=start,
        deadline_s=catalogue.defaults.deadline,
        caps={**catalogue.caps, **(caps or {})},
        stagger=catalogue.defaults.stagger,
        rates=catalogue.rates,
        seen=seen,
    )


def seen_after(
    catalogue: Catalogue, plan: Plan, spans: Mapping[str, Span], gaps: Mapping[str, Gap]
) -> dict[str, tuple[float, float]]:
    """How long after each job that something waits for (a chain's step, a capped backend's
    job) the night acts on its end, in the usual and the late night."""
    poll = catalogue.defaults.poll
    policy = Backoff(poll.initial, poll.factor, poll.max)
    waited = {a for chain in plan.chains for a in chain[:-1]}
    capped = set(catalogue.caps)
    out: dict[str, tuple[float, float]] = {}
    for label in plan.labels:
        backend = catalogue.job(label).backend
        if label not in waited and backend not in capped:
            continue  # nothing waits for it: its end is the night's only
        if (gap := gaps.get(backend)) is not None:
            out[label] = (gap.p50, gap.p95)
            continue
        span = spans[label]
        usual = Usual(span.p50, span.p50, span.p95) if span.p50 > 0 else None
        out[label] = (poll_lag(policy, span.p50, usual), poll_lag(policy, span.p95, usual))
    return out


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat(timespec="seconds")


def _late(late: list[Late]) -> list[dict[str, Any]]:
    return [{"label": x.label, "seconds": round(x.seconds, 1)} for x in late]


def forecast_body(f: Forecast, kept: Collection[str] = ()) -> dict[str, Any]:
    """What a night keeps of its forecast besides its finish and path: each job's start and
    end (p50, p95), slot wait and basis, the deadline, the late jobs, the jobs kept."""
    return {
        "deadline": _iso(f.deadline),
        "jobs": [
            {
                "label": j.label,
                "backend": j.backend,
                "start_p50": _iso(j.start_p50),
                "end_p50": _iso(j.end_p50),
                "start_p95": _iso(j.start_p95),
                "end_p95": _iso(j.end_p95),
                "wait_s": round(j.wait_s, 1),
                "basis": j.basis,
            }
            for j in f.jobs
        ],
        "late": _late(f.late),
        "late_p95": _late(f.late_p95),
        "kept": sorted(kept),
    }


def unknown_jobs(jobs: Iterable[Mapping[str, Any]], kept: Collection[str] = ()) -> list[str]:
    """The jobs a forecast knows nothing of (basis ``none``: counted as 0 s); a job kept from an
    earlier run takes 0 s for real and is not one. ``jobs``: ``forecast_body``'s."""
    return [j["label"] for j in jobs if j.get("basis") == "none" and j["label"] not in kept]


def unknown_line(unknown: list[str], total: int, named: int = 3) -> str:
    """``3 of 5 jobs have nothing learned yet (a, b, c): no finish time``."""
    shown = first_few(unknown, named)
    many = "job has" if total == 1 else "jobs have"
    return f"{len(unknown)} of {total} {many} nothing learned yet ({shown}): no finish time"


def basis_words(jobs: Iterable[Mapping[str, Any]], kept: Collection[str] = ()) -> str:
    """Where the forecast's figures come from, for a page that shows them (never when some job
    is unknown: ``unknown_jobs`` first)."""
    ran = [j for j in jobs if j["label"] not in kept]
    fallback = [j for j in ran if j.get("basis") == "fallback"]
    if not fallback:
        return "from the learned budgets"
    return (
        f"from the learned budgets ({len(fallback)} of {len(ran)} jobs from the budgets of "
        "their states, their own or their backend's: a fallback)"
    )
