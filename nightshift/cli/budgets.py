"""``nightshift budgets``: the latest budget snapshot (30 days of dwells learned), as a table."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from nightshift.budgets.report import WHOLE_JOB
from nightshift.cli import exits
from nightshift.cli.args import add_command, catalogue_flag

if TYPE_CHECKING:
    from nightshift.budgets.snapshots import SnapshotInfo

__all__ = ["BUDGET_EXIT_CODES", "WHOLE_JOB", "register", "show_budgets"]


BUDGET_EXIT_CODES = exits.epilog(
    0, 4, 6, 64, c0="the budgets were printed (also when there is no history yet)"
)


def register(sub: Any) -> None:
    """Add ``budgets`` to the subcommands."""
    budgets = add_command(
        sub,
        "budgets",
        "the dwell budgets: the latest snapshot, learned from the ledger's last 30 days",
        _command,
        BUDGET_EXIT_CODES,
    )
    catalogue_flag(budgets, "only this catalogue file's budgets", default=None)
    budgets.add_argument("--label", metavar="LABEL", help="only this job's budgets")
    budgets.add_argument("--json", action="store_true", help="print one object")
    budgets.add_argument(
        "--rebuild", action="store_true", help="learn the budgets again first (a new snapshot)"
    )


def _command(args: argparse.Namespace) -> int:
    from nightshift.config.loader import load_catalogue
    from nightshift.config.settings import load_settings

    def show() -> int:
        catalogue = load_catalogue(args.catalogue) if args.catalogue is not None else None
        url = load_settings().ledger_url()
        return show_budgets(
            url,
            catalogue=catalogue.key if catalogue is not None else None,
            label=args.label,
            as_json=args.json,
            rebuild=args.rebuild,
            # the catalogue's `defaults.min_samples`; every catalogue's at the default without one
            min_samples=catalogue.defaults.min_samples if catalogue is not None else None,
        )

    return exits.guarded(show)


def show_budgets(
    url: str,
    *,
    catalogue: str | None = None,
    label: str | None = None,
    as_json: bool = False,
    rebuild: bool = False,
    now: datetime | None = None,
    min_samples: int | None = None,
) -> int:
    """Print the latest snapshot's budgets of ``catalogue`` (a key; None: every catalogue).

    With no snapshot yet (or ``rebuild``), one is learned from the ledger's last 30 days and
    stored first, and shown as a catalogue with ``min_samples`` (None: the default, 7) sees it:
    a budget from fewer samples falls back (job -> backend -> learning). Returns 0. The
    ledger's errors (SQLAlchemy's, a missing driver) propagate for the caller to name.
    """
    from nightshift.budgets.columns import MIN_SAMPLES
    from nightshift.budgets.current import build_snapshot, latest_snapshot, window_history
    from nightshift.budgets.report import budget_rows, records
    from nightshift.budgets.table import at_least, clock_disagreements
    from nightshift.store.ledger import Ledger

    now = now or datetime.now(UTC)
    ledger = Ledger(url)
    left_out: list[str] = []
    try:
        snapshot = None if rebuild else latest_snapshot(ledger, catalogue)
        built = snapshot is None
        if snapshot is None:  # learns every catalogue's; this command shows only what it asked
            history = window_history(ledger, now)
            snapshot = build_snapshot(ledger, now, history=history)
            left_out = _disagreements(clock_disagreements(history, now), catalogue)
    finally:
        ledger.close()
    tables = at_least(snapshot.tables, MIN_SAMPLES if min_samples is None else min_samples)
    rows = records(budget_rows(tables, catalogue=catalogue, label=label))
    info = snapshot.info
    days = round((info.built_at - info.since).total_seconds() / 86_400)
    if as_json:
        head: dict[str, Any] = {"built_at": info.built_at.isoformat(), "window_days": days}
        head.update(since=info.since.isoformat(), snapshot=info.id, dwells=info.dwells)
        head.update(built_now=built, clocks_disagree=left_out)
        print(json.dumps({**head, "rows": rows}))
    else:
        _print(rows, days, _built_line(info, now, built))
        if left_out:
            shown = "; ".join(left_out[:5]) + (
                f"; and {len(left_out) - 5} more" * (len(left_out) > 5)
            )
            print(f"kept out of learning, their clocks disagree (negative or over a day): {shown}")
    return 0


def _disagreements(frame: Any, catalogue: str | None) -> list[str]:
    """Each dwell left out of learning as ``night catalogue/label state (dwell)``."""
    from nightshift.config.names import shown_name

    if catalogue is not None:
        frame = frame[frame["catalogue"] == catalogue]
    return [
        f"{r.night} {shown_name(r.catalogue)}/{r.label} {r.state} ({r.dwell_s:+.0f}s)"
        for r in frame.itertuples()
    ]


def _built_line(info: SnapshotInfo, now: datetime, built: bool) -> str:
    """When the budgets shown were learned, and from how much."""
    from nightshift.config.durations import format_duration

    when = info.built_at.strftime("%Y-%m-%d %H:%M UTC")
    seconds = (now - info.built_at).total_seconds()
    if built:
        age = "built now"
    elif seconds < 60:
        age = "under a minute ago"
    else:
        age = f"{format_duration(seconds)} ago"
    line = f"budgets snapshot {info.id}, {when} ({age}), from {info.dwells:,} dwells"
    return line if built else f"{line}; --rebuild learns them again"


def _print(records: list[dict[str, Any]], days: int, built: str) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from nightshift.config.durations import format_duration

    console = Console()
    console.print(built, markup=False, highlight=False, soft_wrap=True)
    if not records:
        console.print(f"no dwell history in the last {days} days", markup=False)
        return

    def seconds(value: float | None) -> str:
        return "-" if value is None else format_duration(value)

    for catalogue in dict.fromkeys(r["catalogue"] for r in records):
        table = Table(title=f"budgets of {catalogue} (last {days} days)")
        for column in ("label", "state", "n", "p50", "p95", "watch at", "alert at", "source"):
            table.add_column(column)
        for r in (r for r in records if r["catalogue"] == catalogue):
            # Text, not markup: labels like `gen:a` or `[x]` are shown as they are
            table.add_row(
                Text(r["label"]),
                Text(r["state"]),
                str(r["n"]),
                *(seconds(r[k]) for k in ("p50", "p95", "watch_at", "alert_at")),
                Text(r["basis"]),
            )
        console.print(table)
