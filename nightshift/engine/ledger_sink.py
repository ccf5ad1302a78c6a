"""The ledger as the night sees it: the one writer of its rows, and the reads it needs.

Every job state change (a night event) becomes a transition row, and the runner's job records
(submit, state) go through here too: one queue, written in order. The lease rule lives here
once: a night that lost its lease writes nothing (the rows belong to the night holding it).

The writer is one task of the night's loop with its queue: it takes what has queued while the
last commit ran and commits it as one batch on a thread of its own (group commit), so changes
made side by side (the start pool's submits, the watcher's answers, the finish pool's outcomes)
share one transaction instead of queueing for the database one by one. A write asked from
another thread (a job's record) is written before its writer goes on (a reader sees it at once);
a change published on the loop is queued, and the night's end waits for the queue (``flush``).

A database that does not answer (connection refused, cut, locked) costs time, not rows: a write
is tried again with backoff until the database answers or the night's lease is gone; so is a
read. A retried transition first re-reads the job's last row, since a commit whose answer was
lost may have gone through: every transition is written once. A database that cannot write (its
disk full) is named at once, in one ERROR line, and tried again the same way; a night that is
stopped or past its deadline stops waiting for it (``abandon``): what could not be written is
counted and said (``write_problem``), and the night ends.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import sqlalchemy as sa

from nightshift.backoff import Backoff
from nightshift.engine.events import JobChanged, NightEvent
from nightshift.errors import NightshiftError
from nightshift.loop import NightLoop
from nightshift.states import JobState
from nightshift.store.ledger import JobRecord, Ledger, TransitionRow

if TYPE_CHECKING:
    from nightshift.engine.job_run import JobRun

__all__ = ["OUTAGE_BACKOFF", "LedgerSink", "LedgerUnavailable", "unanswered"]

T = TypeVar("T")
log = logging.getLogger("nightshift.ledger")

# a database that does not answer is asked again: soon at first, then every 5 s
OUTAGE_BACKOFF = Backoff(initial=0.2, factor=2.0, max=5.0)
# SQLite's OperationalErrors that are about the statement, not about the database answering
_NOT_AN_OUTAGE = ("no such table", "no such column", "syntax error", "has no column")
# what a database says when it has no room to write (SQLite, PostgreSQL, the OS)
_FULL = ("disk is full", "no space left", "could not extend file", "quota exceeded")

# a queued write: a transition row, or a job record write (a call on the Ledger)
_Write = tuple[str, Any]
_FLUSH_S = 30.0  # what the night's end waits for the queue, at most (an outage: until abandoned)


class LedgerUnavailable(NightshiftError):
    """The ledger did not answer and the night no longer holds its lease: no more waiting."""


def unanswered(exc: BaseException) -> bool:
    """Whether ``exc`` says the database did not answer (as opposed to refusing a statement)."""
    if isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated:
        return True
    if isinstance(exc, sa.exc.InterfaceError):
        return True
    if isinstance(exc, sa.exc.OperationalError):
        return not any(text in str(exc.orig).lower() for text in _NOT_AN_OUTAGE)
    return False


class LedgerSink:
    """Writes each ``JobChanged`` and job record to the ledger while the night owns its lease."""

    def __init__(
        self,
        ledger: Ledger,
        run_id: str,
        owns_night: Callable[[], bool] = lambda: True,
        *,
        loop: NightLoop,
        backoff: Backoff = OUTAGE_BACKOFF,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self._ledger = ledger
        self._run_id = run_id
        self._owns_night = owns_night
        self._backoff = backoff
        self._sleep = sleep or self._wait
        self._loop = loop  # the writer is a task of the night's loop: its queue is the loop's
        self._queue: list[tuple[_Write, asyncio.Future[None]]] = []
        self._queued_now = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self._last: asyncio.Future[None] | None = None  # the latest write queued: done last
        self._queued = 0  # writes handed to the writer
        self._given_up = threading.Event()  # set by ``abandon``: a retry's wait ends at once
        self.outages = 0  # writes or reads that met a database not answering (for the logs)
        self._abandoned: str | None = None  # why the night stopped waiting for the database
        self.unwritten = 0  # writes given up on after ``abandon``
        self.write_problem: str | None = None  # the database's own words, once it could not

    # -- writes ------------------------------------------------------------------------
    def __call__(self, event: NightEvent) -> None:
        if isinstance(event, JobChanged):
            row: TransitionRow = (
                event.night,
                self._run_id,
                event.label,
                event.backend,
                event.external_id,
                event.state,
                event.at,
                event.attempt,
            )
            self._write(("transition", row))

    async def record_submit(
        self,
        night: str,
        run: JobRun,
        external_id: str | None,
        *,
        state: str = JobState.QUEUED,
        committed_usd: float | None = None,
        trace: tuple[str | None, str | None] = (None, None),
    ) -> None:
        """On the loop: ``Ledger.record_submit`` of the job's run (its backend, attempt and
        start; ``trace``: its trace id and parent span), in order with the night's other
        writes; over (committed) when it returns."""
        if self._owns_night():
            write = partial(
                self._ledger.record_submit, night, run.label, run.job.backend, external_id,
                run.attempt, at=run.started, state=state, committed_usd=committed_usd,
                trace=trace,
            )  # fmt: skip
            await self._enqueue(("job", write), awaited=True)

    async def record_state(
        self,
        night: str,
        label: str,
        state: str,
        finished_at: datetime | None = None,
        detail: str | None = None,
        data: dict[str, Any] | None = None,
        spent_usd: float | None = None,
    ) -> None:
        """On the loop: ``Ledger.record_state``, in order with the night's other writes; over
        (committed) when it returns."""
        if self._owns_night():
            write = partial(
                self._ledger.record_state, night, label, state, finished_at=finished_at,
                detail=detail, data=data, spent_usd=spent_usd,
            )  # fmt: skip
            await self._enqueue(("job", write), awaited=True)

    def abandon(self, why: str) -> None:
        """Stop waiting for a database that does not answer or cannot write (the night was
        stopped, or passed its deadline): writes still waiting end now, unwritten, and later
        ones are tried once. A database that answers is written to as before."""
        self._abandoned = why
        self._given_up.set()

    def _wait(self, seconds: float) -> None:
        """Wait between two tries; an abandon ends it at once."""
        self._given_up.wait(seconds)

    def flush(self, timeout: float = _FLUSH_S) -> bool:
        """Wait until every write queued so far is over (the night's end); False if the
        database held it past ``timeout``."""
        if self._loop.on_loop() or self._loop.closed:
            return self._last is None or self._last.done()

        async def drained() -> None:
            if self._last is not None:  # batches are committed in order: it is over last
                await asyncio.wait([self._last])

        try:
            self._loop.run(drained(), timeout)
        except (TimeoutError, RuntimeError, concurrent.futures.CancelledError):
            return False
        return True

    # -- reads -------------------------------------------------------------------------
    def get_job(self, night: str, label: str) -> JobRecord | None:
        """``Ledger.get_job``, asked again until the database answers.

        LedgerUnavailable once the night's lease is gone while it still does not answer.
        """
        return self._until_answered(lambda: self._ledger.get_job(night, label), "read a job")

    # -- the one writer ----------------------------------------------------------------
    def _write(self, write: _Write) -> None:
        """Queue the write; from another thread, return once it is over (its error raised);
        on the loop, return at once (an error is logged by the writer)."""
        # a night that lost its lease writes nothing: the rows belong to the night holding it
        if not self._owns_night():
            return
        if self._loop.closed:  # the night is over: nobody else writes
            if (error := self._commit([(0, write)]).get(0)) is not None:
                raise error
            return
        if self._loop.on_loop():
            self._enqueue(write, awaited=False)
            return

        async def written() -> None:
            await self._enqueue(write, awaited=True)

        try:
            self._loop.run(written())
        except concurrent.futures.CancelledError:  # the loop closed under the write
            raise LedgerUnavailable("not written: the night ended before its writer") from None

    def _enqueue(self, write: _Write, *, awaited: bool) -> asyncio.Future[None]:
        """On the loop: hand ``write`` to the writer task (started at the first write); a
        write nobody awaits has its failure logged."""
        self._loop.owned("the ledger's queue")
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if not awaited:
            done.add_done_callback(_said)
        self._queue.append((write, done))
        self._last = done
        self._queued += 1
        self._queued_now.set()
        if self._writer is None:
            self._writer = self._loop.spawn(self._writing(), "nightshift-ledger-writer")
        return done

    async def _writing(self) -> None:
        """The one writer: what queued while the last commit ran, committed as one batch on
        the ledger's own thread; each write's waiter told how it went."""
        loop = asyncio.get_running_loop()
        thread = self._loop.blocking("nightshift-ledger", 1)
        while True:
            await self._queued_now.wait()
            self._queued_now.clear()
            batch, self._queue = self._queue, []
            if not batch:
                continue
            try:
                tickets = [(i, write) for i, (write, _) in enumerate(batch)]
                errors = await loop.run_in_executor(thread, self._commit, tickets)
            except BaseException as exc:  # cancelled with the loop, or a bug: nobody waits on
                for _, done in batch:
                    if not done.done():
                        done.set_exception(LedgerUnavailable(f"not written: {exc!r}"))
                raise
            for i, (_, done) in enumerate(batch):
                if done.done():
                    continue
                if (error := errors.get(i)) is not None:
                    done.set_exception(error)
                else:
                    done.set_result(None)

    def _commit(self, batch: list[tuple[int, _Write]]) -> dict[int, Exception]:
        """Write a batch in order: runs of transitions in one transaction each, job records
        one by one. Returns the tickets whose writes failed (not for want of an answer)."""
        errors: dict[int, Exception] = {}
        start = 0
        while start < len(batch):
            end = start + 1
            if batch[start][1][0] == "transition":
                while end < len(batch) and batch[end][1][0] == "transition":
                    end += 1
                errors.update(self._transitions(batch[start:end]))
            else:
                ticket, (_, write) = batch[start]
                try:
                    self._until_answered(write, "write a job record")
                except LedgerUnavailable:
                    pass  # the lease is gone: the rows are no longer ours to write
                except Exception as exc:
                    errors[ticket] = exc
            start = end
        return errors

    def _transitions(self, run: list[tuple[int, _Write]]) -> dict[int, Exception]:
        """One transaction for the run; if that fails, each row alone (one bad row fails only
        itself)."""
        rows: list[TransitionRow] = [write[1] for _, write in run]
        try:
            self._until_answered(lambda: self._ledger.transitions(rows), "write transitions", rows)
            return {}
        except LedgerUnavailable:
            return {}
        except Exception as exc:
            if len(run) == 1:
                return {run[0][0]: exc}
        errors: dict[int, Exception] = {}
        for ticket, (_, row) in run:
            try:
                self._until_answered(partial(self._ledger.transitions, [row]), "write a row", [row])
            except LedgerUnavailable:
                return errors
            except Exception as exc:
                errors[ticket] = exc
        return errors

    def _until_answered(
        self, call: Callable[[], T], what: str, rows: list[TransitionRow] | None = None
    ) -> T:
        """``call()``, again with backoff while the database does not answer and the night
        holds its lease; LedgerUnavailable once it no longer does."""
        waits = 0
        while True:
            try:
                return call()
            except Exception as exc:
                if not unanswered(exc):
                    raise
                full = any(text in str(exc).lower() for text in _FULL)
                if waits == 0:
                    self.outages += 1
                    if full:  # said at once, in one line: which database, what it said
                        self.write_problem = f"{self._where()} is full: {_one_line(exc)}"
                        log.error("the ledger cannot write (%s): %s", what, self.write_problem)
                    else:
                        log.warning("the ledger does not answer (%s); trying again: %s", what,
                                    _one_line(exc))  # fmt: skip
                if self._abandoned is not None:
                    self.unwritten += 1
                    self.write_problem = self.write_problem or _one_line(exc)
                    raise LedgerUnavailable(
                        f"not written ({self._abandoned}): {_one_line(exc)}"
                    ) from None
                if not self._owns_night():
                    raise LedgerUnavailable(
                        f"the ledger did not answer and the night's lease is gone: {_one_line(exc)}"
                    ) from None
                if rows:  # its commit may have gone through: read the jobs' last rows again
                    self._ledger.forget({(row[0], row[2]) for row in rows})
                self._sleep(self._backoff.delay(waits))
                waits += 1

    def _where(self) -> str:
        """The ledger's database as a person finds it: a SQLite file's path, else its URL
        without a password."""
        url = self._ledger.engine.url
        if url.get_backend_name() == "sqlite":
            return f"the ledger's disk ({url.database})"
        return f"the ledger database ({url.render_as_string(hide_password=True)})"


def _said(done: asyncio.Future[None]) -> None:
    """A write queued on the loop (a published change) that failed: logged, as its publisher
    logged it when it wrote the row itself (nobody awaits it)."""
    if not done.cancelled() and (error := done.exception()) is not None:
        log.error("the ledger could not write a row: %s", _one_line(error))


def _one_line(error: BaseException) -> str:
    cause = getattr(error, "orig", None) or error
    text = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {text[0] if text else ''}"
