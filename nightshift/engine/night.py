"""One place that builds a night's parts, and the night around them (no Prefect here).

``build_parts`` makes the real parts from the catalogue and settings; a test makes a
``NightParts`` of its own (a scripted backend, a fake clock) and opens the same night with it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypedDict, Unpack, runtime_checkable

from nightshift.backends import build_backends, close_backends
from nightshift.backends.base import Backend
from nightshift.budgets.current import current_budgets
from nightshift.config.catalogue import Catalogue
from nightshift.config.limits import BackendLimit
from nightshift.engine.admission import Admission
from nightshift.engine.alerts import AlertSink, LogAlertSink
from nightshift.engine.cancelling import CancelWatch
from nightshift.engine.context import NightContext, NightRules, night_records, utcnow
from nightshift.engine.dwell_watch import BudgetLoader, incident_desk, watch_dwells
from nightshift.engine.events import Logger, NightFinished, Sink
from nightshift.engine.holds import SubmitHolds
from nightshift.engine.incidents import IncidentDesk
from nightshift.engine.marks import JobMarks
from nightshift.engine.outcomes import JobOutcome, NightSummary, Outcome, join
from nightshift.engine.plan import HISTORY_DAYS, Plan
from nightshift.engine.poll_hints import ledger_poll_hints
from nightshift.engine.runner import end_job, stopped_outcome
from nightshift.engine.spend import SpendCap, expected_costs
from nightshift.engine.stopping import NightStop
from nightshift.engine.trace_ids import NightTrace
from nightshift.engine.watcher import Watcher
from nightshift.loop import NightLoop
from nightshift.states import LIVE, JobState
from nightshift.store.cancel_requests import CancelRequests
from nightshift.store.ledger import Ledger
from nightshift.usual import Usual

if TYPE_CHECKING:
    from nightshift.config.settings import Settings

# the deadline's cancels write their final rows within this; a ledger still failing then is let go
DEADLINE_GRACE_S = 30.0

__all__ = [
    "GivenParts",
    "Hold",
    "NightId",
    "NightParts",
    "build_parts",
    "finish_night",
    "night_spend",
    "no_hold",
    "open_night",
    "watcher_stopped",
]

# holds a server-side slot of a capped backend while its job is in flight: (backend, timeout)
Hold = Callable[[str, float], AbstractContextManager[object]]


@runtime_checkable
class AwaitsSlots(Protocol):
    """A ``Hold`` whose slot a job awaits on the night's loop (``orchestration/limits.py``)."""

    async def slot(self, backend: str, timeout_s: float) -> AbstractContextManager[object]:
        """The slot, what gives it back; TimeoutError when none comes in time."""
        ...


@runtime_checkable
class HandsOn(Protocol):
    """A ``Hold`` whose slots the night hands on itself (``orchestration/leases.py``)."""

    def hand_on(self, backend: str) -> None:
        """A job of ``backend`` was seen to end: its slot goes to the next job."""

    def close(self) -> None:
        """The night is over: release every slot still held."""


# label -> usual duration from submit to end (seconds: one number), for the watcher's schedule
PollHints = Callable[[Catalogue, Ledger, datetime, Logger | None], Mapping[str, Usual | float]]


def no_hold(_backend: str, _timeout: float) -> AbstractContextManager[object]:
    """No server-side slots: the night's own admission caps are the only ones."""
    return nullcontext()


@dataclass
class NightParts:
    """What a night is made of. The night closes its backends when it ends; its loop is its
    maker's to close."""

    backends: dict[str, Backend]
    ledger: Ledger
    admission: Admission
    # the night's one event loop (a flow's outlives the night: its progress is posted on its
    # chores at the end)
    loop: NightLoop
    sinks: list[Sink] = field(default_factory=list)  # the ledger's sink is added by the night
    clock: Callable[[], float] = time.monotonic  # the watcher's (timers, deadline, backoff)
    wall: Callable[[], datetime] = utcnow  # event times, ledger rows, durations
    hold: Hold = no_hold
    broken: dict[str, str] = field(default_factory=dict)  # backend -> why it was not built
    logger: Logger | None = None  # where a failing sink is reported
    # tonight's learned budgets (None: no dwell watch), and where its alerts go (Slack, later)
    budgets: BudgetLoader | None = current_budgets
    alerts: AlertSink = field(default_factory=LogAlertSink)
    poll_hints: PollHints | None = ledger_poll_hints  # None: jobs are polled on backoff only
    # how often `nightshift cancel`'s requests are read (a job seen cancelled reads them at once)
    cancel_poll_s: float | None = 5.0
    # why no more jobs may be submitted, asked with the night's watcher (None: once it stopped)
    stop_reason: Callable[[Watcher], str | None] | None = None
    # False once the night lost its lease: then it writes no ledger rows
    owns_night: Callable[[], bool] = lambda: True
    # tonight's incidents (None: the night makes one from its catalogue); a sink that asks it
    # (which job's end an incident tells) is handed the same
    incidents: IncidentDesk | None = None
    # the night run's trace (None: untraced): its tries hand their jobs a traceparent
    trace: NightTrace | None = None


class GivenParts(TypedDict, total=False):
    """What a caller gives a night beside what ``build_parts`` makes: one build, no part
    patched after it (``NightParts`` says what each is)."""

    sinks: list[Sink]
    budgets: BudgetLoader | None
    alerts: AlertSink
    stop_reason: Callable[[Watcher], str | None] | None
    owns_night: Callable[[], bool]
    incidents: IncidentDesk | None
    trace: NightTrace | None


@dataclass(frozen=True)
class NightId:
    """Which night runs: its date, this run of it, and where the run keeps its files."""

    night: str
    run_id: str
    run_dir: Path


def build_parts(
    catalogue: Catalogue,
    settings: Settings,
    ledger: Ledger,
    *,
    logger: Logger | None = None,
    slots: Callable[[dict[str, BackendLimit]], Hold] = lambda _limits: no_hold,
    admission: Callable[..., Admission] = Admission,
    loop: NightLoop,
    **given: Unpack[GivenParts],
) -> NightParts:
    """The real parts: backends from settings, the admission and the slot holder for the limits,
    and what the caller ``given`` (its sinks beside the ledger's, its alerts, its rules...).

    ``slots`` makes the server-side slot holder (the flow hands in Prefect's); when it fails
    the backends built so far are closed and ``NightEndedEarly`` says why.
    """
    caps = catalogue.caps
    limits: dict[str, BackendLimit] = {str(b): lim for b, lim in catalogue.limits.items()}
    broken: dict[str, str] = {}
    backends = build_backends(catalogue, settings, errors=broken)
    if logger is not None:
        for reason in broken.values():
            logger.warning("%s", reason)
    try:
        hold = slots(limits)
    except Exception as exc:  # the Prefect API refused or is unreachable
        from nightshift.errors import NightEndedEarly

        close_backends(backends)
        raise NightEndedEarly(
            f"the Prefect concurrency limits for {sorted(limits)} could not be set: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    return NightParts(
        backends=backends,
        ledger=ledger,
        admission=admission(catalogue.defaults.stagger, caps, rates=catalogue.rates),
        hold=hold,
        broken=broken,
        logger=logger,
        loop=loop,
        **given,
    )


@contextmanager
def open_night(
    catalogue: Catalogue,
    parts: NightParts,
    plan: Plan,
    night: NightId,
    *,
    outcomes: dict[str, JobOutcome] | None = None,
    stop: NightStop | None = None,
) -> Iterator[NightContext]:
    """The night's context, its watcher on the night's loop; on the way out all is closed.

    Its rules come from the parts (``NightRules``: a ``stop_reason`` defaults to the watcher
    stopped). ``outcomes`` receives each job's outcome as it comes (the caller's, for an early
    end). ``stop`` interrupts the night: no more submits, jobs in flight left running unwatched.
    With learned budgets, each job's time in its state is watched (``engine/dwell_watch.py``).
    """
    with ExitStack() as cleanup:  # whatever fails below, everything built so far is closed
        cleanup.callback(close_backends, parts.backends)
        # the night's time: its watch, streams, dwell ticks, cancel reads, its jobs
        loop = parts.loop
        parts.admission.on(loop)  # the admission's state is the loop's from here on
        if isinstance(parts.hold, HandsOn):
            cleanup.callback(parts.hold.close)
        priorities = {label: i for i, label in enumerate(plan.labels)}
        records, marks = night_records(
            catalogue, night.night, parts.ledger, night.run_id, list(parts.sinks),
            logger=parts.logger, wall=parts.wall, owns_night=parts.owns_night, loop=loop,
        )  # fmt: skip
        # on the way out, once the watch and the timers stopped: every event heard, then every
        # row written (the ledger's writer is a task of the loop, which outlives the night)
        cleanup.callback(records.flush)
        cleanup.callback(marks.events.settle)
        watcher = _watcher(catalogue, parts, marks, priorities, loop)
        cleanup.callback(watcher.stop)
        cancels = _cancel_watch(catalogue, parts, night.night, watcher)
        if cancels is not None:
            cleanup.callback(cancels.start().stop)
        ctx = NightContext(
            catalogue=catalogue,
            night=night.night,
            run_id=night.run_id,
            run_dir=night.run_dir,
            backends=parts.backends,
            ledger=parts.ledger,
            watcher=watcher,
            admission=parts.admission,
            deadline_at=watcher.now() + catalogue.defaults.deadline,
            records=records,
            marks=marks,
            priorities=priorities,
            logger=parts.logger,
            wall=parts.wall,
            broken=dict(parts.broken),
            outcomes=outcomes if outcomes is not None else {},
            rules=NightRules(
                stop_reason=lambda: (parts.stop_reason or watcher_stopped)(watcher),
                owns_night=parts.owns_night,
                cancel_reason=cancels.reason if cancels is not None else _no_cancel,
                hold=parts.hold,
                slot=parts.hold.slot if isinstance(parts.hold, AwaitsSlots) else None,
            ),
            stop=stop if stop is not None else NightStop(),
            spend=night_spend(catalogue, parts.ledger, night.night, parts.wall()),
            incidents=parts.incidents or incident_desk(catalogue),
            holds=SubmitHolds(watcher.now, watcher.loop),
            trace=parts.trace,
        )
        ctx.spend.on(loop)  # the spend account is the loop's: a try's start and end run there
        # on a stop: waits for a turn or a slot end at once, every watched job is let go
        for listener in (
            ctx.admission.interrupt,
            ctx.holds.interrupt,
            getattr(parts.hold, "interrupt", None),
        ):
            if listener is not None:
                cleanup.callback(ctx.stop.on_request(listener))
        cleanup.callback(ctx.stop.on_request(watcher.detach))
        # a ledger that cannot write is waited for until the night is stopped or past its
        # deadline: then its writes give up, and the night ends saying what was not written
        cleanup.callback(ctx.stop.on_request(lambda: records.abandon("the night was stopped")))
        past = ctx.loop.submit(_abandon_at_deadline(ctx))
        cleanup.callback(past.cancel)
        if (dwell := watch_dwells(ctx, parts.budgets, parts.alerts)) is not None:
            cleanup.callback(dwell.stop)
        _announce_capped(ctx, plan)
        yield ctx


async def _abandon_at_deadline(ctx: NightContext) -> None:
    """At the night's deadline (and a grace for its cancels' final rows), stop waiting for a
    ledger that does not answer or cannot write."""
    while (left := ctx.deadline_at + DEADLINE_GRACE_S - ctx.watcher.now()) > 0:
        await asyncio.sleep(min(left, 60.0))  # a fake clock in tests moves; look again
    ctx.records.abandon("the night's deadline passed")


def _announce_capped(ctx: NightContext, plan: Plan) -> None:
    """With a cap, jobs start longest-expected first: announce them to the admission in that
    order (a chain's steps rank after every mapped job: they wait for their turn)."""
    for backend in ctx.catalogue.caps:
        jobs = [x for x in plan.independent if ctx.catalogue.job(x).backend == backend]
        ctx.admission.expect(backend, [ctx.priorities[x] for x in jobs])


def _watcher(
    catalogue: Catalogue,
    parts: NightParts,
    marks: JobMarks,
    priorities: Mapping[str, int],
    loop: NightLoop,
) -> Watcher:
    """The night's watcher, reporting to its marks; a job seen final hands its slot on."""

    def hand_on(label: str) -> None:  # on the loop: the admission is the loop's
        backend = catalogue.job(label).backend
        priority = priorities.get(label, 0)
        if parts.admission.holds(backend, priority) and isinstance(parts.hold, HandsOn):
            parts.hold.hand_on(backend)  # first, so the lease waits for the next job
        parts.admission.free(backend, priority)

    def ended(label: str) -> None:  # seen final (told on a status thread): its slots go on now
        loop.soon(hand_on, label)

    hints = (
        {}
        if parts.poll_hints is None
        else parts.poll_hints(catalogue, parts.ledger, parts.wall(), parts.logger)
    )
    return Watcher(
        on_change=marks.seen,
        clock=parts.clock,
        on_error=marks.poll_failed,
        expected=hints.get,
        on_final=ended,
        # a listing that hangs holds its jobs half a poll cap at most: then they go singly
        listing_deadline=catalogue.defaults.poll.max / 2,
        loop=loop,
    )


def _cancel_watch(
    catalogue: Catalogue, parts: NightParts, night: str, watcher: Watcher
) -> CancelWatch | None:
    """What `nightshift cancel` asks of the night, read every ``cancel_poll_s`` (None: never)."""
    if parts.cancel_poll_s is None:
        return None
    requests = CancelRequests(parts.ledger.engine, catalogue.key)
    return CancelWatch(
        requests,
        night,
        watcher.look_now,
        since=parts.wall(),
        loop=watcher.loop,
        every=parts.cancel_poll_s,
    )


def _no_cancel(_label: str, fresh: bool = False) -> str | None:
    return None


def night_spend(catalogue: Catalogue, ledger: Ledger, night: str, now: datetime) -> SpendCap:
    """Tonight's spend account: the paid jobs' expected costs (their last 30 days), and what
    earlier runs of this night spent and committed (read only when the catalogue has a price)."""
    labels = [j.label for j in catalogue.jobs]
    since = now - timedelta(days=HISTORY_DAYS)
    caps = {j.label: j.spend.usd for j in catalogue.jobs if j.spend is not None}
    cap = catalogue.defaults.spend
    learned = ledger.job_costs(labels, since)
    expected = expected_costs(catalogue, learned, labels)
    if not expected and cap is None:
        return SpendCap(None, {})
    spent: dict[str, float] = {}
    committed: dict[str, float] = {}
    for record in ledger.jobs_of(night):
        spent[record.label] = record.spent_usd or 0.0
        if record.committed_usd is None:
            continue
        if record.state in LIVE or record.state == JobState.SUBMITTING:
            committed[record.label] = record.committed_usd
        else:  # a try that ended unsettled (a crash): what it was expected to cost is counted
            spent[record.label] += record.committed_usd
    return SpendCap(
        None if cap is None else cap.usd, expected, caps, spent=spent, committed=committed
    )


def finish_night(ctx: NightContext, plan: Plan, started_at: str) -> NightSummary:
    """Join the jobs' outcomes (``ctx.outcomes``, where each job's end put it, whichever path
    ended it; a job with none failed) and tell the sinks the verdict; the verdict is made on
    the night's loop, whose state it reads (its outcomes, its spend, its incidents)."""
    summary = ctx.loop.run(_verdict(ctx, plan, started_at))
    ctx.events.settle()  # heard before the night's end is reported
    ctx.records.flush()  # a job ended here (none came back) written too
    return summary


async def _verdict(ctx: NightContext, plan: Plan, started_at: str) -> NightSummary:
    outcomes = ctx.outcomes
    jobs = [outcomes[x] if x in outcomes else await _no_outcome(ctx, x) for x in plan.labels]
    finished = ctx.wall()
    summary = join(jobs, started_at, finished.isoformat(timespec="seconds"))
    if ctx.spend.cap_usd is not None or ctx.spend.priced:
        summary = replace(summary, spend=ctx.spend.totals())
    if incidents := ctx.incidents.incidents:
        summary = replace(summary, incidents=tuple(i.line() for i in incidents))
    if (problem := ctx.records.write_problem) is not None and ctx.records.unwritten:
        said = f"{ctx.records.unwritten} writes not kept ({problem})"
        summary = replace(summary, ledger=said)
    if ctx.trace is not None:
        url = ctx.catalogue.telemetry.url_of(ctx.trace.hex)
        summary = replace(summary, trace=ctx.trace.hex, trace_url=url)
    ctx.events.publish(NightFinished(ctx.night, ctx.catalogue.key, summary, finished))
    return summary


async def _no_outcome(ctx: NightContext, label: str) -> JobOutcome:
    """A job whose outcome never came back: let go by a stop, else failed."""
    if ctx.stop.requested:  # a job the stop caught between two steps
        return await stopped_outcome(ctx, label)
    return await end_job(ctx, label, Outcome.FAILED, "no outcome recorded (internal error)")


def watcher_stopped(watcher: Watcher) -> str | None:
    """Why no more jobs may be submitted when the night's watcher is gone, or None."""
    if watcher.stopped:
        return "not submitted: the night's watcher stopped (see the flow run's logs)"
    return None
