"""``nightshift cancel``: stop a night's external jobs still in flight, from the ledger.

Works whether or not the night's process is alive (``engine/cancelling.py``). Exit 0 when every
job in flight was cancelled (or none was in flight), 1 when a backend refused one; 4 for an
unknown catalogue or a night with no jobs recorded; 6 when the ledger cannot be opened.
"""

from __future__ import annotations

import getpass
import json
import socket
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from nightshift.cli.status import NoSuchNight

if TYPE_CHECKING:
    from nightshift.config.catalogue import Catalogue
    from nightshift.config.settings import Settings

__all__ = ["CANCEL_EXIT_CODES", "register", "run_cancel"]

CANCEL_EXIT_CODES = """\
exit codes:
  0   every job in flight was cancelled (or none was in flight)
  1   a backend could not cancel a job (it may still run: see the line)
  4   unknown catalogue, a bad --night or --only, or no jobs recorded for that night
  6   the ledger database could not be opened (NIGHTSHIFT_DATABASE_URL)
"""


def register(sub: Any) -> None:
    """Add ``cancel`` to the subcommands."""
    from nightshift.cli.args import add_command, catalogue_flag

    cancel = add_command(
        sub,
        "cancel",
        "cancel a night's external jobs still in flight (Ctrl-C only stops watching them)",
        _command,
        CANCEL_EXIT_CODES,
    )
    catalogue_flag(cancel)
    cancel.add_argument("--night", help="the night's date (default: today)")
    cancel.add_argument("--only", nargs="+", metavar="LABEL", help="cancel only these jobs")
    cancel.add_argument("--json", action="store_true", help="print one object")


def _command(args: Any) -> int:
    from nightshift.cli.night_args import run_for_night

    return run_for_night(
        args,
        lambda settings, catalogue, night, only: run_cancel(
            settings, catalogue, night, only, as_json=args.json
        ),
    )


def run_cancel(
    settings: Settings,
    catalogue: Catalogue,
    night: str,
    only: Iterable[str] | None = None,
    *,
    as_json: bool = False,
) -> int:
    """Cancel the night's jobs in flight and say what was done, one line per job."""
    from nightshift.engine.cancelling import cancel_night
    from nightshift.store.ledger import Ledger
    from nightshift.store.night_reads import night_jobs

    ledger = Ledger(settings.ledger_url(), catalogue.key)
    try:
        if not night_jobs(ledger.engine, catalogue.key, night):
            raise NoSuchNight(f"no jobs of {catalogue.key!r} recorded for the night {night}")
        reason = f"cancelled by nightshift cancel ({_who()})"
        done = cancel_night(catalogue, settings, ledger, night, only=only, reason=reason)
    finally:
        ledger.close()
    failed = [c for c in done.jobs if c.error is not None]
    if as_json:
        jobs = [
            {"label": c.label, "external_id": c.external_id, "error": c.error} for c in done.jobs
        ]
        out = {"night": night, "night_alive": done.night_alive, "jobs": jobs}
        print(json.dumps(out | {"not_submitted": done.not_submitted}))
        return 1 if failed else 0
    for c in done.jobs:
        what = f"not cancelled: {c.error}" if c.error else "cancelled"
        print(f"{c.label} ({c.backend} {c.external_id}): {what}")
    if not done.jobs:
        print(f"nothing in flight in the night {night}")
    if done.night_alive:
        print("the night is running: it records them cancelled and submits nothing more")
    return 1 if failed else 0


def _who() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "?"
    return f"{user}@{socket.gethostname()}"
