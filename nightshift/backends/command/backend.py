"""Local commands as detached jobs, supervised so the exit code survives the flow process.

One job = one directory ``state_dir/jobs/<id>``; the id is the directory name, so any process
can re-attach. ``supervisor.py`` writes the files; this module only reads them and sends signals.
A job's end is seen when its process exits, not at its next poll: the backend ``Streams``
(``stream.py``: every streamed job's files looked at every 0.1 s by one task on the night's
stream loop, a stat and a signal 0 each), so the watcher listens to its jobs instead of polling.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nightshift.backends.base import ExternalState, JobSpec, JobStatus
from nightshift.backends.command import supervisor as runner
from nightshift.backends.command.stream import Tickers, job_statuses
from nightshift.backoff import Backoff, poll_until
from nightshift.config.settings import child_environment
from nightshift.errors import PermanentBackendError, TransientBackendError
from nightshift.files import label_filename

__all__ = ["CommandBackend"]

_RUNNER_PATH = Path(runner.__file__).resolve()
# '+' since label_filename (":" -> "+"); ids made before it (without '+') still match
_ID = re.compile(r"^[A-Za-z0-9_+][A-Za-z0-9_.+-]*$")
_LOST = "lost: supervisor gone without an exit code"
# how often to look while a cancelled job exits, and while an orphaned group dies
_SETTLE = Backoff(initial=0.02, factor=1, max=0.02)
_REAP = Backoff(initial=0.05, factor=1, max=0.05)


def _slug(label: str) -> str:
    """The readable part of a job id; its suffix (the submission key's hash) makes it unique."""
    return label_filename(label).strip("-.")[:40] or "job"


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def _read_float(path: Path) -> float | None:
    text = _read(path)
    return float(text) if text and text.strip() else None


def _read_json(path: Path) -> dict[str, Any] | None:
    text = _read(path)
    return json.loads(text) if text else None


def _dt(ts: float | None) -> datetime | None:
    return datetime.fromtimestamp(ts, tz=UTC) if ts is not None else None


def _tail_lines(path: Path, n: int, block: int = 8192) -> str:
    """The last ``n`` lines of ``path``, reading backwards from the end."""
    if n <= 0:
        return ""
    with open(path, "rb") as f:
        end = f.seek(0, os.SEEK_END)
        data = b""
        # n + 1 newlines guarantee the n-th line from the end is complete
        while end > 0 and data.count(b"\n") <= n:
            start = max(0, end - block)
            f.seek(start)
            data = f.read(end - start) + data
            end = start
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return b"\n".join(lines[-n:]).decode("utf-8", errors="replace")


class CommandBackend:
    """Runs ``options.argv`` (never through a shell) as a detached, supervised local process."""

    name = "command"

    def __init__(
        self,
        state_dir: Path | str,
        *,
        kill_grace_s: float = 5.0,
        cancel_wait_s: float = 0.5,
        python: str = sys.executable,
    ) -> None:
        self.jobs_dir = Path(state_dir) / "jobs"
        self.kill_grace_s = kill_grace_s
        self.cancel_wait_s = cancel_wait_s
        self.python = python
        self._tickers = Tickers()  # looks at every streamed job of a loop, on that loop

    def submit(self, spec: JobSpec) -> str:
        """Start the supervisor for ``spec``; return the job id (its directory name)."""
        argv, cwd, env, pass_env = self._options(spec)
        if spec.trace is not None:  # the job joins the night's trace (OpenTelemetry's carrier)
            env = {**env, "TRACEPARENT": spec.trace}
        key = spec.options.get("submission_key")
        # a submission key makes submit idempotent: the same key never starts a second job
        # (a night that crashed between starting a job and recording its id finds it again)
        suffix = hashlib.sha256(str(key).encode()).hexdigest()[:8] if key else uuid.uuid4().hex[:8]
        job_id = f"{_slug(spec.label)}-{suffix}"
        jobdir = (self.jobs_dir / job_id).absolute()  # the supervisor runs inside it
        if key and (jobdir / runner.RUNNER_PID).exists():
            return job_id
        if key and jobdir.exists():
            shutil.rmtree(jobdir)  # a start that died before its supervisor came up
        jobdir.mkdir(parents=True)
        record: dict[str, Any] = {"label": spec.label, "argv": argv, "cwd": cwd}
        # env values may be secrets: only their names are recorded
        record.update(env_keys=sorted(env), pass_env=pass_env, submitted_at=time.time())
        runner.write_atomic(jobdir / "spec.json", json.dumps(record, indent=2))
        cmd = [self.python, str(_RUNNER_PATH), str(jobdir), "--grace", str(self.kill_grace_s)]
        cmd += ["--cwd", cwd, "--", *argv]
        err_path = jobdir / "runner.err"
        try:
            with open(err_path, "wb") as err:
                proc = subprocess.run(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=err,
                    stderr=err,
                    cwd=jobdir,
                    env=child_environment(os.environ, env, pass_env),
                    timeout=30,
                    start_new_session=True,
                )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise TransientBackendError(
                f"job {spec.label!r}: supervisor did not start: {exc}"
            ) from exc
        if proc.returncode != 0 or not (jobdir / runner.RUNNER_PID).exists():
            tail = _tail_lines(err_path, 10)
            raise TransientBackendError(
                f"job {spec.label!r}: supervisor exited {proc.returncode}: {tail}"
            )
        if err_path.stat().st_size == 0:
            err_path.unlink()
        return job_id

    def status(self, external_id: str) -> JobStatus:
        """Read the job directory: exit code, else supervisor liveness."""
        return self._read_status(self._jobdir(external_id))

    def streams(self, external_id: str) -> bool:
        """Every job of ours streams: its directory is looked at on the stream loop."""
        return bool(_ID.match(external_id)) and (self.jobs_dir / external_id).is_dir()

    def stream(self, external_id: str) -> AsyncIterator[JobStatus]:
        """The job's status now, then each change up to its final one (``stream.py``)."""

        def look() -> JobStatus:  # as ``status`` reads it: an unknown id fails the stream
            return self._read_status(self._jobdir(external_id))

        return job_statuses(look, self.jobs_dir / external_id, self._tickers)

    async def aclose(self) -> None:
        """Stop the task that looks at this loop's streamed jobs (a stream holds no client)."""
        await self._tickers.aclose()

    def _read_status(self, jobdir: Path) -> JobStatus:
        started = _dt(_read_float(jobdir / runner.STARTED_AT))
        code = self._exit_code(jobdir)
        if code is None:
            if self._runner_alive(jobdir):
                if started:
                    return JobStatus(ExternalState.RUNNING, started_at=started)
                # its supervisor is starting it: queued since the submit
                spec = _read_json(jobdir / "spec.json") or {}
                return JobStatus(ExternalState.QUEUED, created_at=_dt(spec.get("submitted_at")))
            code = self._exit_code(jobdir)  # it may have finished between the two looks
            if code is None:
                return JobStatus(ExternalState.FAILED, started_at=started, detail=_LOST)
        finished_ts = _read_float(jobdir / runner.FINISHED_AT)
        cancel = _read_json(jobdir / runner.CANCEL)
        if cancel and (finished_ts is None or cancel["requested_at"] <= finished_ts):
            state, detail = ExternalState.CANCELLED, "cancelled on request"
        elif code == 0:
            state, detail = ExternalState.SUCCEEDED, None
        else:
            state = ExternalState.FAILED
            detail = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
            if (why := _read(jobdir / runner.START_ERROR)) is not None:
                detail += f": {why.strip()}"  # argv never ran: say why here, not only in the log
            elif (first := _read(jobdir / runner.FIRST_STDERR)) and first.strip():
                detail += f": {first.strip()}"  # what it said went wrong, in the digest line
        return JobStatus(state, code, started, _dt(finished_ts), detail)

    def cancel(self, external_id: str) -> None:
        """Mark the job cancelled and SIGTERM it; the supervisor SIGKILLs it after the grace."""
        jobdir = self._jobdir(external_id)
        if self._exit_code(jobdir) is not None:
            return
        if not (jobdir / runner.CANCEL).exists():
            marker = {"requested_at": time.time(), "grace_s": self.kill_grace_s}
            runner.write_atomic(jobdir / runner.CANCEL, json.dumps(marker))
        ident = _read_json(jobdir / runner.RUNNER_PID)
        if ident and runner.identity_alive(ident):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(ident["pid"]), signal.SIGTERM)  # forwarded to the job's group
            poll_until(lambda: self._exit_code(jobdir) is not None, self.cancel_wait_s, _SETTLE)
            return
        # the supervisor is gone (job lost): nobody else will stop an orphaned child
        child = _read_json(jobdir / runner.CHILD_PID)
        if child and runner.identity_alive(child):
            self._terminate_group(int(child["pid"]))

    def logs(self, external_id: str, tail: int = 40) -> str:
        """The last ``tail`` lines of the job's combined stdout and stderr."""
        path = self._jobdir(external_id) / runner.LOG
        return _tail_lines(path, tail) if path.exists() else ""

    def _terminate_group(self, pgid: int) -> None:
        try:
            os.killpg(pgid, signal.SIGTERM)
            if not poll_until(lambda: not runner.group_alive(pgid), self.kill_grace_s, _REAP):
                os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def _jobdir(self, external_id: str) -> Path:
        if not _ID.match(external_id):
            raise PermanentBackendError(f"not a command job id: {external_id!r}")
        jobdir = self.jobs_dir / external_id
        if not jobdir.is_dir():
            raise PermanentBackendError(f"unknown command job {external_id!r} in {self.jobs_dir}")
        return jobdir

    @staticmethod
    def _exit_code(jobdir: Path) -> int | None:
        text = _read(jobdir / runner.EXIT_CODE)
        return int(text) if text and text.strip() else None

    @staticmethod
    def _runner_alive(jobdir: Path) -> bool:
        ident = _read_json(jobdir / runner.RUNNER_PID)
        return bool(ident) and runner.identity_alive(ident)  # type: ignore[arg-type]

    @staticmethod
    def _options(spec: JobSpec) -> tuple[list[str], str, dict[str, str], list[str]]:
        opts = spec.options
        argv = opts.get("argv")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise PermanentBackendError(
                f"job {spec.label!r}: command backend needs options.argv, a non-empty list of "
                f"strings (got {argv!r})"
            )
        env = opts.get("env") or {}
        if not isinstance(env, dict):
            raise PermanentBackendError(f"job {spec.label!r}: options.env must be a mapping")
        pass_env = opts.get("pass_env") or []
        if not isinstance(pass_env, list):
            raise PermanentBackendError(f"job {spec.label!r}: options.pass_env must be a list")
        cwd = Path(opts["cwd"]) if opts.get("cwd") else Path.cwd()
        env = {str(k): str(v) for k, v in env.items()}
        return argv, str(cwd.absolute()), env, [str(name) for name in pass_env]
