"""``nightshift``: run a night locally, validate a catalogue, or run the sandboxed demo."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["main"]

EXIT_LOCKED = 3
EXIT_BAD_CATALOGUE = 4
EXIT_NO_PREFECT = 5


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``nightshift`` console script."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    if not args.verbose:
        # the live table and the summary are the display; Prefect's own lines (and the
        # flow's per-job warnings, which the summary repeats) stay in the run's logs
        # (only the console's level: the run's logs in the Prefect UI keep everything)
        os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "ERROR")
        os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    # the temporary server takes ~15 s on a new database, more on a busy 2-core machine
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    if args.command == "validate":
        return _validate(args.catalog)
    if args.command == "demo":
        from flows.demo import run_demo

        return run_demo(args.scenario, as_json=args.json, workdir=args.workdir)
    return run_catalogue(args.catalog, only=args.only, as_json=args.json, night=args.night)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nightshift", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="show Prefect's logs")
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser(
        "run", help="run the nightly flow locally (exit 0 ok, 2 partial, 1 failed)"
    )
    run.add_argument("--catalog", default="nightshift.yaml", help="catalogue file")
    run.add_argument("--only", nargs="+", metavar="LABEL", help="run only these jobs")
    run.add_argument("--night", help="the night's date (default: today); reruns reuse it")
    run.add_argument("--json", action="store_true", help="print one summary object at the end")
    check = sub.add_parser("validate", help="validate a catalogue (exit 4 when invalid)")
    check.add_argument("--catalog", default="nightshift.yaml")
    demo = sub.add_parser("demo", help="a sandboxed night on local emulators, no keys needed")
    demo.add_argument("--scenario", choices=["calm", "rough"], default="calm")
    demo.add_argument("--workdir", help="where the sandbox lives (default: a temp dir)")
    demo.add_argument("--json", action="store_true")
    for p in (run, check, demo):
        p.add_argument("-v", "--verbose", action="store_true", help="show Prefect's logs")
    return parser


def _validate(path: str) -> int:
    from tasks.catalogue import load_catalogue
    from tasks.errors import CatalogueError

    try:
        catalogue = load_catalogue(path)
    except CatalogueError as exc:
        print(exc, file=sys.stderr)
        return EXIT_BAD_CATALOGUE
    print(f"{path}: ok, {len(catalogue.jobs)} jobs")
    return 0


def run_catalogue(
    path: str, *, only: list[str] | None = None, as_json: bool = False, night: str | None = None
) -> int:
    """Run one night of ``path`` in this process and return the exit code."""
    from rich.console import Console

    from tasks.catalogue import load_catalogue
    from tasks.errors import CatalogueError, NightshiftError
    from tasks.plan import parse_night, plan_night, tonight

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

    from flows.live import LiveTable
    from flows.nightly import LIVE_OBSERVERS, nightly, run_dir_for
    from tasks.errors import LockHeldError
    from tasks.settings import load_settings

    settings = load_settings()
    if (problem := _connect(err.is_terminal)) is not None:
        _say(problem)
        return EXIT_NO_PREFECT
    run_dir = run_dir_for(settings, night)
    table = LiveTable(labels, err)
    LIVE_OBSERVERS.append(table.update)
    try:
        with table.shown(enabled=err.is_terminal):
            state = nightly(
                catalog=str(path), only=only, night=night, run_dir=str(run_dir), return_state=True
            )
    finally:
        LIVE_OBSERVERS.remove(table.update)
    summary_file = run_dir / "summary.json"
    error: Any = state.result(raise_on_failure=False)
    if isinstance(error, LockHeldError):  # a refused night leaves a summary too: say it in a line
        _say(f"refused: {error}")
        return EXIT_LOCKED
    if not summary_file.exists():
        if isinstance(error, CatalogueError):
            _say(str(error))
            return EXIT_BAD_CATALOGUE
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
    return int(summary["exit_code"])


def _connect(verbose: bool) -> str | None:
    """Reach the Prefect API now (starting the temporary server if none is configured).

    Done before the live table is drawn: the server's start-up would otherwise break it up.
    Returns what went wrong, in one line, or None.
    """
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
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

    from tasks.durations import format_duration

    table = Table(title=f"night: {summary['severity']}")
    for column in ("job", "state", "duration", "attempts", "detail"):
        table.add_column(column)
    for job in summary["jobs"]:
        style = "green" if job["state"] == "succeeded" else "red"
        table.add_row(
            job["label"],
            f"[{style}]{job['state']}[/{style}]",
            format_duration(job["duration_s"]),
            str(job["attempts"]),
            (job.get("detail") or "")[:80],
        )
    console = Console()
    console.print(table)
    console.print(f"summary and log tails: {run_dir}", markup=False, highlight=False)


if __name__ == "__main__":
    sys.exit(main())
