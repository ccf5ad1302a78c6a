"""Shared test support: a scripted backend, the one fake clock, waiters that fail, never hang."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from nightshift.backends.base import Backend, ExternalState, JobSpec, JobStatus
from nightshift.errors import BackendError

if TYPE_CHECKING:
    from nightshift.config.catalogue import Catalogue
    from nightshift.engine.context import NightContext
    from nightshift.engine.watcher import Watcher
    from nightshift.store.ledger import Ledger

__all__ = [
    "EPOCH",
    "BatchScriptedBackend",
    "FakeClock",
    "ScriptedBackend",
    "eventually",
    "new_ledger_url",
    "read_until",
    "run_for",
    "start_run",
    "wait_final",
    "wait_status",
    "wait_until",
    "write_rows",
]

REPO = Path(__file__).resolve().parents[1]

T = TypeVar("T")
EPOCH = datetime(2030, 1, 1, 22, 0, tzinfo=UTC)  # where a fake clock's wall time starts


class FakeClock:
    """The tests' one fake clock: it moves only when a test moves it (``advance``).

    Called, it reads monotonic seconds (a watcher's, an admission's clock), or the datetime it
    was started at when a test needs a fake wall clock alone. ``wall()`` reads the wall time on
    the same fake time, counted from ``epoch``: a night's timers and its ledger rows move together.
    """

    def __init__(self, now: Any = 1000.0, *, epoch: datetime = EPOCH) -> None:
        self.now = now
        self._start = now
        self.epoch = epoch
        self._lock = threading.Lock()  # read from the watcher's thread while the test advances

    def __call__(self) -> Any:
        with self._lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            step = timedelta(seconds=seconds) if isinstance(self.now, datetime) else seconds
            self.now += step

    def wall(self) -> datetime:
        """The wall clock on this clock's time: ``epoch`` when it started, moving with it."""
        now = self()
        if isinstance(now, datetime):
            return now
        return self.epoch + timedelta(seconds=now - self._start)


def run_for(watcher: Watcher, clock: FakeClock, seconds: float, step: float = 1.0) -> None:
    """Move the fake clock forward in steps, letting the watcher finish each step's work."""
    for _ in range(int(seconds / step)):
        clock.advance(step)
        watcher.poke()
        assert watcher.wait_idle(timeout=10), "the watcher did not settle"


def eventually(
    condition: Callable[[], bool], timeout: float = 10.0, interval: float = 0.02
) -> bool:
    """Whether ``condition()`` holds within ``timeout`` seconds (checked at least once).

    Checked again after a millisecond, then twice as long each time up to ``interval``: what
    holds a moment later is seen then, not an ``interval`` later; a long wait polls no harder.
    """
    end = time.monotonic() + timeout
    pause = min(0.001, interval)
    while not condition():
        if time.monotonic() >= end:
            return False
        time.sleep(pause)
        pause = min(pause * 2, interval)
    return True


def wait_until(
    condition: Callable[[], bool],
    timeout: float = 10.0,
    what: str = "a condition",
    interval: float = 0.02,
) -> None:
    """Poll something another thread or process will make true; fail instead of hanging."""
    assert eventually(condition, timeout, interval), (
        f"timed out after {timeout}s waiting for {what}"
    )


def read_until(
    read: Callable[[], T],
    done: Callable[[T], bool],
    timeout: float = 10.0,
    what: str = "a condition",
    interval: float = 0.02,
) -> T:
    """Read until ``done`` holds for what was read, and return that; fail instead of hanging."""
    last: list[T] = []

    def check() -> bool:
        last[:] = [read()]
        return done(last[0])

    reached = eventually(check, timeout, interval)
    assert reached, f"timed out after {timeout}s waiting for {what}; last read {last[0]!r}"
    return last[0]


def wait_status(
    backend: Backend, job_id: str, pred: Callable[[JobStatus], bool], timeout: float = 15.0
) -> JobStatus:
    """The job's first status that satisfies ``pred``."""
    return read_until(lambda: backend.status(job_id), pred, timeout, f"job {job_id}")


def wait_final(backend: Backend, job_id: str, timeout: float = 15.0) -> JobStatus:
    """The job's first final status."""
    return wait_status(backend, job_id, lambda s: s.state.final, timeout)


def start_run(catalogue: Path, night: str, **popen: Any) -> subprocess.Popen[bytes]:
    """``nightshift run`` in the background, on the session's Prefect server, output dropped."""
    from prefect.settings import PREFECT_API_URL  # deferred: the fast layer never pays for it

    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value())}
    argv = [sys.executable, "-m", "nightshift.cli.main", "run", "--catalog", str(catalogue)]
    return subprocess.Popen(
        [*argv, "--night", night],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        **popen,
    )


def write_rows(path: Path, count: int, text: str = "row {i}") -> Path:
    """A Gemini batch input of ``count`` rows keyed ``r0``, ``r1``...; ``text`` may use ``{i}``."""
    rows = [
        {"key": f"r{i}", "request": {"contents": [{"parts": [{"text": text.format(i=i)}]}]}}
        for i in range(count)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@dataclass
class ScriptedBackend:
    """Each status call on a job returns the next scripted state (or raises the next error)."""

    name: str = "scripted"
    scripts: dict[str, list[ExternalState | BackendError]] = field(default_factory=dict)
    calls: Counter[str] = field(default_factory=Counter)
    cancelled: list[str] = field(default_factory=list)
    many_calls: int = 0
    single_calls: int = 0
    batch: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    submitted: list[str] = field(default_factory=list)
    cancel_error: BackendError | None = None

    def submit(self, spec: JobSpec) -> str:
        self.submitted.append(spec.label)
        return spec.label

    def status(self, external_id: str) -> JobStatus:
        self.single_calls += 1
        return self._next(external_id)

    def _next(self, external_id: str) -> JobStatus:
        with self._lock:
            script = self.scripts[external_id]
            step = script[min(self.calls[external_id], len(script) - 1)]
            self.calls[external_id] += 1
        if isinstance(step, BackendError):
            raise step
        return JobStatus(state=step, exit_code=0 if step is ExternalState.SUCCEEDED else None)

    def cancel(self, external_id: str) -> None:
        self.cancelled.append(external_id)
        if self.cancel_error is not None:
            raise self.cancel_error

    def logs(self, external_id: str, tail: int = 40) -> str:
        return f"log of {external_id}\n"


class BatchScriptedBackend(ScriptedBackend):
    """The same, but answering many jobs in one call."""

    def status_many(self, ids: list[str]) -> dict[str, JobStatus]:
        self.many_calls += 1
        return {i: self._next(i) for i in ids}


@functools.cache
def _migrated_ledger() -> bytes:
    """A new SQLite ledger's file at the schema's head: migrated once a session, then copied."""
    from nightshift.store.ledger import Ledger

    with tempfile.TemporaryDirectory(prefix="nightshift-ledger-") as folder:
        path = Path(folder) / "ledger.db"
        Ledger(f"sqlite:///{path}").close()
        assert not path.with_name("ledger.db-wal").exists(), "the WAL was not checkpointed"
        return path.read_bytes()


def new_ledger_url(path: Path) -> str:
    """The URL of the SQLite ledger at ``path``; where there is none yet, a new one at the
    schema's head is put there first (a ledger already there is kept: a rerun opens it again).

    Each new ledger would run every migration (Alembic: tens of ms each time); the store layer
    tests the migrations themselves, the others start from the one migrated copy.
    """
    if not path.exists():
        path.write_bytes(_migrated_ledger())
    return f"sqlite:///{path}"


def make_context(
    catalogue: Catalogue,
    ledger: Ledger,
    backends: dict[str, Backend],
    run_dir: Path,
    *,
    wall: Callable[[], datetime] | None = None,
    reports: bool = True,
    **fields: Any,
) -> NightContext:
    """A night's context made in the night's order: its records and marks, a watcher that
    reports to them (``reports``; else to nobody), the context. The ledger writer asks the
    context's ``owns_night``, so a test may take the lease away by setting it."""
    from nightshift.engine.admission import Admission
    from nightshift.engine.context import NightContext, night_records, utcnow
    from nightshift.engine.watcher import Watcher
    from nightshift.loop import NightLoop

    box: list[NightContext] = []
    clock = wall or utcnow
    loop = NightLoop()  # the night's: the test closes it after the watcher (``close_context``)
    records, marks = night_records(
        catalogue, "2026-11-29", ledger, "test", [], wall=clock,
        owns_night=lambda: box[0].rules.owns_night(), loop=loop,
    )  # fmt: skip
    if reports:
        watcher = Watcher(on_change=marks.seen, on_error=marks.poll_failed, loop=loop)
    else:
        watcher = Watcher(on_change=lambda *_: None, loop=loop)
    box.append(
        NightContext(
            catalogue=catalogue,
            night="2026-11-29",
            run_id="test",
            run_dir=run_dir,
            backends=backends,
            ledger=ledger,
            watcher=watcher,
            admission=fields.pop("admission", Admission(0)),
            deadline_at=watcher.now() + 60,
            records=records,
            marks=marks,
            wall=clock,
            **fields,
        )
    )
    return box[0]


@contextmanager
def night_context(
    tmp_path: Path, catalogue: str, backends: dict[str, Backend]
) -> Iterator[NightContext]:
    """A night's context on a SQLite ledger under ``tmp_path``; watcher and ledger closed after.
    Its watcher reports to nobody: a test wires the one it needs."""
    from nightshift.config.loader import parse_catalogue
    from nightshift.store.ledger import Ledger

    ledger = Ledger(new_ledger_url(tmp_path / "ledger.db"))
    parsed = parse_catalogue(catalogue, tmp_path / "nightshift.yaml")
    ctx = make_context(parsed, ledger, backends, tmp_path / "run", reports=False)
    try:
        yield ctx
    finally:
        close_context(ctx)
        ledger.close()


def close_context(ctx: NightContext) -> None:
    """What ``open_night`` closes of a context made by ``make_context``: its watcher, what its
    sinks and its ledger writer still had, its loop."""
    ctx.watcher.stop()
    ctx.events.settle()
    ctx.records.flush()
    ctx.loop.close()


@contextmanager
def admitted(
    gate: Any, backend: str, priority: float, deadline: float | None = None, *, stagger: bool = True
) -> Iterator[None]:
    """``Admission.enter`` for a test without a loop of its own: hold the slot inside."""
    import asyncio

    held = asyncio.run(gate.enter(backend, priority, deadline, stagger=stagger))
    try:
        yield
    finally:
        gate.leave(held)
