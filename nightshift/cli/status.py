"""``nightshift status``: a night's jobs as the ledger has them, and who holds its lease now.

Exit 0 with the jobs; 4 for an unknown catalogue or a night with no jobs recorded; 6 when the
ledger's database cannot be read (the caller says so in one line).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

# the engine and the ledger are imported when a command runs: `nightshift --help` stays light
if TYPE_CHECKING:
    from nightshift.config.catalogue import Catalogue
    from nightshift.store.ledger import Ledger
    from nightshift.store.night_reads import NightJob

__all__ = [
    "STATUS_EXIT_CODES",
    "LeaseHolder",
    "NoSuchNight",
    "lease_holder",
    "register",
    "show_status",
]

STATUS_EXIT_CODES = """\
exit codes:
  0   the night's jobs were shown
  4   unknown catalogue, a bad --night, or no jobs recorded for that night
  6   the ledger database could not be read (NIGHTSHIFT_DATABASE_URL)
"""


def register(sub: Any) -> None:
    """Add ``status`` to the subcommands."""
    from nightshift.cli.args import add_command, catalogue_flag

    status = add_command(
        sub,
        "status",
        "a night's jobs from the ledger, and whether a night holds its lease now",
        _command,
        STATUS_EXIT_CODES,
    )
    catalogue_flag(status)
    status.add_argument("--night", help="the night's date (default: today)")
    status.add_argument("--json", action="store_true", help="print one object")


def _command(args: Any) -> int:
    from nightshift.cli.night_args import run_for_night

    return run_for_night(
        args,
        lambda settings, catalogue, night, _only: show_status(
            settings.ledger_url(), catalogue, night, as_json=args.json
        ),
    )


class NoSuchNight(Exception):
    """The ledger has no jobs of that catalogue and night."""


@dataclass(frozen=True)
class LeaseHolder:
    """The night that holds a catalogue's lease now, as its owner string says."""

    owner: str
    host: str
    pid: int | None
    flow_run: str | None
    expires_at: datetime
    gone: bool = False  # a process of this machine that no longer runs (kill -9)


def lease_holder(ledger: Ledger, key: str, now: datetime | None = None) -> LeaseHolder | None:
    """Who holds the catalogue's lease now (an expired lease is held by nobody)."""
    from nightshift.store.db import db_now
    from nightshift.store.lease import Lease
    from nightshift.store.lease_owner import gone_here, parse_owner

    held = Lease(ledger.engine, key).holder()
    # on the clock the lease expires by: the database's, not this host's
    if held is None or held[1] <= db_now(ledger.engine, lambda: now or datetime.now(UTC)):
        return None
    owner, expires_at = held
    found = parse_owner(owner)
    gone = gone_here(owner)
    return LeaseHolder(owner, found.host, found.pid, found.flow_run, expires_at, gone)


def show_status(url: str, catalogue: Catalogue, night: str, *, as_json: bool) -> int:
    """Print the night's jobs and its lease; raises NoSuchNight when it has no jobs."""
    from nightshift.engine.plan import HISTORY_DAYS
    from nightshift.store.ledger import Ledger
    from nightshift.store.night_reads import night_jobs
    from nightshift.store.night_traces import NightTraces

    ledger = Ledger(url, catalogue.key)
    try:
        jobs = night_jobs(ledger.engine, catalogue.key, night)
        missed = missed_nights(ledger, catalogue.key, night)
        if not jobs and not any(m["night"] == night for m in missed):
            raise NoSuchNight(f"no jobs of {catalogue.key!r} recorded for the night {night}")
        now = datetime.now(UTC)
        since = now - timedelta(days=HISTORY_DAYS)
        usual = ledger.expected_durations([j.label for j in jobs], since)
        holder = lease_holder(ledger, catalogue.key, now)
        # each traced run of the night, latest last: its trace in the team's tracing
        traces = [t.trace_id for t in NightTraces(ledger.engine, catalogue.key).of(night)]
    finally:
        ledger.close()
    rows = [_row(job, usual.get(job.label)) for job in jobs]
    if as_json:
        lease = None if holder is None else _holder_json(holder)
        out = {"catalogue": catalogue.key, "night": night, "lease": lease, "jobs": rows}
        print(json.dumps({**out, "missed": missed, "traces": traces}))
        return 0
    _print(catalogue.key, night, rows, holder)
    if traces:
        link = catalogue.telemetry.url_of(traces[-1])
        earlier = f" ({len(traces) - 1} earlier run(s) traced too)" if len(traces) > 1 else ""
        print(f"trace {traces[-1]}{earlier}" + (f": {link}" if link else ""))
    _print_missed(missed, night, catalogue.path)
    return 0


def missed_nights(ledger: Ledger, key: str, night: str) -> list[dict[str, Any]]:
    """The nights named missed in the month up to ``night``, and what became of each since:
    ``missed`` (never run), or its verdict once run (a backfill)."""
    from nightshift.orchestration.missed_nights import missed_fates

    return [
        {
            "night": m.night,
            "scheduled_at": _iso(m.scheduled_at),
            "named_at": _iso(m.named_at),
            "named_by": m.named_by,
            "reason": m.reason,
            "became": became,
        }
        for m, became in missed_fates(ledger.engine, key, night)
    ]


def _print_missed(missed: list[dict[str, Any]], night: str, path: Any) -> None:
    if not missed:
        return
    for m in missed:
        became = "never run" if m["became"] == "missed" else f"run since: {m['became']}"
        head = "this night was" if m["night"] == night else f"night {m['night']}"
        print(f"{head} missed ({became}); named {m['named_at']} by {m['named_by']}: {m['reason']}")
    left = [m["night"] for m in missed if m["became"] == "missed"]
    if left:
        from nightshift.engine.missed import backfill_command

        print(f"to run them: {backfill_command(None if path is None else str(path), left)}")


def _row(job: NightJob, usual_s: float | None) -> dict[str, Any]:
    from nightshift.states import LIVE as LIVE_STATES

    in_flight = job.state in LIVE_STATES
    expected = None
    if in_flight and usual_s is not None and job.submitted_at is not None:
        expected = job.submitted_at + timedelta(seconds=usual_s)
    return {
        "label": job.label,
        "backend": job.backend,
        "state": job.state,
        "in_flight": in_flight and job.external_id is not None,
        "since": _iso(job.since),
        "attempts": job.attempts,
        "external_id": job.external_id,
        "expected_end": _iso(expected),
        "detail": job.detail,
    }


_LABEL_MAX = 40  # a longer label wraps in a narrow terminal rather than squeeze every other column


def _clock(stamp: str | None, night: str) -> str:
    """``22:10:05`` on the night's own date, ``12-07 02:10:05`` on another ("" for none)."""
    if not stamp:
        return ""
    at = datetime.fromisoformat(stamp)
    day = "" if at.date().isoformat() == night else f"{at:%m-%d} "
    return f"{day}{at:%H:%M:%S}"


def _holder_json(holder: LeaseHolder) -> dict[str, Any]:
    return {
        "owner": holder.owner,
        "host": holder.host,
        "pid": holder.pid,
        "flow_run": holder.flow_run,
        "gone": holder.gone,
        "expires_at": _iso(holder.expires_at),
    }


def _iso(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat(timespec="seconds")


def _print(key: str, night: str, rows: list[dict[str, Any]], holder: LeaseHolder | None) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    # times of the night's own date as a clock, others with their day; every column but the
    # service's job id keeps its widest value whole (a label over _LABEL_MAX wraps), the id folds
    shown = [
        {
            "job": row["label"],
            "state": row["state"],
            "since": _clock(row["since"], night),
            "tries": str(row["attempts"]),
            "id": row["external_id"] or "",  # the service's job id
            "expected end": _clock(row["expected_end"], night),
        }
        for row in rows
    ]
    table = Table(title=f"{key}: night {night} (times UTC)", box=box.SIMPLE_HEAD, pad_edge=False)
    for column in shown[0] if shown else ():
        if column == "expected end" and not any(r[column] for r in shown):
            continue  # nothing in flight with a usual duration: no column for it
        widest = max(len(column), *(len(r[column]) for r in shown))
        if column == "id":
            table.add_column(column, overflow="fold")
        else:
            limit = min(widest, _LABEL_MAX)
            table.add_column(column, min_width=limit, no_wrap=widest <= _LABEL_MAX)
    for r in shown:
        cells = [Text(r["job"], overflow="fold"), Text(r["state"]), r["since"], r["tries"]]
        cells.append(Text(r["id"], overflow="fold"))
        if len(table.columns) > len(cells):
            cells.append(r["expected end"])
        table.add_row(*cells)
    console = Console()
    if rows:  # a missed night has none: what became of it follows
        console.print(table)
    if holder is None:
        line = "lease: free (no night of this catalogue is running)"
    else:
        run = f", flow run {holder.flow_run}" if holder.flow_run else ""
        line = f"lease: held by host {holder.host}, pid {holder.pid}{run}"
        if holder.gone:
            line = (
                f"lease: left by host {holder.host}, pid {holder.pid}{run}, whose process is "
                "gone: the next run takes it over at once"
            )
    console.print(line, markup=False, highlight=False)
