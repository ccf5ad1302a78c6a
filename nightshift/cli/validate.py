"""``nightshift validate``: check a catalogue and its batch inputs without running anything;
``--json`` prints the jobs as they finally are, ``--show LABEL`` one job with its fields' lines."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from nightshift.cli import exits
from nightshift.cli.args import add_command, catalogue_flag
from nightshift.cli.exits import say

if TYPE_CHECKING:
    from nightshift.config.catalogue import Catalogue

__all__ = ["VALIDATE_EXIT_CODES", "register", "validate"]

VALIDATE_EXIT_CODES = exits.epilog(
    0,
    4,
    64,
    c0="the catalogue is valid (warnings on stderr)",
    c4="invalid catalogue or batch input, or no job with the --show label (problems on stderr)",
)


def register(sub: Any) -> None:
    """Add ``validate`` to the subcommands."""
    check = add_command(
        sub,
        "validate",
        "validate a catalogue and its batch inputs (exit 4 when invalid)",
        _command,
        VALIDATE_EXIT_CODES,
    )
    catalogue_flag(check)
    check.add_argument(
        "--show",
        metavar="LABEL",
        help="print one job as it finally is (merges, apis:, ${NAME} values), each field's line",
    )
    check.add_argument(
        "--strict",
        action="store_true",
        help="a command whose program or script is not here is an error, not a warning",
    )
    check.add_argument(
        "--json",
        action="store_true",
        help='print one object: {"catalogue", "ok", "jobs"} (with --show: that job\'s fields)',
    )


def _command(args: argparse.Namespace) -> int:
    return validate(args.catalogue, show=args.show, as_json=args.json, strict=args.strict)


def validate(
    path: str, *, show: str | None = None, as_json: bool = False, strict: bool = False
) -> int:
    """Print ``FILE: ok, N jobs`` (and any warnings) and return 0, or the problems and 4.

    ``as_json``: stdout is one object, ``{"catalogue", "ok": true, "jobs"}`` or ``{"ok": false,
    "problems"}`` (the problems on stderr as well). ``show``: that job, field by field."""
    from nightshift.backends.gemini.batch_input import catalogue_input_problems
    from nightshift.config.command_check import command_problems
    from nightshift.config.loader import load_catalogue
    from nightshift.config.timers import schedule_warnings
    from nightshift.errors import CatalogueError

    try:
        catalogue = load_catalogue(path)
    except CatalogueError as exc:
        print(exc, file=sys.stderr)
        return _refused(as_json, [p.render(exc.path) for p in exc.problems])
    errors, notes = catalogue_input_problems(catalogue)
    missing = [p.render(path) for p in command_problems(catalogue)]
    for line in [*schedule_warnings(catalogue), *notes]:
        say(line)
    for line in [] if strict else missing:  # the worker may differ: a warning unless --strict
        say(f"warning: {line}")
    if strict and missing:
        say("invalid catalogue (--strict):\n  " + "\n  ".join(missing))
        return _refused(as_json, missing)
    if errors:
        say("invalid batch input:\n  " + "\n  ".join(errors))
        return _refused(as_json, errors)
    if show is not None:
        return _show(catalogue, path, show, as_json)
    if as_json:
        from nightshift.cli.job_view import job_json

        jobs = [job_json(job) for job in catalogue.jobs]
        print(json.dumps({"catalogue": path, "ok": True, "jobs": jobs}))
    else:
        print(f"{path}: ok, {len(catalogue.jobs)} jobs")
    return exits.OK


def _show(catalogue: Catalogue, path: str, label: str, as_json: bool) -> int:
    """One job, each field with its line and where a value not written in it came from."""
    from nightshift.cli.job_view import job_fields, render_fields, unknown_label

    try:
        fields = job_fields(catalogue, label)
    except KeyError:
        line = unknown_label(label, path, [job.label for job in catalogue.jobs])
        say(line)
        return _refused(as_json, [line])
    if as_json:
        shown = {name: view.as_json() for name, view in fields.items()}
        print(json.dumps({"label": label, "fields": shown}))
    else:
        print("\n".join(render_fields(fields)))
    return exits.OK


def _refused(as_json: bool, problems: list[str]) -> int:
    """Exit 4; with --json, stdout says so too (the problems are on stderr already)."""
    if as_json:
        print(json.dumps({"ok": False, "problems": problems}))
    return exits.BAD_CATALOGUE
