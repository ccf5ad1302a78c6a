"""What the jobs of one night share: the night's parts, and how its events are published."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from nightshift.backends.base import Backend, ExternalState, JobStatus
from nightshift.config.catalogue import Catalogue
from nightshift.engine.admission import Admission
from nightshift.engine.events import Logger, Publisher, Sink
from nightshift.engine.holds import SubmitHolds
from nightshift.engine.incidents import IncidentDesk
from nightshift.engine.job_run import JobRun
from nightshift.engine.ledger_sink import LedgerSink
from nightshift.engine.marks import JobMarks
from nightshift.engine.outcomes import JobOutcome
from nightshift.engine.spend import SpendCap
from nightshift.engine.stopping import NightStop
from nightshift.engine.trace_ids import NightTrace
from nightshift.engine.watcher import Watcher
from nightshift.loop import NightLoop
from nightshift.store.ledger import Ledger

if TYPE_CHECKING:
    from nightshift.budgets.lookup import Budgets

__all__ = ["NightContext", "NightRules", "night_records", "utcnow"]


def utcnow() -> datetime:
    """The wall clock: an aware UTC datetime."""
    return datetime.now(UTC)


def _not_cancelled(_label: str, *, fresh: bool = False) -> str | None:
    return None


@dataclass(frozen=True)
class NightRules:
    """What a night may still do, asked before each step that needs it; made once, from the
    night's parts (``open_night``).

    ``stop_reason()``: why no more jobs may be submitted (the night's lease lost, its watcher
    gone), or None. ``owns_night()``: False once another night took this one's lease (its ledger
    writer and dwell watch were told at their making). ``cancel_reason(label, fresh=)``: why
    `nightshift cancel` asked to cancel the job, if it did (``fresh``: read the requests first).
    ``hold(backend, timeout)``: the server-side slot a capped backend's job holds in flight;
    ``slot(backend, timeout)``: the same, awaited on the night's loop (None: ``hold`` on a start
    thread), where the night's slot holder can.
    """

    stop_reason: Callable[[], str | None] = lambda: None
    owns_night: Callable[[], bool] = lambda: True
    cancel_reason: Callable[..., str | None] = _not_cancelled
    hold: Callable[[str, float], AbstractContextManager[object]] = lambda _b, _t: nullcontext()
    slot: Callable[[str, float], Awaitable[AbstractContextManager[object]]] | None = None


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
    # what the night may still do: submit, write its rows, run a job, hold a server slot
    rules: NightRules = field(default_factory=lambda: NightRules())
    # asked when the night is interrupted: no more submits, jobs in flight are left running
    stop: NightStop = field(default_factory=NightStop)
    budgets: Budgets | None = None  # tonight's learned budgets (learned timeouts), if any
    # tonight's spend on paid jobs, checked before each paid submit (no paid jobs: counts none)
    spend: SpendCap = field(default_factory=lambda: SpendCap(None, {}))
    # several jobs of one backend stalled together (the dwell watch decides), and the submits
    # such an incident holds
    incidents: IncidentDesk = field(default_factory=IncidentDesk)
    holds: SubmitHolds = field(default_factory=SubmitHolds)
    # the night run's trace (None: not traced): each try it begins hands its job a traceparent
    trace: NightTrace | None = None

    @property
    def trace_hex(self) -> str | None:
        """The night run's trace id, as the ledger keeps it (None: not traced)."""
        return self.trace.hex if self.trace is not None else None

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
    loop: NightLoop,
) -> tuple[LedgerSink, JobMarks]:
    """The night's ledger writer and its marks, publishing to the ledger first, then ``sinks``,
    on the night's ``loop``; a night that lost its lease (``owns_night`` False) writes no more
    rows."""
    records = LedgerSink(ledger, run_id, owns_night=owns_night, loop=loop)
    events = Publisher([records, *sinks], logger=logger, loop=loop)
    return records, JobMarks(catalogue, night, events, wall, loop)
