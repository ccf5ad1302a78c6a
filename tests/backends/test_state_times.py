"""Each backend says when a job entered its state; a night over loopback dates its rows by it.

The sandbox job CLI and the Gemini emulator run for real; polls are slower than the jobs'
state changes, so a row dated by its poll would come visibly later than the backend's time.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from pydantic import SecretStr

from nightshift.backends.base import Backend, ExternalState, JobSpec, JobStatus
from nightshift.backends.cli import CliBackend
from nightshift.backends.command.backend import CommandBackend
from nightshift.backends.gemini.batch import GeminiBatchBackend, RetryPolicy, build_gemini_client
from nightshift.backoff import Backoff
from nightshift.config.loader import parse_catalogue
from nightshift.config.settings import Settings
from nightshift.engine.context import NightContext
from nightshift.engine.outcomes import Outcome
from nightshift.sandbox.gemini_emulator import BatchScript, GeminiEmulator
from nightshift.store.ledger import Ledger, Transition
from tests.conftest import GEMINI_KEY
from tests.night_kit import run_job
from tests.support import close_context, make_context, wait_final, wait_status, write_rows

AGY = [sys.executable, "-m", "nightshift.sandbox.agy"]
FAST = RetryPolicy(attempts=4, backoff=Backoff(initial=0.01, factor=2, max=0.05, jitter=0.01))
MINUTES = 60.0
EXACT = timedelta(milliseconds=1)  # a time read back through JSON and the ledger


def gemini(emu: GeminiEmulator) -> GeminiBatchBackend:
    settings = Settings(gemini_base_url=emu.base_url, gemini_api_key=SecretStr(GEMINI_KEY))
    return GeminiBatchBackend(build_gemini_client(settings, retry=FAST, timeout_s=5), retry=FAST)


def gemini_spec(tmp_path: Path, label: str) -> JobSpec:
    rows = write_rows(tmp_path / f"{label}.in.jsonl", 2)
    opts = {"model": "gemini-2.5-flash", "input": str(rows), "output": str(tmp_path / "o.jsonl")}
    return JobSpec(label=label, backend="gemini_batch", options={**opts, "sla": "30m"})


def close(a: datetime | None, b: datetime | None) -> bool:
    return a is not None and b is not None and abs(a - b) <= EXACT


# -- what each backend reports ---------------------------------------------------------------


def test_a_batch_is_dated_by_the_api_not_by_the_read(clocked_emu, tmp_path: Path) -> None:
    emu, clock = clocked_emu  # its clock reads real seconds; the script's are emulated
    queued_s, running_s = 5 * MINUTES / emu.time_scale, 15 * MINUTES / emu.time_scale
    backend = gemini(emu)
    emu.script_batch("dated", BatchScript(queued_s=5 * MINUTES, running_s=15 * MINUTES))
    batch_id = backend.submit(gemini_spec(tmp_path, "dated"))
    queued = backend.status(batch_id)
    created = queued.created_at
    assert queued.state is ExternalState.QUEUED and created is not None
    assert queued.since == created

    clock.advance(queued_s + 0.05)  # read 50 ms after it began running
    running = backend.status(batch_id)
    assert running.state is ExternalState.RUNNING
    began = created + timedelta(seconds=queued_s)
    assert close(running.since, began)
    clock.advance(0.1)
    assert backend.status(batch_id).since == running.since  # a later read: the same start

    clock.advance(running_s)
    done = backend.status(batch_id)
    assert done.state is ExternalState.SUCCEEDED
    assert close(done.since, began + timedelta(seconds=running_s))
    assert done.since == done.finished_at
    clock.advance(1)
    assert backend.status(batch_id).since == done.since


def test_a_cancelled_batch_ends_when_its_cancel_took_effect(clocked_emu, tmp_path: Path) -> None:
    emu, clock = clocked_emu
    backend = gemini(emu)
    emu.script_batch("cut", BatchScript(running_s=60 * MINUTES, cancel_delay_s=2 * MINUTES))
    batch_id = backend.submit(gemini_spec(tmp_path, "cut"))
    created = backend.status(batch_id).created_at
    assert created is not None
    clock.advance(0.1)
    backend.cancel(batch_id)
    delay_s = 2 * MINUTES / emu.time_scale
    clock.advance(delay_s + 0.05)

    status = backend.status(batch_id)
    assert status.state is ExternalState.CANCELLED
    assert close(status.since, created + timedelta(seconds=0.1 + delay_s))


def test_the_job_cli_dates_each_state(tmp_path: Path) -> None:
    backend = CliBackend(AGY, timeout_s=20, env={"AGY_STATE_DIR": str(tmp_path / "agy")})
    job_id = backend.submit(JobSpec("a", "cli", {"task": "t [queue=0.3 run=0.3]"}))
    running = wait_status(backend, job_id, lambda s: s.state is not ExternalState.QUEUED)
    done = wait_final(backend, job_id)
    assert done.created_at is not None and done.started_at is not None
    assert close(done.started_at, done.created_at + timedelta(seconds=0.3))
    assert done.since == done.finished_at
    if running.state is ExternalState.RUNNING:
        assert running.since == done.started_at


def test_a_command_job_is_dated_by_its_supervisor(tmp_path: Path) -> None:
    backend = CommandBackend(tmp_path / "state")
    job_id = backend.submit(JobSpec("a", "command", {"argv": [sys.executable, "-c", "pass"]}))
    done = wait_final(backend, job_id)
    assert done.since == done.finished_at and done.started_at is not None
    assert done.started_at <= done.finished_at  # type: ignore[operator]


# -- a night over loopback --------------------------------------------------------------------


@contextmanager
def watched_night(
    tmp_path: Path, catalogue: str, backends: dict[str, Backend]
) -> Iterator[NightContext]:
    """A night's context whose watcher reports to it, on the real wall clock."""
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    ctx = make_context(
        parse_catalogue(catalogue, tmp_path / "nightshift.yaml"), ledger, backends, tmp_path / "run"
    )
    try:
        yield ctx
    finally:
        close_context(ctx)
        ledger.close()


def rows_by_state(ctx: NightContext, label: str) -> dict[str, Transition]:
    rows = ctx.ledger.dwells(ctx.night, label)
    assert [r.at for r in rows] == sorted(r.at for r in rows)  # the chain stays ordered
    return {r.to_state: r for r in rows}


def test_a_night_on_the_job_cli_records_its_real_start_and_end(tmp_path: Path) -> None:
    catalogue = """\
defaults: {poll: {initial: 0.5s, factor: 1, max: 0.5s}, stagger: 0s}
jobs:
  - {label: a, backend: cli, task: "slow polls [queue=1 run=1.2]"}
"""
    backend = CliBackend(AGY, timeout_s=20, env={"AGY_STATE_DIR": str(tmp_path / "agy")})
    with watched_night(tmp_path, catalogue, {"cli": backend}) as ctx:
        assert run_job(ctx, "a").state is Outcome.SUCCEEDED
        truth = backend.status(ctx.runs["a"].external_id)
        rows = rows_by_state(ctx, "a")

    # polls 0.5 s apart see each change up to 0.5 s late; the rows say when it happened
    assert close(rows["running"].at, truth.started_at)
    assert close(rows["succeeded"].at, truth.finished_at)
    assert rows["succeeded"].dwell_s == pytest.approx(1.2, abs=0.01)


def test_a_night_on_the_gemini_emulator_records_the_batch_times(tmp_path: Path) -> None:
    catalogue = """\
defaults: {poll: {initial: 0.5s, factor: 1, max: 0.5s}, stagger: 0s}
jobs:
  - {label: b, backend: gemini_batch, model: gemini-2.5-flash, input: b.in.jsonl, output: o.jsonl}
"""
    write_rows(tmp_path / "b.in.jsonl", 2)
    with GeminiEmulator(api_key=GEMINI_KEY) as emu:
        emu.script_batch("b", BatchScript(queued_s=0.1, running_s=1.2))
        backend = gemini(emu)
        with watched_night(tmp_path, catalogue, {"gemini_batch": backend}) as ctx:
            assert run_job(ctx, "b").state is Outcome.SUCCEEDED
            truth: JobStatus = backend.status(ctx.runs["b"].external_id)
            rows = rows_by_state(ctx, "b")
            backend.close()

    assert truth.created_at is not None
    # the API gives no start time: RUNNING is dated by the batch's updateTime when first seen
    assert close(rows["running"].at, truth.created_at + timedelta(seconds=0.1))
    assert close(rows["succeeded"].at, truth.finished_at)
    assert rows["succeeded"].dwell_s == pytest.approx(1.2, abs=0.01)


def test_a_jobs_duration_is_its_ledger_span_not_when_its_poll_saw_it_end(tmp_path: Path) -> None:
    """The label's duration (``a (1.2s, succeeded)``) and the ledger's rows say one thing: the
    job ran from its submission to the end the service reports, not to the poll that saw it."""
    catalogue = """\
defaults: {poll: {initial: 2s, factor: 1, max: 2s}, stagger: 0s}
jobs:
  - {label: a, backend: cli, task: "quick [queue=0 run=0.3]"}
"""
    backend = CliBackend(AGY, timeout_s=20, env={"AGY_STATE_DIR": str(tmp_path / "agy")})
    with watched_night(tmp_path, catalogue, {"cli": backend}) as ctx:
        outcome = run_job(ctx, "a")
        rows = rows_by_state(ctx, "a")

    assert outcome.state is Outcome.SUCCEEDED
    span = (rows["succeeded"].at - rows["submitted"].at).total_seconds()
    # seen at its first poll, 2 s after its submission: it ran 0.3 s and some of the CLI's start
    assert span < 1.5
    # to the microsecond: one start, one end, the same two datetimes (a submitted row dated after
    # its submit was written made them 0.1-3 ms apart, c1975ff)
    assert outcome.duration_s == pytest.approx(span, abs=1e-6)
