"""A night's runs and each job's tries tonight, from what the night keeps (pure).

A night may run more than once: the UI's Retry runs the same flow run again (its id, the
ledger rows' ``run_id``, stays the same), ``nightshift run`` again for the same night makes a
new one. Each run leaves its summary in a run folder of its own (``summary.json``: its start,
its end, every job's state, attempts and reason); the ledger keeps every transition, dated and
with its attempt, but no reason (a resubmit clears the job row's). So the runs are the
summaries', plus any stretch of ledger rows no summary covers (a run killed before it wrote
one, or whose folder a later run overwrote), dated by its first and last row; a job's tries
are its ledger rows that ended an attempt, each with the reason its run's summary gave.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from nightshift.config.durations import format_duration
from nightshift.engine.outcomes import NightSummary
from nightshift.states import FINAL, JobState
from nightshift.store.ledger import Transition

__all__ = [
    "LEDGER",
    "SUMMARY",
    "RunRecord",
    "RunSpan",
    "Try",
    "night_runs",
    "record_from_json",
    "record_of",
    "runs_line",
    "tries_line",
    "try_words",
]

SUMMARY, LEDGER = "summary", "ledger"  # where a run's span was read
# a summary's times are stamped to the second: rows up to a second either side are its run's
SLACK = timedelta(seconds=1)
# the rows that end a try: an outcome, or lost (failed tonight, kept live for a rerun)
_ENDS = frozenset(str(s) for s in FINAL) | {str(JobState.LOST)}


@dataclass(frozen=True)
class RunRecord:
    """What one run of the night said of itself: its ``summary.json`` (or the summary at hand)."""

    started_at: str
    finished_at: str | None
    jobs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # label -> its fields


@dataclass(frozen=True)
class RunSpan:
    """One run of the night: from its summary, or as the ledger's rows date it."""

    started_at: str
    finished_at: str | None
    seen_in: str = SUMMARY  # SUMMARY | LEDGER


@dataclass(frozen=True)
class Try:
    """How one try of a job ended tonight, with the reason its run gave."""

    attempt: int | None  # None: a row written before attempts were kept
    state: str
    at: str  # ISO, UTC
    reason: str | None = None
    log_tail_path: str | None = None


def record_of(summary: NightSummary) -> RunRecord | None:
    """The run at hand as a record; None when it has no start."""
    if not summary.started_at:
        return None
    return RunRecord(
        summary.started_at, summary.finished_at, {job.label: job.to_json() for job in summary.jobs}
    )


def record_from_json(data: Mapping[str, Any]) -> RunRecord | None:
    """A run folder's ``summary.json`` as a record; None when it is not one."""
    started = data.get("started_at")
    jobs = data.get("jobs")
    if not isinstance(started, str) or not isinstance(jobs, list) or _time(started) is None:
        return None
    finished = data.get("finished_at")
    by_label = {j["label"]: j for j in jobs if isinstance(j, dict) and "label" in j}
    return RunRecord(started, finished if isinstance(finished, str) else None, by_label)


def night_runs(
    records: Iterable[RunRecord], rows: Sequence[Transition]
) -> tuple[list[RunSpan], dict[str, list[Try]]]:
    """The night's runs, oldest first, and each job's tries, oldest first.

    ``records`` are the runs' summaries (the run at hand first: it wins over a file of the same
    start); ``rows`` the night's ledger rows in the order they were written.
    """
    runs: dict[str, RunRecord] = {}
    for record in records:
        if _time(record.started_at) is not None:
            runs.setdefault(record.started_at, record)
    ordered = sorted(runs.values(), key=lambda r: _time(r.started_at) or datetime.min)
    spans = [RunSpan(r.started_at, r.finished_at) for r in ordered]
    spans += _uncovered(ordered, rows)
    spans.sort(key=lambda s: _time(s.started_at) or datetime.min)
    return spans, _tries(ordered, rows)


def _uncovered(records: list[RunRecord], rows: Sequence[Transition]) -> list[RunSpan]:
    """Runs no summary tells of: the ledger rows outside every summary's span, in stretches of
    one ``run_id`` that no summarised run interrupts."""
    starts = [t for r in records if (t := _time(r.started_at)) is not None]
    stretches: list[tuple[str, datetime, datetime]] = []  # run_id, first, last
    open_ = False
    for row in sorted(rows, key=lambda r: (r.at, r.id)):
        if _covering(records, row.at) is not None:
            open_ = False
            continue
        last = stretches[-1] if stretches else None
        joins = (
            open_
            and last is not None
            and last[0] == row.run_id
            and not any(last[2] < s <= row.at for s in starts)
        )
        if joins and last is not None:
            stretches[-1] = (last[0], last[1], row.at)
        else:
            stretches.append((row.run_id, row.at, row.at))
        open_ = True
    return [RunSpan(_iso(first), _iso(last), LEDGER) for _, first, last in stretches]


def _tries(records: list[RunRecord], rows: Sequence[Transition]) -> dict[str, list[Try]]:
    """Each job's tries: its rows that ended one, each with its run's reason; a try a summary
    tells of that left no such row (a night that ended before it wrote one) is added."""
    tries: dict[str, list[tuple[datetime, int | None, Try]]] = {}
    for row in rows:
        if row.to_state not in _ENDS:
            continue
        index = _covering(records, row.at)
        said = _failure(records[index].jobs.get(row.label)) if index is not None else None
        reason, tail = (said.get("detail"), said.get("log_tail_path")) if said else (None, None)
        if row.to_state == JobState.SUCCEEDED:
            reason = tail = None
        found = Try(row.attempt, row.to_state, _iso(row.at), reason, tail)
        tries.setdefault(row.label, []).append((row.at, index, found))
    for index, record in enumerate(records):
        at = _time(record.finished_at) or _time(record.started_at)
        for label, job in record.jobs.items():
            said = _failure(job)
            if at is None or said is None or said.get("state") not in _ENDS:
                continue
            attempts = said.get("attempts")
            if any(
                run == index or (t.attempt, t.state) == (attempts, said["state"])
                for _, run, t in tries.get(label, [])
            ):
                continue  # its row is there (the ledger writes a repeated state once)
            found = Try(
                attempts if isinstance(attempts, int) else None,
                str(said["state"]),
                _iso(at),
                said.get("detail"),
                said.get("log_tail_path"),
            )
            tries.setdefault(label, []).append((at, index, found))
    return {
        label: [t for _, _, t in sorted(found, key=lambda each: each[0])]
        for label, found in tries.items()
    }


def _failure(job: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """A summary's job when it did not succeed in that run (kept ones did, earlier)."""
    if job is None or job.get("kept") or job.get("state") == JobState.SUCCEEDED:
        return None
    return job


def _covering(records: list[RunRecord], at: datetime) -> int | None:
    """The index of the latest-starting summarised run whose span holds ``at``."""
    hit = None
    for index, record in enumerate(records):
        start = _time(record.started_at)
        end = _time(record.finished_at)
        if start is None or at < start - SLACK:
            continue
        if end is None or at <= end + SLACK:
            hit = index
    return hit


def _time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        return None
    return value.astimezone(UTC) if value.tzinfo is not None else None


def _iso(at: datetime) -> str:
    return at.isoformat(timespec="seconds")


# how a try's ending reads in a sentence
_SAID = {
    JobState.SUCCEEDED: "ok",
    JobState.TIMEOUT: "timed out",
    JobState.STUCK_QUEUED: "stuck in the queue",
}


def runs_line(night: str, runs: Sequence[Mapping[str, Any]]) -> str:
    """``Ran 15:12:29-15:12:45 UTC (16s); retry 15:17:22-15:17:29 (7s)``: times alone on the
    night's date, else with dates."""
    parts: list[str] = []
    for run in runs:
        start, end = _time(run.get("started_at")), _time(run.get("finished_at"))
        if start is None:
            continue
        first = not parts
        dated = any(t.date().isoformat() != night for t in (start, end) if t is not None)
        shown = "%Y-%m-%d %H:%M:%S" if dated else "%H:%M:%S"
        zone = " UTC" if first else ""
        if end is None:
            parts.append(
                f"Started {start:{shown}}{zone}, no end recorded"
                if first
                else f"retry from {start:{shown}}, no end recorded"
            )
            continue
        took = format_duration((end - start).total_seconds())
        if run.get("seen_in") == LEDGER:
            took += ", dated by its ledger rows: no summary kept"
        dash = " - " if dated else "-"
        word = "Ran" if first else "retry"
        parts.append(f"{word} {start:{shown}}{dash}{end:{shown}}{zone} ({took})")
    return "; ".join(parts)


def tries_line(night: str, tries: Iterable[Mapping[str, Any]]) -> str:
    """``failed on attempt 1 at 15:12, ok on attempt 2``."""
    return ", ".join(try_words(night, t) for t in tries)


def try_words(night: str, one: Mapping[str, Any]) -> str:
    """One try: ``failed on attempt 1 at 15:12``, ``ok on attempt 2``, ``skipped at 15:12``."""
    state = str(one.get("state"))
    words = _SAID.get(JobState(state), state) if state in _ENDS else state
    attempt = one.get("attempt")
    if state != JobState.SKIPPED and isinstance(attempt, int) and attempt > 0:
        words += f" on attempt {attempt}"
    at = _time(one.get("at"))
    if state != JobState.SUCCEEDED and at is not None:
        words += f" at {at:%H:%M}" if at.date().isoformat() == night else f" at {at:%Y-%m-%d %H:%M}"
    return words
