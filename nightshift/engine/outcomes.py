"""How each job of a night ended, and the night's verdict (pure)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from nightshift.backends.base import ExternalState, JobStatus
from nightshift.config.durations import job_time
from nightshift.engine.spend import SpendTotals
from nightshift.states import Outcome, is_final

__all__ = [
    "JobOutcome",
    "NightSummary",
    "Outcome",
    "Severity",
    "cancel_note",
    "is_final",
    "join",
    "join_details",
    "outcome_from_external",
    "outcome_from_record",
    "retry_line",
    "state_name",
    "status_detail",
    "verdict",
    "worst_first",
]


_OF_EXTERNAL = {
    ExternalState.SUCCEEDED: Outcome.SUCCEEDED,
    ExternalState.FAILED: Outcome.FAILED,
    ExternalState.CANCELLED: Outcome.CANCELLED,
}


def outcome_from_external(state: ExternalState) -> Outcome:
    """The outcome a final external state gives before results are looked at."""
    if not state.final:
        raise ValueError(f"{state.value} is not final: no outcome yet")
    return _OF_EXTERNAL[state]


def cancel_note(
    cancel: str | None, error: str | None, *, seen: bool = True
) -> tuple[str | None, bool]:
    """What a job's detail says of the cancel asked when the night gave up on it (None: none
    was asked), and whether the job may still be running at the service. ``seen``: a status
    answer showed the job; a cancel of one never shown is not known to have reached it (a
    Celery revoke sent while no worker is up is dropped, and the task runs when one starts)."""
    if cancel is None:
        return None, False
    if cancel == "accepted" and not seen:
        never = "cancel accepted, but no status answer ever showed the job: it may still run there"
        return never, True
    if cancel == "accepted":
        return "cancel accepted by the service", False
    if cancel == "unsupported":
        return f"not cancelled ({error}): may still be running at the service", True
    if cancel == "unanswered":
        return f"cancel asked, {error}: may still be running at the service", True
    return f"cancel failed: {error}; may still be running at the service", True


class Severity(StrEnum):
    """The night's verdict, with its process exit code."""

    OK = "ok"
    PARTIAL = "partial"
    FAILED = "failed"

    @property
    def exit_code(self) -> int:
        return {"ok": 0, "partial": 2, "failed": 1}[self.value]


@dataclass(frozen=True)
class JobOutcome:
    """One job's ending: state, duration, attempts and where to look."""

    label: str
    state: Outcome
    duration_s: float = 0.0
    attempts: int = 0
    external_id: str | None = None
    log_tail_path: str | None = None
    backend: str | None = None
    detail: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    kept: bool = False  # succeeded in an earlier run of the night; not run again tonight

    @property
    def ok(self) -> bool:
        return self.state is Outcome.SUCCEEDED

    @property
    def ran(self) -> bool:
        """Whether it ran tonight: not kept from an earlier run, not skipped, not never reached."""
        reached = self.attempts > 0 or self.external_id is not None
        return not self.kept and self.state is not Outcome.SKIPPED and reached

    def took(self) -> str:
        """Its time, one way on every page (``job_time``): ``12m``, ``42s``, ``<1s earlier``
        (kept), ``not run``; the exact figure is ``duration_s``."""
        took = job_time(self.duration_s)
        if self.kept:
            return f"{took} earlier"
        return took if self.ran else "not run"

    def named(self) -> str:
        """``audit:internal-links (12m, failed)``: the job, how long it took and how it ended."""
        return f"{self.label} ({self.took()}, {self.state.value})"

    def line(self) -> str:
        """``audit:internal-links (12m, failed)`` plus the detail when there is one."""
        return f"{self.named()}: {self.detail}" if self.detail else self.named()

    def to_json(self) -> dict[str, Any]:
        """The job as it appears in ``nightshift run --json``."""
        out = asdict(self)
        out["state"] = self.state.value
        out["duration_s"] = round(self.duration_s, 6)
        out["took"] = self.took()  # as every page says it
        if not out["data"]:
            del out["data"]
        return out


@dataclass(frozen=True)
class NightSummary:
    """The joined night."""

    severity: Severity
    jobs: list[JobOutcome]
    started_at: str | None = None
    finished_at: str | None = None
    rerun: bool = False  # a later run of the night (a retry): some jobs may be kept
    spend: SpendTotals | None = None  # tonight's spend on paid jobs (None: none, no cap)
    # when the night ran against its slot, and the earlier nights missed (None: on time)
    late: str | None = None
    # tonight's incidents (several jobs of one backend stalled together), one line each
    incidents: tuple[str, ...] = ()
    # what the ledger could not keep tonight (its disk full, its database gone), None: all
    ledger: str | None = None
    trace: str | None = None  # the night run's trace id (32 hex digits; None: untraced)
    trace_url: str | None = None  # where to open it (the catalogue's telemetry.trace_url)

    @property
    def exit_code(self) -> int:
        return self.severity.exit_code

    @property
    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for job in self.jobs:
            out[job.state.value] = out.get(job.state.value, 0) + 1
        return out

    @property
    def not_ok(self) -> list[JobOutcome]:
        return [job for job in self.jobs if not job.ok]

    def headline(self) -> str:
        """One line: ``partial: 10/12 succeeded (1 failed, 1 timeout)``."""
        ok = sum(job.ok for job in self.jobs)
        rest = ", ".join(f"{n} {s}" for s, n in sorted(self.counts.items()) if s != "succeeded")
        text = f"{self.severity.value}: {ok}/{len(self.jobs)} succeeded"
        return f"{text} ({rest})" if rest else text

    def message(self, worst: int = 3) -> str:
        """The headline, the retry's counts and the worst jobs: the flow run's message.

        ``partial: 5/8 succeeded (1 failed, 1 stuck_queued); worst: gen:broken (12m, failed), ...``
        """
        parts = [self.headline()]
        if (retry := retry_line(self)) is not None:
            parts.append(retry)
        if self.ledger:  # rows the morning's pages will lack: said with the verdict
            parts.append(f"ledger: {self.ledger}")
        bad = worst_first(self.not_ok)[:worst]
        if bad:
            more = len(self.not_ok) - len(bad)
            named = ", ".join(j.named() for j in bad)
            parts.append(f"worst: {named}" + (f" and {more} more" if more else ""))
        return "; ".join(parts)


# the worst first: what a reader must act on leads every list
SEVERITY_ORDER = (
    Outcome.FAILED,
    Outcome.TIMEOUT,
    Outcome.STUCK_QUEUED,
    Outcome.CANCELLED,
    Outcome.PARTIAL,
    Outcome.LEFT_RUNNING,
    Outcome.SKIPPED,
    Outcome.SUCCEEDED,
)
_RANK = {state: i for i, state in enumerate(SEVERITY_ORDER)}
# how Prefect shows each outcome (a state's name; its type stays Completed or Failed)
_STATE_NAMES = {
    Outcome.SUCCEEDED: "Completed",
    Outcome.PARTIAL: "Partial",
    Outcome.FAILED: "Failed",
    Outcome.CANCELLED: "Cancelled",
    Outcome.TIMEOUT: "TimedOut",
    Outcome.STUCK_QUEUED: "Stuck",
    Outcome.SKIPPED: "Skipped",
    Outcome.LEFT_RUNNING: "LeftRunning",
}
KEPT = "Kept"


def state_name(job: JobOutcome) -> str:
    """The job's state as Prefect shows it: ``Partial``, ``Stuck``, ``TimedOut``, ``Kept``..."""
    return KEPT if job.kept else _STATE_NAMES[job.state]


def worst_first(
    jobs: Iterable[JobOutcome], ratio: dict[str, float] | None = None
) -> list[JobOutcome]:
    """Jobs by how bad their ending was; among equals the slowest against its usual first."""
    ratios = ratio or {}
    return sorted(jobs, key=lambda j: (_RANK[j.state], -ratios.get(j.label, 0.0), j.label))


def retry_line(summary: NightSummary) -> str | None:
    """``retry: 2 re-ran (1 now ok, 1 still failing), 1 still skipped, 3 kept`` for a later run
    of the night, else None. Only jobs that ran count as re-ran: a skipped step never did."""
    if not summary.rerun:
        return None
    skipped = sum(j.state is Outcome.SKIPPED for j in summary.jobs if not j.kept)
    ran = [j for j in summary.jobs if not j.kept and j.state is not Outcome.SKIPPED]
    ok = sum(j.ok for j in ran)
    parts = [f"{len(ran)} re-ran"]
    if ran:
        parts[0] += f" ({ok} now ok, {len(ran) - ok} still failing)"
    if skipped:
        parts.append(f"{skipped} still skipped")
    if kept := sum(j.kept for j in summary.jobs):
        parts.append(f"{kept} kept")
    return "retry: " + ", ".join(parts)


def join(
    outcomes: list[JobOutcome], started_at: str | None = None, finished_at: str | None = None
) -> NightSummary:
    """The verdict: ok when all succeeded, failed when none produced anything, else partial.

    A ``partial`` job (a batch with some rows missing) produced most of its work: a night of
    partial jobs is partial, not failed.
    """
    return NightSummary(
        verdict(job.state for job in outcomes),
        list(outcomes),
        started_at,
        finished_at,
        rerun=any(job.kept for job in outcomes),
    )


def verdict(states: Iterable[str]) -> Severity:
    """The join's rule on job states: ok when all succeeded, failed when none produced
    anything (succeeded or partial), else partial. A state still on its way counts as not ok."""
    states = [str(state) for state in states]
    if all(state == Outcome.SUCCEEDED for state in states):
        return Severity.OK
    if not any(state in (Outcome.SUCCEEDED, Outcome.PARTIAL) for state in states):
        return Severity.FAILED
    return Severity.PARTIAL


def outcome_from_record(record: Any) -> JobOutcome:
    """A job that already succeeded tonight, as read back from its ledger record."""
    duration = 0.0
    if record.submitted_at and record.finished_at:
        duration = (record.finished_at - record.submitted_at).total_seconds()
    return JobOutcome(
        label=record.label,
        state=Outcome.SUCCEEDED,
        duration_s=duration,
        attempts=record.attempts,
        external_id=record.external_id,
        backend=record.backend,
        # its own detail (rows, cost) stays; the run that did it is said to be an earlier one
        detail=join_details("kept: succeeded earlier tonight", record.detail),
        data=record.data or {},
        kept=True,
    )


def status_detail(status: JobStatus | None) -> str | None:
    """What a final status says beyond its state: its detail, or a non-zero exit code."""
    if status is None:
        return None
    if status.detail:
        return status.detail
    if status.exit_code not in (None, 0):
        return f"exit code {status.exit_code}"
    return None


def join_details(*parts: str | None) -> str | None:
    """Details joined with "; ", or None when there are none."""
    text = "; ".join(p for p in parts if p)
    return text or None
