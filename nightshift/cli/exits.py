"""The CLI's exit codes, what each means, and the one mapping from errors to codes."""

from __future__ import annotations

import sys
from collections.abc import Callable

from sqlalchemy.exc import SQLAlchemyError

__all__ = [
    "BAD_CATALOGUE",
    "DATABASE_ERRORS",
    "FAILED",
    "INTERRUPTED",
    "INTERRUPTED_LINE",
    "LOCKED",
    "NO_LEDGER",
    "NO_PREFECT",
    "OK",
    "PARTIAL",
    "USAGE",
    "epilog",
    "guarded",
    "is_database_error",
    "ledger_problem",
    "say",
]

OK = 0
FAILED = 1
PARTIAL = 2
LOCKED = 3
BAD_CATALOGUE = 4
NO_PREFECT = 5
NO_LEDGER = 6
USAGE = 64  # EX_USAGE: never 2, which a wrapper reads as "partial night"
INTERRUPTED = 130  # 128 + SIGINT, as a shell says Ctrl-C
# a Ctrl-C before a night began submits nothing; one after its end loses nothing
INTERRUPTED_LINE = "interrupted (Ctrl-C): nothing more was done"

# what a code means wherever a command does not say more
MEANING = {
    OK: "every job succeeded",
    FAILED: "no job succeeded, or the night crashed",
    PARTIAL: "some jobs succeeded (a partial night)",
    LOCKED: "refused: another night of the same catalogue is running",
    BAD_CATALOGUE: "invalid --catalogue",
    NO_PREFECT: "the Prefect API could not be reached",
    NO_LEDGER: "the ledger database could not be opened (NIGHTSHIFT_DATABASE_URL)",
    USAGE: "bad command line (usage)",
}

# a bad URL, an unreachable server, a missing driver, an unwritable SQLite folder
DATABASE_ERRORS = (SQLAlchemyError, ImportError, OSError)


def epilog(*codes: int, **own: str) -> str:
    """The ``exit codes:`` block of a command's --help; ``own`` overrides a meaning (``c0=...``)."""
    lines = ["exit codes:"]
    for code in codes:
        lines.append(f"  {code:<3} {own.get(f'c{code}', MEANING[code])}")
    return "\n".join(lines) + "\n"


def guarded(call: Callable[[], int]) -> int:
    """Run ``call``; an invalid catalogue exits 4, a ledger that cannot be opened 6, in one line."""
    from nightshift.errors import CatalogueError

    try:
        return call()
    except CatalogueError as exc:
        say(str(exc))
        return BAD_CATALOGUE
    except DATABASE_ERRORS as exc:
        from nightshift.config.settings import load_settings

        say(ledger_problem(load_settings().ledger_url(), exc))
        return NO_LEDGER


def is_database_error(exc: object) -> bool:
    """Errors of the ledger's database (bad URL, unreachable, missing driver, unwritable file)."""
    return isinstance(exc, DATABASE_ERRORS)


def ledger_problem(url: str, exc: BaseException) -> str:
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


def say(message: str) -> None:
    """An error or refusal for the engineer, on stderr, never wrapped."""
    print(message, file=sys.stderr)
