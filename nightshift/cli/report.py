"""``nightshift report``: the night report (the ``nightly-report`` artifact's page) on stdout.

The page comes from the newest run folder of the night that kept one (its ``summary.json``,
``report.png`` beside it); a night the ledger knows but no run folder holds is drawn from the
ledger's job rows.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["REPORT_EXIT_CODES", "register", "run_report"]

REPORT_EXIT_CODES = """\
exit codes:
  0   the report was printed
  4   invalid --catalogue or --night, or no ledger rows for that night
  6   the ledger database could not be opened (NIGHTSHIFT_DATABASE_URL)
  64  bad command line (usage)
"""
EXIT_BAD_INPUT, EXIT_NO_LEDGER = 4, 6


def register(sub: Any) -> None:
    """Add ``report`` to the subcommands."""
    from nightshift.cli.args import add_command, catalogue_flag

    parser = add_command(
        sub,
        "report",
        "the night report: headline, jobs worst first, why, alerts, Slack, plot",
        _command,
        REPORT_EXIT_CODES,
    )
    catalogue_flag(parser)
    parser.add_argument("--night", metavar="YYYY-MM-DD", help="the night (default: today, UTC)")


def _command(args: argparse.Namespace) -> int:
    return run_report(args.catalogue, args.night)


def run_report(catalogue_path: str, night: str | None) -> int:
    """Print the night's report; one line on stderr and exit 4 for bad input or no rows."""
    from sqlalchemy.exc import SQLAlchemyError

    from nightshift.config.loader import load_catalogue
    from nightshift.config.settings import load_settings
    from nightshift.engine.plan import which_night
    from nightshift.errors import CatalogueError
    from nightshift.orchestration.report_inputs import catalogue_name
    from nightshift.store.ledger import Ledger

    try:
        catalogue = load_catalogue(catalogue_path)
        day = which_night(night)
    except (CatalogueError, ValueError) as exc:
        _say(str(exc))
        return EXIT_BAD_INPUT
    settings = load_settings()
    name = catalogue_name(catalogue)
    try:
        ledger = Ledger(settings.ledger_url(), catalogue.key)
    except (SQLAlchemyError, ImportError, OSError) as exc:
        _say(f"the ledger database could not be opened: {type(exc).__name__}: {exc}")
        return EXIT_NO_LEDGER
    try:
        records = ledger.jobs_of(day)
        if not records:
            _say(f"no ledger rows for night {day} of catalogue {name}")
            return EXIT_BAD_INPUT
        folder = settings.state_dir / "runs" / day
        found = _newest_report(folder, name)
        if found is not None:
            page, plot = found
        else:
            page, plot = _from_ledger(catalogue, ledger, day, records, folder), None
    except (SQLAlchemyError, OSError) as exc:
        _say(f"the ledger database could not be read: {type(exc).__name__}: {exc}")
        return EXIT_NO_LEDGER
    finally:
        ledger.close()
    from nightshift.orchestration.night_report import render_report

    sys.stdout.write(render_report(page, plot=plot))
    return 0


def _newest_report(folder: Path, name: str) -> tuple[dict[str, Any], str | None] | None:
    """The newest run folder's report of catalogue ``name``, and its plot's path."""
    from nightshift.orchestration.report import PLOT_FILE, SUMMARY_FILE

    runs = sorted(folder.glob(f"*/{SUMMARY_FILE}"), key=lambda p: p.stat().st_mtime, reverse=True)
    for path in runs:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if data.get("catalogue") == name and isinstance(data.get("report"), dict):
            plot = path.parent / PLOT_FILE
            return data["report"], str(plot) if plot.exists() else None
    return None


def _from_ledger(
    catalogue: Any, ledger: Any, night: str, records: list[Any], folder: Path
) -> dict[str, Any]:
    """The report drawn from the ledger's job rows (no run folder kept one): its runs from the
    ledger's transitions and whatever summaries the night's run folders hold."""
    from nightshift.engine.outcomes import JobOutcome, Outcome, is_final, join
    from nightshift.orchestration.report_inputs import gather_report

    jobs = []
    for r in records:
        state = Outcome(r.state) if is_final(r.state) else Outcome.FAILED
        took = 0.0
        if r.submitted_at and r.finished_at:
            took = (r.finished_at - r.submitted_at).total_seconds()
        detail = r.detail if is_final(r.state) else f"last seen {r.state}"
        jobs.append(
            JobOutcome(
                label=r.label,
                state=state,
                duration_s=took,
                attempts=r.attempts,
                external_id=r.external_id,
                backend=r.backend,
                detail=detail,
            )
        )
    return gather_report(join(jobs), catalogue, ledger, night, runs_folder=folder)


def _say(message: str) -> None:
    print(message, file=sys.stderr)
