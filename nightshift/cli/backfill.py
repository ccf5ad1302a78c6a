"""``nightshift backfill --from D1 --to D2``: chosen past nights, run the way a night runs.

Oldest first (``--newest-first``), one at a time in this process (each night takes the
catalogue's lease, as every night does: never two at once), each under its own spend cap, with
its own ledger rows, report and verdict. A night that already ended ok is skipped unless
``--again``; so the same command, run again after a Ctrl-C or a kill -9, goes on where it
stopped (the stopped night's rerun re-attaches to its jobs: nothing is submitted twice).
Before anything runs it prints each night's expected finish and cost and the total (``nightshift
plan --nights D1..D2``), and asks for ``--yes`` when a night is expected past the night's cap.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from nightshift.cli import exits
from nightshift.cli.args import add_command, catalogue_flag
from nightshift.cli.exits import say

__all__ = ["BACKFILL_EXIT_CODES", "register", "run_backfill"]

BACKFILL_EXIT_CODES = exits.epilog(
    0,
    1,
    2,
    3,
    4,
    5,
    6,
    64,
    c0="every night run ended ok (or none was left to run)",
    c1="every night run failed",
    c2="some nights ran not ok",
    c4="invalid catalogue, --only, or a night expected past the cap without --yes",
    c64="a bad --from, --to or --nights",
) + ("  130 stopped by Ctrl-C; the same command goes on where it stopped\n")


def register(sub: Any) -> None:
    """Add ``backfill`` to the subcommands."""
    backfill = add_command(
        sub,
        "backfill",
        "run chosen past nights one at a time, oldest first (skips nights that ended ok)",
        _command,
        BACKFILL_EXIT_CODES,
    )
    catalogue_flag(backfill)
    backfill.add_argument("--from", dest="first", metavar="YYYY-MM-DD", help="the first night")
    backfill.add_argument("--to", dest="last", metavar="YYYY-MM-DD", help="the last night")
    backfill.add_argument(
        "--nights", metavar="D1,D2,...", help="these nights instead of --from/--to"
    )
    backfill.add_argument("--only", nargs="+", metavar="LABEL", help="run only these jobs")
    backfill.add_argument("--newest-first", action="store_true", help="the newest night first")
    backfill.add_argument(
        "--again",
        action="store_true",
        help="run nights that ended ok too (as a rerun: what succeeded is kept)",
    )
    backfill.add_argument(
        "--yes", action="store_true", help="run nights expected to cost more than the cap"
    )
    backfill.add_argument(
        "--dry-run", action="store_true", help="say what would run and cost; run nothing"
    )


def _command(args: argparse.Namespace) -> int:
    try:
        nights = _nights(args)
    except ValueError as exc:
        say(f"nightshift backfill: {exc}")
        return exits.USAGE
    if args.newest_first:
        nights.reverse()
    return exits.guarded(lambda: run_backfill(args.catalogue, nights, args))


def _nights(args: argparse.Namespace) -> list[str]:
    """The nights asked for, oldest first: ``--from``/``--to``, or ``--nights``; ValueError."""
    from nightshift.cli.plan_nights import night_list, night_range

    if args.nights is not None:
        if args.first is not None or args.last is not None:
            raise ValueError("give --nights or --from/--to, not both")
        return night_list(args.nights)
    if args.first is None or args.last is None:
        raise ValueError("which nights? --from D1 --to D2, or --nights D1,D2,...")
    return night_range(args.first, args.last)


def run_backfill(path: str, nights: list[str], args: argparse.Namespace) -> int:
    """Say what will run and cost, then run each night; the backfill's exit code."""
    from nightshift.cli.plan_nights import plan_nights, print_nights
    from nightshift.cli.run import run_catalogue
    from nightshift.config.loader import load_catalogue
    from nightshift.config.settings import load_settings
    from nightshift.engine.plan import check_only
    from nightshift.store.ledger import Ledger
    from nightshift.store.night_reads import night_verdicts

    catalogue = load_catalogue(path)
    try:
        check_only(catalogue, args.only)
    except ValueError as exc:
        say(f"{path}: {exc}")
        return exits.BAD_CATALOGUE
    ledger = Ledger(load_settings().ledger_url(), catalogue.key)
    try:
        verdicts = night_verdicts(ledger.engine, catalogue.key, nights, only=args.only)
    finally:
        ledger.close()
    done = [n for n in nights if verdicts.get(n) == "ok" and not args.again]
    todo = [n for n in nights if n not in done]
    if done:
        print(f"skipped, already ended ok: {', '.join(done)} (--again runs them too)")
    if not todo:
        print("nothing left to run")
        return exits.OK
    found = plan_nights(catalogue, Path(path), todo, args.only)
    print_nights(found, as_json=False)
    if found.over_cap and not args.yes:
        say(
            f"nightshift backfill: {', '.join(found.over_cap)} expected past the night's cap "
            f"(${found.cap_usd:,.2f}); the cap still holds each night: --yes to run them"
        )
        return exits.BAD_CATALOGUE
    if args.dry_run:
        return exits.OK
    codes: dict[str, int] = {}
    for k, night in enumerate(todo, 1):
        print(f"night {k} of {len(todo)}: {night}", flush=True)
        codes[night] = code = run_catalogue(path, only=args.only, night=night)
        if code not in (exits.OK, exits.FAILED, exits.PARTIAL):  # no night could run now
            left = todo[k - 1 :]
            say(f"backfill stopped at {night}: {len(left)} night(s) left; the same command goes on")
            return code
    return _overall(codes)


def _overall(codes: dict[str, int]) -> int:
    """0 every night ok, 1 every night failed, 2 some not ok."""
    values = set(codes.values())
    if values == {exits.OK}:
        return exits.OK
    if values == {exits.FAILED}:
        return exits.FAILED
    return exits.PARTIAL
