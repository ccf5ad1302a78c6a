"""Jobs run by an ``agy``-style CLI, spoken to only through its ``--json`` contract.

Contract: ``run --detach --json --task T [--model M] [--name KEY]`` prints ``{"job_id": ...}``;
``jobs get ID --json`` and ``jobs list --json`` print job objects ``{job_id, state, exit_code,
started_at, finished_at, task, model, created_at, name}`` (``created_at`` and ``name`` optional);
exit code 75 means "temporarily unavailable". Human output is never parsed.

A ``run`` is never repeated blindly: after a ``run`` whose answer was lost or refused (exit 75,
timeout), before it is sent again within ``patience`` (backoff, a "retry after N" honoured), or
when the runner says an earlier try may have run it (``resume_since``), the job is looked for
in ``jobs list``: by ``name`` (``names=True``, for an agy that takes ``--name``), else the same
task and model created since the try began. One is re-attached, none is run (or retried), several
fail the job: a duplicate may exist.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from nightshift.backends.base import ExternalState, JobSpec, JobStatus
from nightshift.backends.patience import Patience, retry_after_in, submit_patiently
from nightshift.backends.submission import resume_since, submission_key
from nightshift.config.settings import child_environment
from nightshift.errors import (
    BackendError,
    PermanentBackendError,
    TransientBackendError,
    UnknownJobError,
)

__all__ = ["CliBackend"]

EX_TEMPFAIL = 75
# how a job CLI says it does not know an id (agy: "job 'x' not found")
_UNKNOWN = re.compile(r"not found|no such job|unknown job", re.IGNORECASE)
_T = TypeVar("_T", dict, list)
_STATES = ", ".join(s.value for s in ExternalState)


def _tail(text: str, lines: int = 10) -> str:
    return "\n".join(text.strip().splitlines()[-lines:]) or "(no output)"


def _timestamp(value: Any, field: str, job_id: str) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except (TypeError, ValueError) as exc:
        raise PermanentBackendError(
            f"agy job {job_id}: {field} {value!r} is not an ISO timestamp"
        ) from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _to_status(obj: Any) -> JobStatus:
    """A contract job object as a JobStatus; anything off-contract is a PermanentBackendError."""
    if not isinstance(obj, dict) or not isinstance(obj.get("job_id"), str):
        raise PermanentBackendError(f"agy returned a job without a job_id: {obj!r:.200}")
    job_id = obj["job_id"]
    try:
        state = ExternalState(str(obj.get("state")))
    except ValueError as exc:
        raise PermanentBackendError(
            f"agy job {job_id}: state {obj.get('state')!r} is not one of {_STATES}"
        ) from exc
    code = obj.get("exit_code")
    if code is not None and (isinstance(code, bool) or not isinstance(code, int)):
        raise PermanentBackendError(f"agy job {job_id}: exit_code {code!r} is not an integer")
    detail = f"exit code {code}" if state is ExternalState.FAILED and code is not None else None
    return JobStatus(
        state=state,
        exit_code=code,
        started_at=_timestamp(obj.get("started_at"), "started_at", job_id),
        finished_at=_timestamp(obj.get("finished_at"), "finished_at", job_id),
        detail=detail,
        extra={k: obj.get(k) for k in ("job_id", "task", "model", "name")},
        created_at=_timestamp(obj.get("created_at"), "created_at", job_id),
    )


@dataclass(frozen=True)
class _Wanted:
    """The job one submit starts: its task, model and submission key."""

    task: str
    model: str | None
    key: str | None

    def matches(self, obj: dict[str, Any]) -> bool:
        """A listed job of the same task (and model, if one was given)."""
        return obj.get("task") == self.task and self.model in (None, obj.get("model"))


def _since(obj: dict[str, Any], after: datetime) -> bool:
    """Whether a listed job may have been created at or after ``after``."""
    # created_at is optional; a job started or finished before ``after`` was created before it
    for field in ("created_at", "started_at", "finished_at"):
        value = obj.get(field)
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                moment = datetime.fromisoformat(value)
                return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)) >= after
    return True  # no time at all (an old agy, a queued job): it may be ours


class CliBackend:
    """Runs jobs through an agy-style CLI (list argv, never a shell)."""

    name = "cli"

    def __init__(
        self,
        executable: str | Sequence[str],
        timeout_s: float = 30,
        *,
        env: Mapping[str, str] | None = None,
        pass_env: Sequence[str] = (),
        names: bool = False,
        clock_skew_s: float = 5.0,
        patience: Patience | None = None,
    ) -> None:
        self.command = [executable] if isinstance(executable, str) else list(executable)
        if not self.command:
            raise ValueError("executable must not be empty")
        # how messages name the CLI (they reach Slack): a file's name, never its local path;
        # `python /x/agy.py` or `python -m sandbox.agy` by its script or module
        self.shown = Path(self.command[-1] if len(self.command) > 1 else self.command[0]).name
        self.timeout_s = timeout_s
        # the CLI gets our environment minus secrets (read at each call), plus these values
        self.env = dict(env or {})
        self.pass_env = list(pass_env)
        self.names = names  # the agy takes ``run --name KEY`` and lists ``name``
        # how much earlier than our clock the CLI's created_at of our job may read
        self.clock_skew = timedelta(seconds=clock_skew_s)
        # how long a refused `run` is tried again (none: one try, the runner's retry decides)
        self.patience = patience or Patience()

    def submit(self, spec: JobSpec) -> str:
        """``agy run --detach --json --task T --model M``, at most once per submission key."""
        task, model = spec.options.get("task"), spec.options.get("model")
        if not isinstance(task, str) or not task:
            raise PermanentBackendError(f"job {spec.label!r}: cli backend needs options.task")
        want = _Wanted(task, None if model is None else str(model), submission_key(spec))
        since = resume_since(spec)
        if since is not None and (found := self._find(want, since)) is not None:
            return found
        args = ["run", "--detach", "--json", "--task", task]
        if want.model is not None:
            args += ["--model", want.model]
        if self.names and want.key:
            args += ["--name", want.key]
        began = datetime.now(UTC)

        job = spec.options
        if spec.trace is not None:  # the job CLI joins the night's trace (TRACEPARENT)
            job = {**job, "env": {**job.get("env", {}), "TRACEPARENT": spec.trace}}

        def send() -> str:
            obj = self._json(args, dict, job)
            job_id = obj.get("job_id")
            if not isinstance(job_id, str) or not job_id:
                raise PermanentBackendError(f"agy run printed no job_id: {obj!r:.200}")
            return job_id

        try:  # the job may exist after a lost answer: look before every resend
            return submit_patiently(
                send,
                lambda: self._find(want, began),
                self.patience,
                lambda exc: retry_after_in(str(exc)),
            )
        except TransientBackendError as exc:
            raise TransientBackendError(
                f"{exc}; `jobs list` shows no job of it yet: the retry looks again first"
            ) from None

    def _find(self, want: _Wanted, since: datetime) -> str | None:
        """The job ``want`` describes, started since ``since``; several are permanent."""
        after = since - self.clock_skew
        found = [
            obj["job_id"]
            for obj in self._json(["jobs", "list", "--json"], list)
            if isinstance(obj, dict)
            and isinstance(obj.get("job_id"), str)
            and (obj.get("name") == want.key if self.names and want.key else want.matches(obj))
            and _since(obj, after)
        ]
        if len(found) > 1:
            what = f"name {want.key!r}" if self.names and want.key else f"task {want.task!r}"
            raise PermanentBackendError(
                f"{len(found)} agy jobs of {what} (model {want.model or 'default'}) created "
                f"since {since:%Y-%m-%d %H:%M:%S}Z: {', '.join(found)}; a duplicate may exist: "
                "check `agy jobs list`, keep one, cancel the others"
            )
        return found[0] if found else None

    def status(self, external_id: str) -> JobStatus:
        """``agy jobs get ID --json``."""
        return _to_status(self._json(["jobs", "get", self._check(external_id), "--json"], dict))

    def status_many(self, external_ids: Iterable[str]) -> dict[str, JobStatus | BackendError]:
        """The jobs one ``agy jobs list --json`` shows; ids it does not list are left out.

        The caller asks those one by one, each on a call of its own with its own deadline, so
        a hung ``jobs get`` holds only its own job, never an answer this listing has in hand.
        Only listed entries whose job_id was asked for are parsed (other users' jobs are none
        of our business). Each maps to its JobStatus or to its own BackendError (an
        off-contract entry); this raises only when the listing itself fails.
        """
        wanted = dict.fromkeys(external_ids)
        if not wanted:
            return {}
        out: dict[str, JobStatus | BackendError] = {}
        for obj in self._json(["jobs", "list", "--json"], list):
            job_id = obj.get("job_id") if isinstance(obj, dict) else None
            if isinstance(job_id, str) and job_id in wanted and job_id not in out:
                try:
                    out[job_id] = _to_status(obj)
                except BackendError as exc:
                    out[job_id] = exc
        return {job_id: out[job_id] for job_id in wanted if job_id in out}

    def cancel(self, external_id: str) -> None:
        """``agy jobs cancel ID``; the CLI leaves final jobs alone."""
        self._run(["jobs", "cancel", self._check(external_id)])

    def logs(self, external_id: str, tail: int = 40) -> str:
        """``agy jobs logs ID --tail N`` (plain text, passed through)."""
        out = self._run(["jobs", "logs", self._check(external_id), "--tail", str(int(tail))])
        return out.rstrip("\n")

    @staticmethod
    def _check(external_id: str) -> str:
        if not external_id or external_id.startswith("-"):
            raise PermanentBackendError(f"not an agy job id: {external_id!r}")
        return external_id

    def _run(self, args: list[str], job: Mapping[str, Any] | None = None) -> str:
        exe = self.command[0]
        # a job's own `env` and `pass_env` (catalogue) reach the CLI only when it is submitted
        job = job or {}
        env = child_environment(
            os.environ,
            {**self.env, **job.get("env", {})},
            [*self.pass_env, *job.get("pass_env", ())],
        )
        what = f"`{' '.join([self.shown, *args[:3]])}`"
        try:
            proc = subprocess.run(
                [*self.command, *args],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                encoding="utf-8",
                errors="replace",
                timeout=self.timeout_s,
                env=env,
            )
        except FileNotFoundError as exc:
            raise PermanentBackendError(
                f"agy executable {Path(exe).name!r} not found; set NIGHTSHIFT_AGY or the "
                "catalogue's `cli: {executable: ...}` to the path of the agy CLI"
            ) from exc
        except subprocess.TimeoutExpired as exc:
            raise TransientBackendError(f"{what} timed out after {self.timeout_s:g}s") from exc
        except OSError as exc:
            why = exc.strerror or type(exc).__name__  # str(exc) would name the path
            raise TransientBackendError(f"could not start {self.shown!r}: {why}") from exc
        if proc.returncode == EX_TEMPFAIL:
            raise TransientBackendError(
                f"{what} is temporarily unavailable (exit 75): {_tail(proc.stderr)}"
            )
        if proc.returncode != 0:
            text = f"{what} exited {proc.returncode}: {_tail(proc.stderr)}"
            # a job id the CLI does not know (yet): the watcher tells fresh from expired
            unknown = args[:1] == ["jobs"] and _UNKNOWN.search(_tail(proc.stderr, 3))
            raise (UnknownJobError if unknown else PermanentBackendError)(text)
        return proc.stdout

    def _json(self, args: list[str], kind: type[_T], job: Mapping[str, Any] | None = None) -> _T:
        out = self._run(args, job)
        try:
            obj = json.loads(out)
        except ValueError as exc:
            raise PermanentBackendError(
                f"`{' '.join(args[:3])}` printed non-JSON output (does this agy support --json?): "
                f"{_tail(out, 3)!r}"
            ) from exc
        if not isinstance(obj, kind):
            raise PermanentBackendError(
                f"`{' '.join(args[:3])}` printed a JSON {type(obj).__name__}, "
                f"expected a {kind.__name__}"
            )
        return obj
