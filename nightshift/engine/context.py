"""What the jobs of one night share: the night's parts, and how its events are published."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from nightshift.backends.base import Backend, ExternalState, JobStatus
from nightshift.config.catalogue import Catalogue
from nightshift.engine.admission import Admission
from nightshift.engine.events import Logger, Publisher, Sink
from nightshift.engine.job_run import JobRun
from nightshift.engine.ledger_sink import LedgerSink
from nightshift.engine.marks import JobMarks
from nightshift.engine.outcomes import JobOutcome
from nightshift.engine.spend import SpendCap
from nightshift.engine.stopping import NightStop
from nightshift.engine.watcher import Watcher
from nightshift.loop import NightLoop
from nightshift.store.ledger import Ledger

if TYPE_CHECKING:
    from nightshift.budgets.lookup import Budgets

__all__ = ["NightContext", "night_records", "utcnow"]


def utcnow() -> datetime:
    """The wall clock: an aware UTC datetime."""
    return datetime.now(UTC)


@dataclass
class NightContext:
    """Everything the jobs of one night share, made once, in order (``open_night``): its
    records and marks come first (the watcher reports to them), then the watcher, then this."""

    catalogue: Catalogue
    night: str
    run_id: str
    run_dir: Path
    backends: dict[str, Backend]
    ledger: Ledger
    watcher: Watcher
    admission: Admission
    deadline_at: float  # on the watcher's clock
    # the one writer of the night's ledger rows (and its reads): orders, retries, lease rule
    records: LedgerSink
    # each job's run and state changes, published on the night's events (``engine/marks.py``)
    marks: JobMarks
    priorities: dict[str, int] = field(default_factory=dict)
    logger: Logger | None = None  # where a failing sink is reported
    wall: Callable[[], datetime] = utcnow
    # backends that could not be built, with the reason their jobs fail
    broken: dict[str, str] = field(default_factory=dict)
    # every job's outcome once it has one, whichever path ended it
    outcomes: dict[str, JobOutcome] = field(default_factory=dict)
    # holds a server-side slot of a capped backend while its job is in flight; (backend, timeout)
    hold: Callable[[str, float], AbstractContextManager[object]] = lambda _b, _t: nullcontext()
    # why no more jobs may be submitted (the night's lease was lost), or None
    stop_reason: Callable[[], str | None] = lambda: None
    # False once another night took this one's lease (its ledger writer was told at its making)
    owns_night: Callable[[], bool] = lambda: True
    # asked when the night is interrupted: no more submits, jobs in flight are left running
    stop: NightStop = field(default_factory=NightStop)
    # why `nightshift cancel` asked to cancel a job of this night, if it did; (label, fresh=)
    cancel_reason: Callable[..., str | None] = lambda _label, fresh=False: None
    budgets: Budgets | None = None  # tonight's learned budgets (learned timeouts), if any
    # tonight's spend on paid jobs, checked before each paid submit (no paid jobs: counts none)
    spend: SpendCap = field(default_factory=lambda: SpendCap(None, {}))

    @property
    def loop(self) -> NightLoop:
        """The night's one event loop (its watcher's): its time, and its blocking pools."""
        return self.watcher.loop

    @property
    def events(self) -> Publisher:
        """The night's publisher: the ledger's sink first, then the others."""
        return self.marks.events

    @property
    def runs(self) -> dict[str, JobRun]:
        """Each job's run tonight (``job_run``)."""
        return self.marks.runs

    def job_run(self, label: str) -> JobRun:
        """The job's run tonight, made the first time it is asked for."""
        return self.marks.job_run(label)

    def mark(
        self, label: str, state: str, external_id: str | None = None, at: datetime | None = None
    ) -> None:
        """Publish a job's state change (the ledger and the live table are sinks)."""
        self.marks.mark(label, state, external_id, at)

    def seen(self, label: str, state: ExternalState, status: JobStatus | None = None) -> None:
        """The watcher saw a job change state (``JobMarks.seen``)."""
        self.marks.seen(label, state, status)


def night_records(
    catalogue: Catalogue,
    night: str,
    ledger: Ledger,
    run_id: str,
    sinks: list[Sink],
    *,
    logger: Logger | None = None,
    wall: Callable[[], datetime] = utcnow,
    owns_night: Callable[[], bool] = lambda: True,
) -> tuple[LedgerSink, JobMarks]:
    """The night's ledger writer and its marks, publishing to the ledger first, then ``sinks``;
    a night that lost its lease (``owns_night`` False) writes no more rows."""
    records = LedgerSink(ledger, run_id, owns_night=owns_night)
    events = Publisher([records, *sinks], logger=logger)
    return records, JobMarks(catalogue, night, events, wall)
