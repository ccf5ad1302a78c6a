"""``nightshift plan``'s money and finish-by parts: tonight's cost, the cap, ``finish_by``."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import TYPE_CHECKING, Any

from nightshift.config.durations import format_duration
from nightshift.engine.finish_by import finish_by_at
from nightshift.engine.forecast import past
from nightshift.engine.spend import NightCost, expected_costs, money, night_cost

if TYPE_CHECKING:
    from nightshift.config.catalogue import Catalogue
    from nightshift.engine.forecast import Forecast, Late

__all__ = ["PlanMoney", "cost_cell", "money_json", "money_lines", "plan_money"]


@dataclass(frozen=True)
class PlanMoney:
    """What tonight costs, and when it should be done by."""

    cost: NightCost
    finish_by: datetime | None  # None: the catalogue sets no finish_by
    zone: str
    late: list[Late]  # jobs whose expected end is after finish_by
    late_p95: list[Late]


def plan_money(
    catalogue: Catalogue, f: Forecast, learned: Mapping[str, Sequence[float]], zone: tzinfo
) -> PlanMoney:
    """Costs from what the ledger ``learned`` (each label's cost per night), the cap played over
    the expected night, and ``finish_by`` in the schedule's ``zone``."""
    labels = [j.label for j in f.jobs]
    expected = expected_costs(catalogue, learned, labels)
    caps = {x: job.spend.usd for x in labels if (job := catalogue.job(x)).spend is not None}
    cap = catalogue.defaults.spend
    runs = [
        (j.label, (j.start_p50 - f.start).total_seconds(), (j.end_p50 - f.start).total_seconds())
        for j in f.jobs
    ]
    cost = night_cost(expected, None if cap is None else cap.usd, caps, runs)
    by = catalogue.defaults.finish_by
    at = None if by is None else finish_by_at(f.start, by, zone)
    late = [] if at is None else past(f.jobs, at)
    late_p95 = [] if at is None else past(f.jobs, at, p95=True)
    return PlanMoney(cost, at, str(zone), late, late_p95)


def _usd(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def money_json(m: PlanMoney) -> dict[str, Any]:
    """The cost and finish_by parts of ``plan --json``."""
    c = m.cost
    return {
        "cost": {
            "total_usd": _usd(c.total_p50),
            "total_p95_usd": _usd(c.total_p95),
            "unknown": list(c.unknown),
            "cap_usd": c.cap_usd,
            "over_cap": bool(c.refused),
            "refused": [{"label": x, "why": why} for x, why in c.refused],
            "jobs": [
                {"label": x, "usd": None}
                if j is None
                else {"label": x, "usd": _usd(j.p50), "p95_usd": _usd(j.p95), "basis": j.basis}
                for x, j in c.jobs.items()
            ],
        },
        "finish_by": None if m.finish_by is None else m.finish_by.astimezone(UTC).isoformat(),
    }


def cost_cell(m: PlanMoney, label: str) -> str:
    """A job's cost in the table: ``$4.10``, ``$4*`` (declared), ``?`` (paid, unknown),
    ``-`` (free)."""
    if label not in m.cost.jobs:
        return "-"
    cost = m.cost.jobs[label]
    if cost is None:
        return "?"
    return money(cost.p50) + ("*" if cost.basis == "declared" else "")


def money_lines(m: PlanMoney, clock: Callable[[datetime], str], unknown: bool = False) -> list[str]:
    """The lines under the table: finish_by and who passes it, the cost, the cap. ``unknown``:
    some job's time is unknown, so nothing is said of who ends before finish_by."""
    out: list[str] = []
    if m.finish_by is not None and unknown:
        local = m.finish_by.strftime("%H:%M")
        out.append(f"finish by {local} {m.zone}: not known while some job's time is unknown")
    elif m.finish_by is not None:
        local = m.finish_by.strftime("%H:%M")
        where = f"finish by {local} {m.zone}"
        if m.finish_by.utcoffset():
            where += f" ({clock(m.finish_by)} UTC)"
        only_p95 = [x for x in m.late_p95 if x.label not in {y.label for y in m.late}]
        for x in m.late:
            out.append(f"past {where}: {x.label} ends {format_duration(x.seconds)} late")
        for x in only_p95:
            out.append(
                f"past {where} in the late case (p95): {x.label} ends "
                f"{format_duration(x.seconds)} late"
            )
        if not m.late and not m.late_p95:
            out.append(f"{where}: every job ends before it, also in the late case")
    c = m.cost
    if not c.jobs:
        out.append("cost: no paid jobs")
        return out
    if c.total_p50 is not None and c.total_p95 is not None:
        text = f"cost: {money(c.total_p50)} expected (p95 {money(c.total_p95)})"
    else:
        known = sum(j.p50 for j in c.jobs.values() if j is not None)
        text = f"cost: unknown in total ({money(known)} for the jobs whose cost is known)"
    if c.unknown:
        text += f"; unknown (nothing learned, no `cost:` declared): {', '.join(c.unknown)}"
    out.append(text)
    if any(j is not None and j.basis == "declared" for j in c.jobs.values()):
        out.append("cost*: declared in the catalogue (`cost:`), nothing learned yet")
    if c.cap_usd is not None:
        if c.refused:
            for label, why in c.refused:
                out.append(
                    f"tonight's forecast passes the spend cap: {label} would not be "
                    f"submitted ({why})"
                )
        else:
            out.append(f"spend cap {money(c.cap_usd)}: the forecast stays under it")
    return out
