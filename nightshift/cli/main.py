"""``nightshift``: run a night locally, validate a catalogue, or run the sandboxed demo."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

from sqlalchemy.exc import SQLAlchemyError

from nightshift.cli.budgets import BUDGET_EXIT_CODES
from nightshift.cli.notify import NOTIFY_EXIT_CODES
from nightshift.cli.prune import PRUNE_EXIT_CODES
from nightshift.cli.report import add_report_parser
from nightshift.cli.watchdog import WATCHDOG_EXIT_CODES

__all__ = ["main"]

EXIT_LOCKED = 3
EXIT_BAD_CATALOGUE = 4
EXIT_NO_PREFECT = 5
EXIT_NO_LEDGER = 6
EXIT_USAGE = 64  # EX_USAGE: never 2, which a wrapper reads as "partial night"

# a bad URL, an unreachable server, a missing driver, an unwritable SQLite folder
_DATABASE_ERRORS = (SQLAlchemyError, ImportError, OSError)

EXIT_CODES = """\
exit codes:
  0   every job succeeded
  1   no job succeeded, or the night crashed
  2   some jobs succeeded (a partial night)
  3   refused: another night of the same catalogue is running
  4   invalid catalogue, batch input, --only or --night
  5   the Prefect API could not be reached
  6   the ledger database could not be opened (NIGHTSHIFT_DATABASE_URL)
  64  bad command line (usage)
"""


class _Parser(argparse.ArgumentParser):
    """argparse with its own exit code for usage errors (argparse's 2 means "partial" here)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``nightshift`` console script."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    if not args.verbose:
        # the live table and the summary are the display; Prefect's own lines (and the
        # flow's per-job warnings, which the summary repeats) stay in the run's logs
        # (only the console's level: the run's logs in the Prefect UI keep everything);
        # our own one-line errors say what went wrong, so no engine traceback without -v
        os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "CRITICAL")
        os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    # the temporary server takes ~15 s on a new database, more on a busy 2-core machine
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    if args.command == "validate":
        return _validate(args.catalogue)
    if args.command == "budgets":
        return _budgets(args.catalogue, args.label, args.json, args.rebuild)
    if args.command == "prune":
        return _prune(args.catalogue, args.keep, args.dry_run)
    if args.command == "watchdog":
        return _watchdog(args.catalogue, args.json, args.stale_after, args.streak)
    if args.command == "notify":
        return _notify(args.catalogue, args.flush)
    if args.command == "report":
        from nightshift.cli.report import run_report

        return run_report(args.catalogue, args.night)
    if args.command == "demo":
        from nightshift.cli.demo import run_demo

        return run_demo(args.scenario, as_json=args.json, workdir=args.workdir)
    return run_catalogue(args.catalogue, only=args.only, as_json=args.json, night=args.night)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="nightshift",
        description=__doc__,
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="show Prefect's logs")
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser(
        "run",
        help="run the nightly flow locally (exit 0 ok, 2 partial, 1 failed)",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _catalogue_flag(run)
    run.add_argument("--only", nargs="+", metavar="LABEL", help="run only these jobs")
    run.add_argument("--night", help="the night's date (default: today); reruns reuse it")
    run.add_argument("--json", action="store_true", help="print one summary object at the end")
    check = sub.add_parser(
        "validate", help="validate a catalogue and its batch inputs (exit 4 when invalid)"
    )
    _catalogue_flag(check)
    demo = sub.add_parser("demo", help="a sandboxed night on local emulators, no keys needed")
    demo.add_argument("--scenario", choices=["calm", "rough"], default="calm")
    demo.add_argument("--workdir", help="where the sandbox lives (default: a temp dir)")
    demo.add_argument("--json", action="store_true")
    budgets = sub.add_parser(
        "budgets",
        help="the dwell budgets: the latest snapshot, learned from the ledger's last 30 days",
        epilog=BUDGET_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _catalogue_flag(budgets, "only this catalogue file's budgets", default=None)
    budgets.add_argument("--label", metavar="LABEL", help="only this job's budgets")
    budgets.add_argument("--json", action="store_true", help="print one object")
    budgets.add_argument(
        "--rebuild", action="store_true", help="learn the budgets again first (a new snapshot)"
    )
    prune = sub.add_parser(
        "prune",
        help="delete history older than --keep (ledger rows, manifests, command-job folders)",
        epilog=PRUNE_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    prune.add_argument("--keep", default="90d", help="the window kept (default 90d)")
    _catalogue_flag(prune, "only this catalogue's ledger rows, and its manifests", default=None)
    prune.add_argument("--dry-run", action="store_true", help="say what would go, delete nothing")
    add_report_parser(sub, _catalogue_flag)
    watchdog = sub.add_parser(
        "watchdog",
        help="one watchdog pass: overstaying jobs, stopped nights, stale labels, failure streaks",
        epilog=WATCHDOG_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    shown = "only this catalogue's jobs, and check its labels for staleness (default: all)"
    _catalogue_flag(watchdog, shown, default=None)
    watchdog.add_argument(
        "--stale-after",
        default="24h",
        metavar="DURATION",
        help="a label without a success this long is stale (default 24h)",
    )
    watchdog.add_argument(
        "--streak",
        type=int,
        default=3,
        metavar="N",
        help="alert after N nights not ok in a row (default 3)",
    )
    watchdog.add_argument("--json", action="store_true", help="print one object")
    notify = sub.add_parser(
        "notify",
        help="list the Slack messages waiting in the outbox; --flush delivers them",
        epilog=NOTIFY_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    notify.add_argument("--flush", action="store_true", help="deliver them, oldest first")
    shown = "only this catalogue's messages, sent with its notify.slack setting"
    _catalogue_flag(notify, shown, default=None)
    for p in (run, check, demo, budgets, prune, watchdog, notify):
        p.add_argument("-v", "--verbose", action="store_true", help="show Prefect's logs")
    return parser


def _catalogue_flag(
    parser: argparse.ArgumentParser,
    help: str = "the catalogue file",
    default: str | None = "nightshift.yaml",
) -> None:
    parser.add_argument("--catalogue", default=default, metavar="FILE", help=help)
    # the old spelling still works (scripts, crontabs); --help shows only one
    parser.add_argument(
        "--catalog", dest="catalogue", default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )


def _budgets(path: str | None, label: str | None, as_json: bool, rebuild: bool) -> int:
    from nightshift.cli.budgets import show_budgets
    from nightshift.config.catalogue import load_catalogue
    from nightshift.config.settings import load_settings
    from nightshift.errors import CatalogueError

    try:
        key = load_catalogue(path).key if path is not None else None
    except CatalogueError as exc:
        _say(str(exc))
        return EXIT_BAD_CATALOGUE
    url = load_settings().ledger_url()
    try:
        return show_budgets(url, catalogue=key, label=label, as_json=as_json, rebuild=rebuild)
    except _DATABASE_ERRORS as exc:
        _say(_ledger_problem(url, exc))
        return EXIT_NO_LEDGER


def _prune(path: str | None, keep: str, dry_run: bool) -> int:
    from nightshift.cli.prune import catalogue_scope, run_prune
    from nightshift.config.durations import parse_duration
    from nightshift.config.settings import load_settings
    from nightshift.errors import CatalogueError

    try:
        keep_s = parse_duration(keep)
    except ValueError as exc:
        _say(f"nightshift prune: --keep: {exc}")
        return EXIT_USAGE
    try:
        key, outputs = catalogue_scope(path)
    except CatalogueError as exc:
        _say(str(exc))
        return EXIT_BAD_CATALOGUE
    settings = load_settings()
    url = settings.ledger_url()
    try:
        return run_prune(url, settings.state_dir, keep_s, key, outputs, dry_run=dry_run)
    except _DATABASE_ERRORS as exc:
        _say(_ledger_problem(url, exc))
        return EXIT_NO_LEDGER


def _watchdog(path: str | None, as_json: bool, stale_after: str, streak: int) -> int:
    from nightshift.cli.watchdog import run_watchdog
    from nightshift.config.catalogue import load_catalogue
    from nightshift.config.durations import parse_duration
    from nightshift.config.settings import load_settings
    from nightshift.errors import CatalogueError
    from nightshift.watchdog.checks import Rules

    try:
        rules = Rules(stale_after_s=parse_duration(stale_after), streak_nights=streak)
    except ValueError as exc:
        _say(f"nightshift watchdog: --stale-after/--streak: {exc}")
        return EXIT_USAGE
    try:
        catalogue = load_catalogue(path) if path is not None else None
    except CatalogueError as exc:
        _say(str(exc))
        return EXIT_BAD_CATALOGUE
    settings = load_settings()
    url = settings.ledger_url()
    try:
        return run_watchdog(settings, catalogue, rules, as_json=as_json)
    except _DATABASE_ERRORS as exc:
        _say(_ledger_problem(url, exc))
        return EXIT_NO_LEDGER


def _notify(path: str | None, flush: bool) -> int:
    from nightshift.cli.notify import run_notify
    from nightshift.config.settings import load_settings
    from nightshift.errors import CatalogueError

    url = load_settings().ledger_url()
    try:
        return run_notify(url, flush=flush, catalogue_path=path)
    except CatalogueError as exc:
        _say(str(exc))
        return EXIT_BAD_CATALOGUE
    except _DATABASE_ERRORS as exc:
        _say(_ledger_problem(url, exc))
        return EXIT_NO_LEDGER


def _validate(path: str) -> int:
    from nightshift.backends.gemini.batch_input import catalogue_input_problems
    from nightshift.config.catalogue import load_catalogue
    from nightshift.config.timers import schedule_warnings
    from nightshift.errors import CatalogueError

    try:
        catalogue = load_catalogue(path)
    except CatalogueError as exc:
        print(exc, file=sys.stderr)
        return EXIT_BAD_CATALOGUE
    errors, notes = catalogue_input_problems(catalogue)
    for line in [*schedule_warnings(catalogue), *notes]:
        _say(line)
    if errors:
        _say("invalid batch input:\n  " + "\n  ".join(errors))
        return EXIT_BAD_CATALOGUE
    print(f"{path}: ok, {len(catalogue.jobs)} jobs")
    return 0


def run_catalogue(
    path: str, *, only: list[str] | None = None, as_json: bool = False, night: str | None = None
) -> int:
    """Run one night of ``path`` in this process and return the exit code."""
    from rich.console import Console

    from nightshift.config.catalogue import load_catalogue
    from nightshift.engine.plan import parse_night, plan_night, tonight
    from nightshift.errors import CatalogueError, NightshiftError

    err = Console(stderr=True)
    try:
        night = parse_night(night) if night else tonight()
    except ValueError as exc:
        _say(str(exc))
        return EXIT_BAD_CATALOGUE
    try:
        catalogue = load_catalogue(path)
        labels = plan_night(catalogue, only).labels
    except CatalogueError as exc:
        _say(str(exc))
        return EXIT_BAD_CATALOGUE
    except ValueError as exc:  # --only names a job the catalogue does not have
        _say(f"{path}: {exc}")
        return EXIT_BAD_CATALOGUE

    from flows.nightly import LIVE_SINKS, nightly, run_dir_for
    from nightshift.cli.live import LiveTable
    from nightshift.config.settings import load_settings
    from nightshift.errors import LockHeldError

    settings = load_settings()
    # the ledger and the lease first: a clear line now, not a traceback from inside the flow
    if (refusal := _check_ledger(settings.ledger_url(), catalogue.key)) is not None:
        code, message = refusal
        _say(message)
        return code
    if (problem := _connect(err.is_terminal)) is not None:
        _say(problem)
        return EXIT_NO_PREFECT
    run_dir = run_dir_for(settings, night)
    table = LiveTable(labels, err)
    LIVE_SINKS.append(table.on_event)
    try:
        with table.shown(enabled=err.is_terminal):
            state = nightly(
                catalog=str(path), only=only, night=night, run_dir=str(run_dir), return_state=True
            )
    finally:
        LIVE_SINKS.remove(table.on_event)
    summary_file = run_dir / "summary.json"
    error: Any = state.result(raise_on_failure=False)
    if isinstance(error, LockHeldError):  # a refused night leaves a summary too: say it in a line
        _say(f"refused: {error}")
        return EXIT_LOCKED
    if not summary_file.exists():
        if isinstance(error, CatalogueError):
            _say(str(error))
            return EXIT_BAD_CATALOGUE
        if _is_database_error(error):
            _say(_ledger_problem(settings.ledger_url(), error))
            return EXIT_NO_LEDGER
        if isinstance(error, NightshiftError):
            _say(f"error: {error}")
            return 1
        _say(f"the night crashed: {state.message}")
        return 1
    summary = json.loads(summary_file.read_text(encoding="utf-8"))
    if as_json:
        print(json.dumps(summary))
    else:
        _print_summary(summary, run_dir)
    if catalogue.notify is not None:
        _say_outbox(settings.ledger_url(), catalogue.key)
    return int(summary["exit_code"])


def _say_outbox(url: str, key: str) -> None:
    """One line when Slack did not take the night's messages (they wait in the outbox)."""
    from nightshift.store.ledger import Ledger
    from nightshift.store.outbox import Outbox

    try:
        ledger = Ledger(url, key)
        try:
            waiting = Outbox(ledger.engine).pending(key)
        finally:
            ledger.close()
    except Exception:  # the night is over: this line is a courtesy, never a new failure
        return
    if waiting:
        reason = waiting[-1].last_error or "not delivered"
        _say(
            f"slack: {len(waiting)} message(s) wait in the outbox ({reason}); "
            "`nightshift notify --flush` delivers them"
        )


def _check_ledger(url: str, key: str) -> tuple[int, str] | None:
    """Open the ledger and look at the catalogue's lease: (exit code, one line), or None."""
    from datetime import UTC, datetime

    from nightshift.errors import LockHeldError
    from nightshift.store.lease import Lease
    from nightshift.store.ledger import Ledger

    try:
        ledger = Ledger(url)
    except _DATABASE_ERRORS as exc:
        return EXIT_NO_LEDGER, _ledger_problem(url, exc)
    try:
        holder = Lease(ledger.engine, key).holder()
    except _DATABASE_ERRORS as exc:
        return EXIT_NO_LEDGER, _ledger_problem(url, exc)
    finally:
        ledger.close()
    if holder is None:
        return None
    owner, expires_at = holder
    left = (expires_at - datetime.now(UTC)).total_seconds()
    if left <= 0:
        return None  # a crashed night's lease: this night takes it over
    return EXIT_LOCKED, f"refused: {LockHeldError(key, owner, left)}"


def _is_database_error(exc: object) -> bool:
    """Errors of the ledger's database (bad URL, unreachable, missing driver, unwritable file)."""
    return isinstance(exc, _DATABASE_ERRORS)


def _ledger_problem(url: str, exc: BaseException) -> str:
    """One line naming the database (password hidden) and why it could not be used."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
        shown, password = parsed.render_as_string(hide_password=True), parsed.password
    except ArgumentError:
        shown, password = "(NIGHTSHIFT_DATABASE_URL: not a database URL)", None
    lines = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    text = (lines[0] if lines else type(exc).__name__).replace(url, shown)
    if password:
        text = text.replace(str(password), "***")
    return f"cannot open the ledger database {shown}: {text}"


def _connect(verbose: bool) -> str | None:
    """Reach the Prefect API now (starting the temporary server if none is configured).

    Done before the live table is drawn: the server's start-up would otherwise break it up.
    Returns what went wrong, in one line, or None.
    """
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL

    from nightshift.cli.reaper import install

    url = PREFECT_API_URL.value()
    if not url:
        install()  # the temporary server must not outlive us, even after a kill -9
    if verbose and not url:
        _say("starting Prefect's temporary server (about 15 s; set PREFECT_API_URL to use yours)")
    try:
        with get_client(sync_client=True) as client:
            error = client.api_healthcheck()
    except Exception as exc:  # the temporary server failed to start, a bad URL...
        error = exc
    if error is None:
        return None
    where = url or "Prefect's temporary server"
    return f"cannot reach the Prefect API at {where}: {type(error).__name__}: {error}"


def _say(message: str) -> None:
    """An error or refusal for the engineer, on stderr, never wrapped."""
    print(message, file=sys.stderr)


def _print_summary(summary: dict[str, Any], run_dir: Path) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from nightshift.config.durations import format_duration

    table = Table(title=f"night: {summary['severity']}")
    for column in ("job", "state", "duration", "attempts", "detail"):
        table.add_column(column)
    for job in summary["jobs"]:
        style = "green" if job["state"] == "succeeded" else "red"
        # Text, not markup: a label like `gen:a:` or a detail with `[x]` is shown as it is
        table.add_row(
            Text(job["label"]),
            Text(job["state"], style=style),
            format_duration(job["duration_s"]),
            str(job["attempts"]),
            Text((job.get("detail") or "")[:80]),
        )
    console = Console()
    console.print(table)
    console.print(f"summary and log tails: {run_dir}", markup=False, highlight=False)


if __name__ == "__main__":
    sys.exit(main())
