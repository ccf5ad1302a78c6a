"""``nightshift plan``: tonight forecast from what the ledger learned; submits nothing."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

from nightshift.cli import exits
from nightshift.cli.args import add_command, catalogue_flag

if TYPE_CHECKING:
    from nightshift.budgets.lookup import Budgets
    from nightshift.cli.plan_money import PlanMoney
    from nightshift.config.catalogue import Catalogue
    from nightshift.engine.forecast import Forecast, Late
    from nightshift.engine.handoffs import Gap
    from nightshift.engine.plan import Plan

__all__ = ["PLAN_EXIT_CODES", "register", "scheduled_start"]

PLAN_EXIT_CODES = exits.epilog(0, 4, 6, 64, c0="the forecast was printed")


def register(sub: Any) -> None:
    """Add ``plan`` to the subcommands."""
    plan = add_command(
        sub,
        "plan",
        "forecast tonight from the learned budgets (submits nothing, no Prefect server)",
        _command,
        PLAN_EXIT_CODES,
    )
    catalogue_flag(plan)
    plan.add_argument("--night", metavar="YYYY-MM-DD", help="the night (default: tonight)")
    plan.add_argument(
        "--limits", action="append", default=[], metavar="BACKEND=N", help="what if: another cap"
    )
    plan.add_argument(
        "--without", action="append", default=[], metavar="LABEL", help="what if: no such job"
    )
    plan.add_argument("--json", action="store_true", help="print one object")
    plan.add_argument(
        "--accuracy",
        action="store_true",
        help="the forecast measured: each night's forecast finish against its actual finish",
    )
    plan.add_argument(
        "--nights",
        default=None,
        metavar="D1..D2|N",
        help="past nights to backfill, each night's finish and cost and the total; "
        "with --accuracy, how many nights to measure (default 30)",
    )


def _command(args: argparse.Namespace) -> int:
    from nightshift.config.loader import load_catalogue
    from nightshift.engine.plan import check_only, parse_night

    try:
        caps = _limits(args.limits)
        night = parse_night(args.night) if args.night else None
    except ValueError as exc:
        exits.say(f"nightshift plan: {exc}")
        return exits.USAGE
    if args.nights is not None and ".." in args.nights:
        return _nights(args)
    if args.nights is not None:
        try:
            args.nights = _positive(args.nights)
        except argparse.ArgumentTypeError as exc:
            exits.say(f"nightshift plan: --nights: {exc} (or D1..D2: a backfill's nights)")
            return exits.USAGE
    if args.accuracy or args.nights is not None:
        return _accuracy(args)

    def show() -> int:
        catalogue = load_catalogue(args.catalogue)
        try:
            check_only(catalogue, args.without)
        except ValueError as exc:
            exits.say(f"{args.catalogue}: --without: {exc}")
            return exits.BAD_CATALOGUE
        return _show(catalogue, Path(args.catalogue), night, caps, args.without, args.json)

    return exits.guarded(show)


def _nights(args: argparse.Namespace) -> int:
    """``--nights D1..D2``: the backfill's nights, forecast one by one, and the total."""
    from nightshift.cli.plan_nights import parse_nights, plan_nights, print_nights
    from nightshift.config.loader import load_catalogue

    if args.accuracy or args.limits or args.without or args.night:
        exits.say(
            "nightshift plan: --nights D1..D2 takes no --accuracy, --night, --limits or --without"
        )
        return exits.USAGE
    try:
        nights = parse_nights(args.nights)
    except ValueError as exc:
        exits.say(f"nightshift plan: {exc}")
        return exits.USAGE

    def show() -> int:
        catalogue = load_catalogue(args.catalogue)
        print_nights(plan_nights(catalogue, Path(args.catalogue), nights), args.json)
        return exits.OK

    return exits.guarded(show)


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"a number of nights, at least 1: {text}")
    return int(text)


def _accuracy(args: argparse.Namespace) -> int:
    """``--accuracy [--nights N]``: what-ifs and a night make no sense with it."""
    from nightshift.cli.plan_accuracy import DEFAULT_NIGHTS, show_accuracy
    from nightshift.config.loader import load_catalogue

    if not args.accuracy or args.limits or args.without or args.night:
        exits.say(
            "nightshift plan: --nights goes with --accuracy, which takes no --night, "
            "--limits or --without"
        )
        return exits.USAGE
    nights = args.nights or DEFAULT_NIGHTS
    return exits.guarded(lambda: show_accuracy(load_catalogue(args.catalogue), nights, args.json))


def _limits(given: list[str]) -> dict[str, int]:
    """``cli=2`` -> {"cli": 2}; ValueError naming what is wrong."""
    from nightshift.config.catalogue import Catalogue

    known = get_args(get_args(Catalogue.model_fields["limits"].annotation)[0])
    out: dict[str, int] = {}
    for item in given:
        backend, _, n = item.partition("=")
        if backend not in known or not n.isdigit() or int(n) < 1:
            raise ValueError(f"--limits wants BACKEND=N (N >= 1, BACKEND one of {known}): {item}")
        out[backend] = int(n)
    return out


def _show(
    catalogue: Catalogue,
    path: Path,
    night: str | None,
    caps: dict[str, int],
    without: list[str],
    as_json: bool,
) -> int:
    now = datetime.now(UTC)
    inputs = plan_inputs(catalogue, without, now)
    result, source, money = night_plan(catalogue, path, inputs, night, caps, now)
    extra = sorted(inputs.removed - set(without))
    if as_json:
        print(json.dumps(_as_json(result, source, sorted(set(without)), extra, money)))
    else:
        _print(result, source, sorted(set(without)), extra, money)
    return exits.OK


@dataclass(frozen=True)
class PlanInputs:
    """What every night's forecast is made from, read once: the plan, the budgets, each job's
    learned costs, and the jobs left out (``--without`` and their dependents)."""

    plan: Plan
    budgets: Budgets
    learned: dict[str, list[float]]
    removed: set[str]
    # per backend, how long after a job ends the night acts on it (its chains' last nights)
    gaps: dict[str, Gap] = field(default_factory=dict)


def plan_inputs(catalogue: Catalogue, without: list[str], now: datetime) -> PlanInputs:
    """Read the ledger as a night would at its start (the database's errors propagate)."""
    from nightshift.budgets.current import current_budgets
    from nightshift.config.settings import load_settings
    from nightshift.engine.handoffs import handoff_gaps
    from nightshift.engine.plan import HISTORY_DAYS, expected_durations, plan_night
    from nightshift.store.ledger import Ledger

    removed = _with_dependents(catalogue, without)
    keep = [j.label for j in catalogue.jobs if j.label not in removed]
    ledger = Ledger(load_settings().ledger_url(), catalogue.key)
    try:
        # the plan the night would make: long jobs first, by their recent durations
        plan = plan_night(catalogue, keep or None, expected_durations(catalogue, ledger, now))
        # the budgets the night would watch with (a missing or stale snapshot is built first)
        budgets = current_budgets(ledger, now, catalogue.defaults.min_samples)
        # what each job cost on its recent nights, where its results said
        learned = ledger.job_costs(keep, now - timedelta(days=HISTORY_DAYS))
        backend_of = {x: catalogue.job(x).backend for x in plan.labels}
        gaps = handoff_gaps(plan.chains, backend_of, ledger.state_times, now)
    finally:
        ledger.close()
    if not keep:
        plan = type(plan)([], [])
    return PlanInputs(plan, budgets, learned, removed, gaps)


def night_plan(
    catalogue: Catalogue,
    path: Path,
    inputs: PlanInputs,
    night: str | None,
    caps: dict[str, int],
    now: datetime,
) -> tuple[Forecast, str, PlanMoney]:
    """One night's forecast (from its slot in the schedule), where its start comes from, and
    what it costs, as the night forecasts itself at its start (engine/night_forecast.py)."""
    from nightshift.cli.plan_money import plan_money
    from nightshift.engine.night_forecast import forecast_night

    start, source, zone = _night_start(path, night, now)
    result = forecast_night(
        catalogue, inputs.plan, inputs.budgets, start=start, caps=caps, gaps=inputs.gaps
    )
    return result, source, plan_money(catalogue, result, inputs.learned, zone)


def _with_dependents(catalogue: Catalogue, without: list[str]) -> set[str]:
    """The jobs removed: those named and, transitively, every job depending on one of them."""
    removed = set(without)
    grew = True
    while grew:
        more = {j.label for j in catalogue.jobs if removed & set(j.depends_on)} - removed
        removed |= more
        grew = bool(more)
    return removed


def scheduled_start(path: Path, night: str | None, now: datetime) -> tuple[datetime, str]:
    """When the night starts: its cron fire in a prefect.yaml beside the catalogue, else now."""
    start, source, _ = _night_start(path, night, now)
    return start, source


def _night_start(path: Path, night: str | None, now: datetime) -> tuple[datetime, str, tzinfo]:
    """``scheduled_start`` and the schedule's timezone (UTC without one)."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    from cronsim import CronSim, CronSimError

    from nightshift.config.timers import nightly_schedules

    found = nightly_schedules(path)
    name, schedules = found if found is not None else ("", [])
    for schedule in schedules:
        if not isinstance(schedule.get("cron"), str):
            continue
        try:
            zone = ZoneInfo(str(schedule.get("timezone") or "UTC"))
            # the night is the UTC date of its start: the first fire on that date
            after = now
            if night is not None:
                after = datetime.combine(date.fromisoformat(night), datetime.min.time(), UTC)
            after -= timedelta(seconds=1)
            fire = next(CronSim(schedule["cron"], after.astimezone(zone))).astimezone(UTC)
        except (CronSimError, ZoneInfoNotFoundError, StopIteration, ValueError, TypeError):
            continue
        return fire, f"the schedule of {name!r} in prefect.yaml", zone
    return now, "now (no schedule for this catalogue in a prefect.yaml beside it)", UTC


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat(timespec="seconds")


def _late_json(late: list[Late], past: str | None = None) -> list[dict[str, Any]]:
    """Late jobs as ``--json`` says them; ``past``: what they end after, when it is said."""
    tag = {} if past is None else {"past": past}
    return [
        {"label": x.label, "seconds": round(x.seconds, 1), "submitted": x.submitted, **tag}
        for x in late
    ]


def _as_json(
    f: Forecast, source: str, without: list[str], dependents: list[str], money: PlanMoney
) -> dict[str, Any]:
    from nightshift.cli.plan_money import money_json

    jobs = [
        {
            "label": j.label,
            "backend": j.backend,
            "start_p50": _iso(j.start_p50),
            "end_p50": _iso(j.end_p50),
            "end_p95": _iso(j.end_p95),
            "wait_s": round(j.wait_s, 1),
            "basis": j.basis,
        }
        for j in f.jobs
    ]
    late = _late_json(f.late, "deadline") + _late_json(money.late, "finish_by")
    unknown = [j.label for j in f.jobs if j.basis == "none"]
    return {
        "start": _iso(f.start),
        "start_from": source,
        "deadline": _iso(f.deadline),
        # no finish and no path that rest on jobs counted as 0 s: `unknown` names them
        "finish": None if unknown else {"p50": _iso(f.finish_p50), "p95": _iso(f.finish_p95)},
        "critical_path": [] if unknown else f.critical_path,
        "unknown": unknown,
        "late": late,  # past the deadline, then past finish_by
        "late_p95": _late_json(f.late_p95),
        "without": without,
        "removed_dependents": dependents,
        "jobs": jobs,
        **money_json(money),
    }


def _clock(at: datetime, start: datetime, form: str = "%H:%M:%S") -> str:
    """``02:41:05`` (UTC), with ``+1d`` when it falls on a later day than the start."""
    days = (at.astimezone(UTC).date() - start.astimezone(UTC).date()).days
    return f"{at.astimezone(UTC):{form}}" + (f" +{days}d" if days else "")


def _print(
    f: Forecast, source: str, without: list[str], dependents: list[str], money: PlanMoney
) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from nightshift.cli.plan_money import cost_cell, money_lines
    from nightshift.config.durations import format_duration
    from nightshift.engine.night_forecast import unknown_line

    console = Console()

    def line(text: str) -> None:
        console.print(text, markup=False, highlight=False, soft_wrap=True)

    line(f"night starts {_iso(f.start)} ({source}); deadline {_clock(f.deadline, f.start)} UTC")
    if without:
        line(f"without {', '.join(without)}")
    if dependents:
        line(f"also removed, as they depend on a removed job: {', '.join(dependents)}")
    # no vertical rules: at 80 columns a label and its times are never cut, the rest may wrap
    table = Table(
        title="tonight, forecast (UTC; end: the expected p50, p95: the late case)",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    paid = bool(money.cost.jobs)  # a cost column only where some job costs money
    whole = ("start", "end", "p95", "wait", "cost")  # the rest fold when they must
    columns = ("label", "backend", "start", "end", "p95", "wait", "basis")
    # a label keeps its width (up to 28) before any other column gives up its room
    least = {
        "label": min(28, max((len(j.label) for j in f.jobs), default=5)),
    }
    for column in (*columns, "cost") if paid else columns:
        table.add_column(
            column, no_wrap=column in whole, overflow="fold", min_width=least.get(column)
        )
    unknown = [j.label for j in f.jobs if j.basis == "none"]
    for j in f.jobs:
        # an end resting on a job counted as 0 s is no end: every one, when some job is unknown
        ends = (
            ["?", "?"]
            if unknown
            else [_clock(at, f.start, "%H:%M") for at in (j.end_p50, j.end_p95)]
        )
        table.add_row(
            Text(j.label),
            j.backend,
            # minutes in the table, to fit 80 columns; the lines below and --json say seconds
            _clock(j.start_p50, f.start, "%H:%M"),
            *ends,
            format_duration(j.wait_s) if j.wait_s > 0 else "-",
            "none: nothing learned" if j.basis == "none" else j.basis,
            *([cost_cell(money, j.label)] if paid else []),
        )
    console.print(table)
    if unknown:
        line(f"finish: not forecast: {unknown_line(unknown, len(f.jobs))}")
    else:
        line(f"finish: p50 {_clock(f.finish_p50, f.start)}, p95 {_clock(f.finish_p95, f.start)}")
        line(f"critical path: {' -> '.join(f.critical_path) or '-'}")
    expected = {x.label for x in f.late}
    only_p95 = [x for x in f.late_p95 if x.label not in expected]
    for case, late in (("", f.late), (" in the late case (p95)", only_p95)):
        if unknown:  # who ends past the deadline rests on the jobs counted as 0 s
            break
        for x in late:
            how = f"ends {format_duration(x.seconds)} late"
            if not x.submitted:
                how = f"not submitted: its turn comes after the deadline ({how})"
            line(f"past the deadline{case}: {x.label} {how}")
    if unknown:
        line("the deadline: not known whether every job ends before it (see above)")
    elif not f.late and not f.late_p95:
        line("every job ends before the deadline, also in the late case")
    for text in money_lines(money, lambda at: _clock(at, f.start), unknown=bool(unknown)):
        line(text)
