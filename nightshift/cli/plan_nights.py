"""``nightshift plan --nights D1..D2``: each past night's expected finish and cost, and the
total, before a backfill submits anything (``nightshift backfill`` prints the same)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nightshift.config.catalogue import Catalogue

__all__ = [
    "MAX_NIGHTS",
    "NightsPlan",
    "night_list",
    "night_range",
    "plan_nights",
    "print_nights",
]

MAX_NIGHTS = 366  # a range longer than a year is a typo


def night_range(first: str, last: str) -> list[str]:
    """Every night from ``first`` to ``last``, both included; ValueError naming what is wrong."""
    try:
        start = date.fromisoformat(first)
    except ValueError:
        raise ValueError(f"--from must be a date like 2026-11-29, not {first!r}") from None
    try:
        end = date.fromisoformat(last)
    except ValueError:
        raise ValueError(f"--to must be a date like 2026-11-29, not {last!r}") from None
    if start > end:
        raise ValueError(f"--from {first} is after --to {last}")
    days = (end - start).days + 1
    if days > MAX_NIGHTS:
        raise ValueError(f"{days} nights from {first} to {last}: at most {MAX_NIGHTS} at once")
    return [(start + timedelta(days=k)).isoformat() for k in range(days)]


def night_list(text: str) -> list[str]:
    """``D1,D2,...`` -> those nights, oldest first, once each; ValueError naming a bad one."""
    nights = set()
    for item in text.split(","):
        try:
            nights.add(date.fromisoformat(item.strip()).isoformat())
        except ValueError:
            raise ValueError(
                f"--nights wants dates like 2026-11-29, not {item.strip()!r}"
            ) from None
    if len(nights) > MAX_NIGHTS:
        raise ValueError(f"{len(nights)} nights: at most {MAX_NIGHTS} at once")
    return sorted(nights)


def parse_nights(text: str) -> list[str]:
    """``D1..D2`` -> its nights; ValueError naming what is wrong."""
    first, sep, last = text.partition("..")
    if not sep:
        raise ValueError(f"--nights wants D1..D2 (like 2026-12-01..2026-12-03), not {text!r}")
    return night_range(first.strip(), last.strip())


@dataclass(frozen=True)
class NightsPlan:
    """Each night's forecast as a row, the totals, and the per-night cap (None: none)."""

    rows: list[dict[str, Any]]
    total_usd: float | None  # None: some paid job's cost is unknown
    total_p95_usd: float | None
    cap_usd: float | None

    @property
    def over_cap(self) -> list[str]:
        """The nights whose expected cost (p95) passes the night's cap."""
        return [r["night"] for r in self.rows if r["over_cap"]]

    def as_json(self) -> dict[str, Any]:
        return {
            "nights": self.rows,
            "total_usd": self.total_usd,
            "total_p95_usd": self.total_p95_usd,
            "cap_usd": self.cap_usd,
            "over_cap": self.over_cap,
        }


def plan_nights(
    catalogue: Catalogue, path: Path, nights: list[str], only: list[str] | None = None
) -> NightsPlan:
    """Each of ``nights`` forecast as it would start at its slot (the ledger read once)."""
    from nightshift.cli.plan import night_plan, plan_inputs

    now = datetime.now(UTC)
    without = [] if not only else [j.label for j in catalogue.jobs if j.label not in only]
    inputs = plan_inputs(catalogue, without, now)
    rows: list[dict[str, Any]] = []
    for night in nights:
        forecast, _source, money = night_plan(catalogue, path, inputs, night, {}, now)
        cost = money.cost
        # no job with a basis (no history, no hint): no finish to forecast, said as such
        known = any(j.basis != "none" for j in forecast.jobs)
        p50 = round((forecast.finish_p50 - forecast.start).total_seconds()) if known else None
        p95 = round((forecast.finish_p95 - forecast.start).total_seconds()) if known else None
        rows.append(
            {
                "night": night,
                "start": forecast.start.astimezone(UTC).isoformat(timespec="seconds"),
                "finish_p50_s": p50,
                "finish_p95_s": p95,
                "usd": _usd(cost.total_p50),
                "p95_usd": _usd(cost.total_p95),
                "unknown": list(cost.unknown),
                "over_cap": bool(cost.refused),
            }
        )
    p50s = [r["usd"] for r in rows]
    p95s = [r["p95_usd"] for r in rows]
    known = None not in p50s
    total = _usd(sum(x for x in p50s if x is not None)) if known else None
    total_p95 = _usd(sum(x for x in p95s if x is not None)) if known else None
    cap = catalogue.defaults.spend
    return NightsPlan(rows, total, total_p95, None if cap is None else cap.usd)


def print_nights(found: NightsPlan, as_json: bool) -> None:
    """The nights' table (or ``--json``'s one object)."""
    if as_json:
        print(json.dumps(found.as_json()))
        return
    from rich.console import Console
    from rich.table import Table

    from nightshift.config.durations import format_duration

    table = Table(title=f"{len(found.rows)} nights, each from its slot")
    for column in ("night", "finish p50", "finish p95", "cost p50", "cost p95"):
        table.add_column(column)
    for r in found.rows:
        flag = " over cap" if r["over_cap"] else ""
        table.add_row(
            r["night"],
            "no history" if r["finish_p50_s"] is None else format_duration(r["finish_p50_s"]),
            "no history" if r["finish_p95_s"] is None else format_duration(r["finish_p95_s"]),
            _money(r["usd"]) + flag,
            _money(r["p95_usd"]),
        )
    console = Console()
    console.print(table)
    cap = f"; the night's cap ${found.cap_usd:,.2f}" if found.cap_usd is not None else ""
    line = f"total: {_money(found.total_usd)} (p95 {_money(found.total_p95_usd)}){cap}"
    console.print(line, markup=False, highlight=False)


def _usd(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _money(value: float | None) -> str:
    return "unknown" if value is None else f"${value:,.2f}"
