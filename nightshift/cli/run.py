"""``nightshift run``: run one night of a catalogue in this process, with a live table."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nightshift.cli import exits
from nightshift.cli.args import add_command, catalogue_flag
from nightshift.cli.exits import say

if TYPE_CHECKING:
    from rich.console import Console

    from nightshift.cli.own_server import OwnServer
    from nightshift.orchestration.prepared_night import PreparedNight

__all__ = ["RUN_EXIT_CODES", "register", "run_catalogue"]

STARTING = "starting a temporary Prefect server (about 15 s; set PREFECT_API_URL to use yours)"

RUN_EXIT_CODES = exits.epilog(
    0, 1, 2, 3, 4, 5, 6, 64, c4="invalid catalogue, batch input, --only or --night"
) + (
    "  130 stopped by Ctrl-C (143: by SIGTERM); jobs in flight keep running, a rerun re-attaches\n"
)


def register(sub: Any) -> None:
    """Add ``run`` to the subcommands."""
    run = add_command(
        sub,
        "run",
        "run the nightly flow locally (exit 0 ok, 2 partial, 1 failed)",
        _command,
        RUN_EXIT_CODES,
    )
    catalogue_flag(run)
    run.add_argument("--only", nargs="+", metavar="LABEL", help="run only these jobs")
    run.add_argument("--night", help="the night's date (default: today); reruns reuse it")
    run.add_argument("--json", action="store_true", help="print one summary object at the end")


def _command(args: argparse.Namespace) -> int:
    return run_catalogue(args.catalogue, only=args.only, as_json=args.json, night=args.night)


def run_catalogue(
    path: str, *, only: list[str] | None = None, as_json: bool = False, night: str | None = None
) -> int:
    """Run one night of ``path`` in this process and return the exit code."""
    from rich.console import Console

    from nightshift.errors import CatalogueError, NightArgumentError
    from nightshift.orchestration.prepared_night import prepare_night

    err = Console(stderr=True)
    try:
        # the ledger and the lease first too: a clear line now, not a traceback from the flow
        prepared = prepare_night(path, only=only, night=night)
    except (CatalogueError, NightArgumentError) as exc:
        say(str(exc))
        return exits.BAD_CATALOGUE
    except exits.DATABASE_ERRORS as exc:
        from nightshift.config.settings import load_settings

        say(exits.ledger_problem(load_settings().ledger_url(), exc))
        return exits.NO_LEDGER
    try:
        return _run_prepared(prepared, str(path), as_json, err)
    finally:
        prepared.close()  # the night closes it at its end; here for a night that never ran


def _run_prepared(prepared: PreparedNight, path: str, as_json: bool, err: Console) -> int:
    """The prepared night, checked against the lease and the Prefect API, run with a live table."""
    if (refusal := _check_lease(prepared)) is not None:
        code, message = refusal
        say(message)
        return code
    from nightshift.cli.stopping import leaving_on_ctrl_c

    # until the night's own stop handling takes over (``run_stoppable``)
    with leaving_on_ctrl_c(), _temporary_server(prepared) as server:
        return _run_connected(prepared, path, as_json, err, server)


@contextmanager
def _temporary_server(prepared: PreparedNight) -> Iterator[OwnServer | None]:
    """The night's temporary Prefect server, started now, before Prefect is imported (its start
    up beside ours), where Prefect would start its own; None where it would not (an API named,
    its ephemeral mode off) or Prefect is imported already."""
    from nightshift.cli.own_server import OwnServer, temporary_server_wanted

    if "prefect" in sys.modules or not temporary_server_wanted(os.environ, Path.cwd()):
        yield None
        return
    with OwnServer(prepared.run_path / "prefect-server.log") as server:
        yield server


def _run_connected(
    prepared: PreparedNight, path: str, as_json: bool, err: Console, server: OwnServer | None
) -> int:
    """The night, once the Prefect API answers (``server``: our temporary one, starting up
    while the night's modules are imported)."""
    from nightshift.cli.live import LiveTable
    from nightshift.cli.stopping import exit_now, prefect_api_alive, run_stoppable, stop_line
    from nightshift.engine.stopping import NightStop
    from nightshift.flows.nightly import nightly

    if (problem := _connect(err.is_terminal, server)) is not None:
        say(problem)
        return exits.NO_PREFECT
    run_dir, settings, catalogue = prepared.run_path, prepared.settings, prepared.catalogue
    table = LiveTable(prepared.listed_labels(), err)
    stop = NightStop()  # Ctrl-C and SIGTERM reach the night through this

    def night_run() -> Any:
        return nightly(
            catalog=path,
            only=prepared.only,
            night=prepared.night,
            run_dir=str(run_dir),
            live=table.on_event,
            stop=stop,
            prepared=prepared,
            return_state=True,
        )

    with table.shown(enabled=err.is_terminal):
        ran = run_stoppable(night_run, stop, prefect_api_alive)
    code = _after_night(ran.state, run_dir, catalogue, settings, as_json)
    if stop.requested and (run_dir / "summary.json").exists():
        summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
        say(stop_line(summary.get("left_running", []), path, prepared.night))
    if ran.exit_early:  # interrupted, or the Prefect API is gone: don't wait on it
        exit_now(code, drain=ran.api_alive)
    return code


def _after_night(state: Any, run_dir: Path, catalogue: Any, settings: Any, as_json: bool) -> int:
    """The night's exit code, its summary printed (or one line saying why there is none)."""
    from nightshift.errors import CatalogueError, LockHeldError, NightshiftError

    summary_file = run_dir / "summary.json"
    error: Any = state.result(raise_on_failure=False) if state is not None else None
    if isinstance(error, LockHeldError):  # a refused night leaves a summary too: say it in a line
        say(f"refused: {error}")
        return exits.LOCKED
    if not summary_file.exists():
        if isinstance(error, CatalogueError):
            say(str(error))
            return exits.BAD_CATALOGUE
        if exits.is_database_error(error):
            say(exits.ledger_problem(settings.ledger_url(), error))
            return exits.NO_LEDGER
        if isinstance(error, NightshiftError):
            say(f"error: {error}")
            return exits.FAILED
        say(f"the night crashed: {state.message if state is not None else 'no state'}")
        return exits.FAILED
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
        say(
            f"slack: {len(waiting)} message(s) wait in the outbox ({reason}); "
            "`nightshift notify --flush` delivers them"
        )


def _check_lease(prepared: PreparedNight) -> tuple[int, str] | None:
    """Look at the catalogue's lease: (exit code, one line), or None when the night may run."""
    from nightshift.errors import LockHeldError
    from nightshift.store.lease_owner import described

    try:
        holder = prepared.lease_holder()
    except exits.DATABASE_ERRORS as exc:
        return exits.NO_LEDGER, exits.ledger_problem(prepared.settings.ledger_url(), exc)
    if holder is None:
        return None
    owner, left = holder
    held = LockHeldError(prepared.catalogue.key, owner, left, who=described(owner))
    return exits.LOCKED, f"refused: {held}"


def _connect(verbose: bool, server: OwnServer | None) -> str | None:
    """Reach the Prefect API now: our temporary ``server`` once it answers, else the configured
    one (or Prefect's own temporary server, started now, when Prefect found none to name).

    Done before the live table is drawn: the server's start-up would otherwise break it up.
    Returns what went wrong, in one line, or None.
    """
    if server is not None:
        if verbose:
            say(STARTING)
        return server.ready()
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL

    from nightshift.cli.reaper import install

    url = PREFECT_API_URL.value()
    if not url:
        install()  # the temporary server must not outlive us, even after a kill -9
        if verbose:
            say(STARTING)
    try:
        with get_client(sync_client=True) as client:
            error = client.api_healthcheck()
    except Exception as exc:  # the temporary server failed to start, a bad URL...
        error = exc
    if error is None:
        return None
    where = url or "Prefect's temporary server"
    return f"cannot reach the Prefect API at {where}: {type(error).__name__}: {error}"


def _print_summary(summary: dict[str, Any], run_dir: Path) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from nightshift.config.durations import format_duration
    from nightshift.states import JobState

    table = Table(title=f"night: {summary['severity']}")
    for column in ("job", "state", "duration", "attempts", "detail"):
        table.add_column(column)
    for job in summary["jobs"]:
        style = "green" if job["state"] == JobState.SUCCEEDED else "red"
        # Text, not markup: a label like `gen:a:` or a detail with `[x]` is shown as it is
        table.add_row(
            Text(job["label"]),
            Text(job["state"], style=style),
            job.get("took") or format_duration(job["duration_s"]),  # as every page says it
            str(job["attempts"]),
            Text((job.get("detail") or "")[:80]),
        )
    console = Console()
    console.print(table)
    if (spend := summary.get("spend")) is not None:  # what tonight's paid jobs cost, its cap
        console.print(spend["line"], markup=False, highlight=False)
    console.print(f"summary and log tails: {run_dir}", markup=False, highlight=False)
