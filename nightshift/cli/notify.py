"""``nightshift notify``: list the messages waiting in the outbox, or ``--flush`` them to Slack."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from nightshift.cli import exits
from nightshift.cli.args import add_command, catalogue_flag

if TYPE_CHECKING:
    from nightshift.store.outbox import OutboxItem

__all__ = ["NOTIFY_EXIT_CODES", "register", "run_notify"]

NOTIFY_EXIT_CODES = exits.epilog(
    0,
    1,
    4,
    6,
    c0="nothing waits (everything was delivered, or nothing was kept)",
    c1="messages still wait (Slack refused or could not be reached: see the lines above)",
)


def register(sub: Any) -> None:
    """Add ``notify`` to the subcommands."""
    notify = add_command(
        sub,
        "notify",
        "list the Slack messages waiting in the outbox; --flush delivers them",
        _command,
        NOTIFY_EXIT_CODES,
    )
    notify.add_argument("--flush", action="store_true", help="deliver them, oldest first")
    shown = "only this catalogue's messages, sent with its notify.slack setting"
    catalogue_flag(notify, shown, default=None)


def _command(args: argparse.Namespace) -> int:
    from nightshift.config.settings import load_settings

    def flush_or_list() -> int:
        url = load_settings().ledger_url()
        return run_notify(url, flush=args.flush, catalogue_path=args.catalogue)

    return exits.guarded(flush_or_list)


def run_notify(url: str, *, flush: bool, catalogue_path: str | None = None) -> int:
    """List or flush the outbox; one line per message; database errors propagate.

    With ``catalogue_path``, only that catalogue's messages, sent with its current ``notify.slack``.
    Raises CatalogueError for an invalid catalogue.
    """
    from nightshift.config.loader import load_catalogue
    from nightshift.notify.notifier import flush_outbox
    from nightshift.notify.send import Delivery
    from nightshift.store.ledger import Ledger
    from nightshift.store.outbox import Outbox

    key, slack = None, None
    if catalogue_path is not None:
        catalogue = load_catalogue(catalogue_path)
        key, slack = catalogue.key, catalogue.notify.slack if catalogue.notify else None
    ledger = Ledger(url)  # brings the schema up to date
    try:
        outbox = Outbox(ledger.engine)
        if not flush:
            waiting = outbox.pending(key)
            for item in waiting:
                print(f"waiting {_describe(item)}: {item.last_error or 'not sent yet'}")
            print(f"{len(waiting)} message(s) waiting")
            return 1 if waiting else 0

        def said(item: OutboxItem, result: Delivery) -> None:
            verb = "sent" if result.ok else "kept"
            print(f"{verb} {_describe(item)}" + ("" if result.ok else f": {result.error}"))

        report = flush_outbox(outbox, catalogue=key, slack=slack, on_item=said)
        left = len(outbox.pending(key))
        print(f"flushed: {len(report.sent)} sent, {left} waiting")
        return 1 if left else 0
    finally:
        ledger.close()


def _describe(item: OutboxItem) -> str:
    """``#3 (alert etl to #batch-alerts, nightly night 2026-11-29)``: names only, no secrets."""
    from nightshift.config.notify import Route

    route = Route(**item.destination)
    what = item.kind + (f" {item.label}" if item.label else "")
    return f"#{item.id} ({what} to {route.target}, {item.catalogue} night {item.night})"
