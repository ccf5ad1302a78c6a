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
from nightshift.engine.events import JobChanged, Logger, PollFailed, Publisher, Since, Sink
from nightshift.engine.job_run import JobRun
from nightshift.engine.ledger_sink import LedgerSink
from nightshift.engine.outcomes import JobOutcome
from nightshift.engine.spend import SpendCap
from nightshift.engine.stopping import NightStop
from nightshift.engine.watcher import Watcher
from nightshift.store.ledger import Ledger

if TYPE_CHECKING:
    from nightshift.budgets.lookup import Budgets
    from nightshift.engine.dwell_watch import DwellWatch

__all__ = ["NightContext", "utcnow"]

RUNNING = ExternalState.RUNNING.value


def utcnow() -> datetime:
    """The wall clock: an aware UTC datetime."""
    return datetime.now(UTC)


@dataclass
class NightContext:
    """Everything the jobs of one night share. Built by the flow, used from task threads."""

    catalogue: Catalogue
    night: str
    run_id: str
    run_dir: Path
    backends: dict[str, Backend]
    ledger: Ledger
    watcher: Watcher
    admission: Admission
    deadline_at: float  # on the watcher's clock
    priorities: dict[str, int] = field(default_factory=dict)
    # who hears the night's events besides the ledger (always the first sink)
    sinks: list[Sink] = field(default_factory=list)
    logger: Logger | None = None  # where a failing sink is reported
    wall: Callable[[], datetime] = utcnow
    # backends that could not be built, with the reason their jobs fail
    broken: dict[str, str] = field(default_factory=dict)
    # every job's outcome once it has one, whichever path ended it
    outcomes: dict[str, JobOutcome] = field(default_factory=dict)
    # each job's run: its attempt, its external id, when its end was seen (``job_run``)
    runs: dict[str, JobRun] = field(default_factory=dict)
    # holds a server-side slot of a capped backend while its job is in flight; (backend, timeout)
    hold: Callable[[str, float], AbstractContextManager[object]] = lambda _b, _t: nullcontext()
    # why no more jobs may be submitted (the night's lease was lost), or None
    stop_reason: Callable[[], str | None] = lambda: None
    # False once another night took this one's lease: its ledger rows are no longer ours
    owns_night: Callable[[], bool] = lambda: True
    dwell: DwellWatch | None = None  # tonight's dwell watch (None: no budgets to watch with)
    # asked when the night is interrupted: no more submits, jobs in flight are left running
    stop: NightStop = field(default_factory=NightStop)
    # why `nightshift cancel` asked to cancel a job of this night, if it did; (label, fresh=)
    cancel_reason: Callable[..., str | None] = lambda _label, fresh=False: None
    budgets: Budgets | None = None  # tonight's learned budgets (learned timeouts), if any
    # tonight's spend on paid jobs, checked before each paid submit (no paid jobs: counts none)
    spend: SpendCap = field(default_factory=lambda: SpendCap(None, {}))
    events: Publisher = field(init=False)
    # the one writer of the night's ledger rows (and its reads): orders, retries, lease rule
    records: LedgerSink = field(init=False)
    _since: Since = field(init=False, default_factory=Since)

    def __post_init__(self) -> None:
        # the ledger is a sink like the others; it keeps the lease rule (`owns_night`) itself
        self.records = LedgerSink(self.ledger, self.run_id, owns_night=lambda: self.owns_night())
        self.events = Publisher([self.records, *self.sinks], logger=self.logger)

    def job_run(self, label: str) -> JobRun:
        """The job's run tonight, made the first time it is asked for."""
        run = self.runs.get(label)
        if run is None:  # setdefault: two threads asking at once get the same one
            run = self.runs.setdefault(label, JobRun(label, self.catalogue.job(label)))
        return run

    def mark(
        self, label: str, state: str, external_id: str | None = None, at: datetime | None = None
    ) -> None:
        """Publish a job's state change (the ledger and the live table are sinks)."""
        run = self.job_run(label)
        if external_id is not None:
            run.external_id = external_id
        at = at or self.wall()
        self.events.publish(
            JobChanged(
                night=self.night,
                catalogue=self.catalogue.key,
                label=label,
                backend=run.job.backend,
                attempt=run.attempt,
                external_id=external_id or run.external_id,
                state=str(state),
                at=at,
                dwell_s=self._since.enter(label, str(state), at),
            )
        )

    def seen(self, label: str, state: ExternalState, status: JobStatus | None = None) -> None:
        """The watcher saw a job change state, dated when the backend says it began (else now).
        A final state is recorded by the runner only, once it knows the true outcome (a
        SUCCEEDED batch with missing rows is ``partial``)."""
        since = status.since if status is not None else None
        if state.final:
            started = status.started_at if status is not None else None
            current = self._since.current(label)
            if started is not None and (current is None or current[0] != RUNNING):
                # no poll saw it running: the backend says when it did
                self.mark(label, RUNNING, at=self._began(label, started))
            seen = self._began(label, since)
            run = self.job_run(label)
            if run.final_seen is None:
                run.final_seen = seen
            return
        self.mark(label, state.value, at=self._began(label, since))

    def _began(self, label: str, reported: datetime | None) -> datetime:
        """When a job's new state began: as reported, kept between its previous transition
        and now (the backend's clock may disagree with ours); now if nothing was reported."""
        now = self.wall()
        if reported is None:
            return now
        previous = self._since.current(label)
        at = min(reported, now)
        return at if previous is None else max(at, previous[1])

    def poll_failed(self, label: str, error: BaseException | None) -> None:
        """The watcher could not read a job's status (it may try again)."""
        text = f"{type(error).__name__}: {error}" if error is not None else "no status"
        backend = self.catalogue.job(label).backend
        key = self.catalogue.key
        self.events.publish(PollFailed(self.night, key, label, backend, text, self.wall()))
