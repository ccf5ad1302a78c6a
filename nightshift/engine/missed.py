"""Missed nights: which nights of a schedule are due, and what a run does about them. Pure.

A night is the UTC date of its slot (``plan.tonight``). A run of the nightly deployment for its
own night finds the schedule's nights due since a lower bound (the deployment's creation, or a
month back), the nights the ledger already has (run, or named missed) and decides by the
catalogue's ``defaults.missed``: the nights to run first (catch-up, one at a time), whether its
own night runs, and the nights to name as missed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from nightshift.config.missed import Missed
from nightshift.engine.plan import tonight

__all__ = [
    "LATE_AFTER",
    "LOOKBACK",
    "MissedDecision",
    "backfill_command",
    "crons_nights",
    "decide",
    "due_nights",
    "late_line",
    "missed_message",
    "schedule_nights",
]

LOOKBACK = timedelta(days=31)  # the furthest back a run looks for missed nights
LATE_AFTER = timedelta(minutes=15)  # a night started later than this after its slot ran late
_MAX_FIRES = 10_000  # a cron firing every minute for a week, at most


@dataclass(frozen=True)
class MissedDecision:
    """What one run does: ``first`` run before its own night (in order), ``runs_own`` whether
    its own night runs, ``after`` run after it (in order), ``named`` the nights named missed
    (ascending), and why."""

    own: str
    latest: str
    first: list[str] = field(default_factory=list)
    runs_own: bool = True
    named: list[str] = field(default_factory=list)
    why: str = ""
    after: list[str] = field(default_factory=list)
    slots: dict[str, datetime] = field(default_factory=dict)  # each due night's slot

    @property
    def quiet(self) -> bool:
        """Nothing to say: the run is of the latest night and no earlier night was missed."""
        return self.runs_own and not self.first and not self.after and not self.named

    @property
    def nights(self) -> list[str]:
        """Every night this run runs, in order."""
        return [*self.first, *([self.own] if self.runs_own else []), *self.after]


def schedule_nights(
    cron: str, timezone: str | None, since: datetime, until: datetime
) -> dict[str, datetime]:
    """Each night with a slot in ``(since, until]`` -> its first slot (UTC). ``ValueError`` for a
    cron or a time zone that is none."""
    from cronsim import CronSim, CronSimError

    try:
        zone = ZoneInfo(timezone or "UTC")
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown time zone {timezone!r}") from exc
    try:
        fires = CronSim(cron, since.astimezone(zone))
    except CronSimError as exc:
        raise ValueError(f"bad cron {cron!r}: {exc}") from exc
    nights: dict[str, datetime] = {}
    for _ in range(_MAX_FIRES):
        try:
            at = next(fires).astimezone(UTC)
        except StopIteration:
            break
        if at > until:
            break
        nights.setdefault(tonight(at), at)
    return nights


def crons_nights(
    crons: list[tuple[str, str | None]], since: datetime, until: datetime
) -> tuple[dict[str, datetime], list[str]]:
    """``schedule_nights`` of every (cron, time zone), merged (a night's first slot), and what
    was wrong with those that could not be read."""
    nights: dict[str, datetime] = {}
    problems = []
    for cron, zone in crons:
        try:
            found = schedule_nights(cron, zone, since, until)
        except ValueError as exc:
            problems.append(str(exc))
            continue
        for night, slot in found.items():
            if night not in nights or slot < nights[night]:
                nights[night] = slot
    return nights, problems


def due_nights(
    cron: dict[str, datetime], runs: dict[str, datetime], first: str | None
) -> dict[str, datetime]:
    """The nights due: the cron's from after the catalogue's ``first`` night in the ledger (a
    new catalogue, a new ledger, a renamed catalogue: nothing before it was missed), and those
    of the schedule's runs at their slots, whenever they were."""
    return {n: at for n, at in cron.items() if first is not None and n > first} | runs


def decide(
    own: str, due: list[str], ran: set[str], named_before: set[str], policy: Missed
) -> MissedDecision:
    """What the run of night ``own`` does, given the schedule's nights ``due`` by now (any
    order), the nights that ``ran`` (the ledger has their jobs) and those ``named_before``
    (named missed by an earlier run). A night that ran is not run again by its schedule (a
    retry or a run by hand is not decided here)."""
    latest = max([*due, own])
    done = ran | named_before
    if own in ran:
        why = f"night {own} already ran"
        return MissedDecision(own, latest, [], False, [], why)
    before = sorted(n for n in set(due) if n < own and n not in done)
    if policy.run != "all":
        why = f"defaults.missed.run is {policy.run}: only the latest night due ({latest}) runs"
        if own < latest:  # a stale run: it names every night missed before the latest
            named = sorted({n for n in due if n < latest and n not in done} | ({own} - done))
            return MissedDecision(own, latest, [], False, named, why)
        return MissedDecision(own, latest, [], True, before, why)
    # all: the newest max_nights nights before the latest run, named before (by the watchdog
    # while no worker ran, say) or not; older ones are named
    window = sorted(n for n in set(due) if n < latest)[-policy.max_nights :]
    unrun = sorted(n for n in set(due) if n < own and n not in ran)
    keep = [n for n in unrun if n in window]
    named = [n for n in unrun if n not in window and n not in named_before]
    why = (
        f"defaults.missed.run is all: the {policy.max_nights} nights before the latest due "
        f"({latest}) run, {policy.order} first"
    )
    runs_own = own == latest or own in window
    if not runs_own and own not in done:
        named = sorted({*named, own})
    if policy.order == "newest":  # its own night first, then back in time
        return MissedDecision(own, latest, [], runs_own, named, why, after=keep[::-1])
    return MissedDecision(own, latest, keep, runs_own, named, why)


def missed_message(
    decision: MissedDecision, named: list[str], slots: dict[str, datetime], catalogue: str
) -> tuple[str, list[str]]:
    """The one alert naming ``named`` (the nights newly named): its headline and lines."""
    count = f"{len(named)} night{'s' * (len(named) != 1)} missed"
    headline = f"{count}: {', '.join(named)}"
    when = sorted({slots[n].strftime("%H:%M UTC") for n in named if n in slots})
    lines = [
        f"Their slot{'s' * (len(named) != 1)} ({', '.join(when) or 'the schedule'}) passed "
        "while nothing ran them (a worker or server down, the deployment paused)."
    ]
    ran = decision.nights
    if ran:
        lines.append(f"Running: {', '.join(ran)}. {decision.why}.")
    else:
        lines.append(f"{decision.why}.")
    lines.append(f"To run them: {backfill_command(catalogue, named)}")
    return headline, lines


def backfill_command(catalogue: str | None, nights: list[str]) -> str:
    """The command that runs exactly ``nights``: a range when they are consecutive days, else
    their list (a weekday schedule's gap is no night to run)."""
    where = f" --catalogue {catalogue}" if catalogue else ""
    days = sorted(nights)
    first, last = date.fromisoformat(days[0]), date.fromisoformat(days[-1])
    if (last - first).days + 1 == len(set(days)):
        return f"nightshift backfill{where} --from {days[0]} --to {days[-1]}"
    return f"nightshift backfill{where} --nights {','.join(days)}"


def late_line(
    slot: datetime | None, started_at: datetime, missed: list[tuple[str, str]]
) -> str | None:
    """What the morning must know of when a night ran: late against its ``slot``, and the
    nights ``missed`` before it, each with what became of it; None: on time, none missed."""
    from nightshift.config.durations import format_duration

    parts = []
    if slot is not None and started_at - slot > LATE_AFTER:
        late = format_duration((started_at - slot).total_seconds())
        parts.append(
            f"ran late: scheduled {slot.astimezone(UTC):%Y-%m-%d %H:%M} UTC, started "
            f"{started_at.astimezone(UTC):%Y-%m-%d %H:%M} UTC ({late} late)"
        )
    if missed:
        said = ", ".join(f"{night} ({became})" for night, became in missed)
        parts.append(f"missed before it: {said}")
    return "; ".join(parts) or None
