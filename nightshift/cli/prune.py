"""``nightshift prune``: delete the history older than the window and say what went."""

from __future__ import annotations

import argparse
from datetime import datetime
from pathlib import Path
from typing import Any

from nightshift.cli import exits
from nightshift.cli.args import add_command, catalogue_flag
from nightshift.cli.exits import say

__all__ = ["PRUNE_EXIT_CODES", "register", "run_prune"]

PRUNE_EXIT_CODES = exits.epilog(
    0,
    4,
    6,
    64,
    c0="pruned (or, with --dry-run, listed)",
    c64="bad command line (usage), e.g. a bad --keep",
)


def register(sub: Any) -> None:
    """Add ``prune`` to the subcommands."""
    prune = add_command(
        sub,
        "prune",
        "delete history older than --keep (ledger rows, manifests, command-job folders)",
        _command,
        PRUNE_EXIT_CODES,
    )
    prune.add_argument("--keep", default="90d", help="the window kept (default 90d)")
    catalogue_flag(prune, "only this catalogue's ledger rows, and its manifests", default=None)
    prune.add_argument("--dry-run", action="store_true", help="say what would go, delete nothing")


def _command(args: argparse.Namespace) -> int:
    from nightshift.config.durations import parse_duration
    from nightshift.config.settings import load_settings
    from nightshift.store.retention import retention_scope

    try:
        keep_s = parse_duration(args.keep)
    except ValueError as exc:
        say(f"nightshift prune: --keep: {exc}")
        return exits.USAGE

    def prune() -> int:
        key, outputs = retention_scope(args.catalogue)
        settings = load_settings()
        return run_prune(
            settings.ledger_url(), settings.state_dir, keep_s, key, outputs, dry_run=args.dry_run
        )

    return exits.guarded(prune)


def run_prune(
    url: str,
    state_dir: Path,
    keep_s: float,
    catalogue: str | None = None,
    outputs: list[Path] | None = None,
    *,
    dry_run: bool = False,
    now: datetime | None = None,
) -> int:
    """Prune, print one line per kind and return 0; database errors propagate."""
    from nightshift.store.retention import prune

    report = prune(
        url,
        state_dir,
        keep_s,
        catalogue=catalogue,
        outputs=outputs,
        dry_run=dry_run,
        now=now,
    )
    verb = "would remove" if dry_run else "removed"
    print(f"{verb} {report.transitions} ledger transitions before {report.cutoff.isoformat()}")
    print(f"{verb} {report.jobs} ledger job rows")
    print(f"{verb} {report.forecasts} forecasts of nights")
    print(f"{verb} {report.missed_nights} nights named missed")
    if report.manifests is None:
        print("skipped Gemini submit manifests (give --catalogue to prune them)")
    else:
        print(f"{verb} {report.manifests} Gemini submit manifests ({report.manifest_bytes} bytes)")
    print(f"{verb} {report.folders} command-job folders ({report.folder_bytes} bytes)")
    return 0
