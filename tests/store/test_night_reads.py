"""A night's jobs as `nightshift status` and `nightshift cancel` read them, on SQLite and
PostgreSQL: a job in flight is in the state its try was last seen in, not its row's `queued`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from nightshift.store.ledger import Ledger
from nightshift.store.night_reads import night_jobs

NIGHT = "2026-12-07"
T0 = datetime(2026, 12, 7, 1, 0, tzinfo=UTC)


def _seen(ledger: Ledger, label: str, states: list[str], attempt: int = 1) -> None:
    for i, state in enumerate(states):
        at = T0 + timedelta(minutes=i)
        ledger.transition(NIGHT, "run", label, "cli", f"{label}-1", state, at, attempt)


def test_a_job_in_flight_is_in_the_state_it_was_last_seen_in(db_url: str) -> None:
    ledger = Ledger(db_url, "cat")
    try:
        # as a night writes them: the row at the submit (queued) and at the end, transitions
        # as the job is seen
        for label in ("running", "queued", "done", "lost", "retried", "racing", "again"):
            ledger.record_submit(NIGHT, label, "cli", f"{label}-1", 1, at=T0)
        _seen(ledger, "running", ["submitted", "queued", "running"])
        _seen(ledger, "queued", ["submitted", "queued"])
        _seen(ledger, "done", ["submitted", "running", "succeeded"])
        ledger.record_state(NIGHT, "done", "succeeded", finished_at=T0 + timedelta(minutes=3))
        _seen(ledger, "lost", ["submitted", "running", "lost"])
        ledger.record_state(NIGHT, "lost", "lost")
        # the first try ran and failed; the second is submitted and not seen yet
        _seen(ledger, "retried", ["submitted", "running", "failed"])
        ledger.record_submit(NIGHT, "retried", "cli", "retried-2", 2, at=T0 + timedelta(hours=1))

        # its id's row written, its `submitted` transition not yet (a night killed then):
        # still in flight with its id, a target of `nightshift cancel`
        _seen(ledger, "racing", ["submitting"])
        # seen running on its first try; its second submitted, not seen yet
        _seen(ledger, "again", ["submitted", "running"])
        ledger.record_submit(NIGHT, "again", "cli", "again-2", 2, at=T0 + timedelta(hours=1))

        states = {job.label: job.state for job in night_jobs(ledger.engine, "cat", NIGHT)}
    finally:
        ledger.close()
    assert states == {
        "running": "running",
        "queued": "queued",
        "done": "succeeded",
        "lost": "lost",
        "retried": "queued",  # its row: the failed try's transitions are another attempt's
        "racing": "queued",  # never back to `submitting`: not further along
        "again": "queued",  # the first try's `running` is another attempt's
    }
