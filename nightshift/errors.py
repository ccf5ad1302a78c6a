"""Nightshift's error tree.

    NightshiftError
    ├── CatalogueError          bad catalogue: carries file, line, job and field
    ├── InputFileError          bad batch input file: carries every bad line
    ├── NightArgumentError      a --night that is no date, an --only naming no job (a ValueError)
    ├── LockHeldError           another night of this catalogue is alive
    ├── NightEndedEarly         the night could not go on (Prefect refused a limit, ...)
    └── BackendError            talking to an external job system
        ├── TransientBackendError   worth retrying (timeouts, 429/5xx, a CLI that failed to start)
        └── PermanentBackendError   retrying will not help (bad request, auth, unknown job)
            ├── UnknownJobError     the service does not know an id (404, "no such job")
            └── CannotCancelError   the backend has no way to cancel a job

Backends translate SDK and subprocess errors into these (``raise ... from exc``); nothing
else in the project catches third-party exceptions. Gotcha: the Gemini backend raises its
translations outside the ``except`` block on purpose, so no chained SDK exception (whose text
may carry the API key) reaches a logged traceback.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "BackendError",
    "CannotCancelError",
    "CatalogueError",
    "CatalogueProblem",
    "InputFileError",
    "InputProblem",
    "LockHeldError",
    "NightArgumentError",
    "NightEndedEarly",
    "NightshiftError",
    "PermanentBackendError",
    "TransientBackendError",
    "UnknownJobError",
]


class NightshiftError(Exception):
    """Base of every error Nightshift raises on purpose."""


@dataclass(frozen=True)
class CatalogueProblem:
    """One thing wrong with a catalogue, located as precisely as we can."""

    message: str
    line: int | None = None
    job: str | None = None
    field: str | None = None
    # a value not written where it is used: where it came from ("from apis.reports, line 4")
    source: str | None = None

    def render(self, path: Path | str) -> str:
        where = f"{path}:{self.line}" if self.line else str(path)
        parts = [where]
        if self.job:
            parts.append(f"job {self.job!r}")
        if self.field:
            parts.append(f"field {self.field!r}")
        source = f" ({self.source})" if self.source else ""
        text = ": ".join(parts) + f": {self.message}{source}"
        # one problem, one line: a key or a value with a line break in it is shown escaped
        return text.replace("\r", "\\r").replace("\n", "\\n")


class CatalogueError(NightshiftError):
    """The catalogue is invalid; nothing was run."""

    def __init__(self, path: Path | str, problems: list[CatalogueProblem]) -> None:
        self.path = Path(path)
        self.problems = problems
        lines = [p.render(path) for p in problems]
        super().__init__("invalid catalogue:\n  " + "\n  ".join(lines))

    def one_line(self) -> str:
        """The problems on one line, for a log that shows each line as a record of its own."""
        return "invalid catalogue: " + "; ".join(p.render(self.path) for p in self.problems)


@dataclass(frozen=True)
class InputProblem:
    """One bad line of a batch input file."""

    line: int  # 0: the file as a whole
    reason: str

    def where(self, path: Path | str) -> str:
        """``path:line``, or just ``path`` for a problem of the whole file."""
        return f"{path}:{self.line}" if self.line else str(path)


@dataclass
class InputFileError(NightshiftError):
    """A batch input file has bad lines; nothing was submitted."""

    path: Path
    problems: list[InputProblem] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"{p.where(self.path)}: {p.reason}" for p in self.problems]
        return f"{len(self.problems)} bad line(s) in {self.path}:\n  " + "\n  ".join(lines)


class LockHeldError(NightshiftError):
    """Another night of the same catalogue holds the lease."""

    def __init__(self, key: str, owner: str, expires_in_s: float, who: str | None = None) -> None:
        """``who``: the owner as people read it (``host vm, pid 4242``); else the owner."""
        self.key, self.owner, self.expires_in_s = key, owner, expires_in_s
        super().__init__(
            f"another night of {key!r} is running ({who or owner}); "
            f"its lease expires in {expires_in_s:.0f}s unless renewed"
        )


class NightArgumentError(NightshiftError, ValueError):
    """A night asked for by hand that cannot be run: its message is the one line to show."""


class NightEndedEarly(NightshiftError):
    """The night could not go on (Prefect refused a limit, ...); the message says why."""


class BackendError(NightshiftError):
    """A backend call failed."""


class TransientBackendError(BackendError):
    """A backend call failed in a way worth retrying."""


class PermanentBackendError(BackendError):
    """A backend call failed in a way retrying will not fix."""


class UnknownJobError(PermanentBackendError):
    """The service does not know a job id (a 404, "no such job").

    Gotcha: for an id the service gave out and no status answer has shown yet, this means
    *not visible yet* (workers scaling from zero, a lagging replica), not lost: the watcher
    waits up to the job's ``visible_within``. Once a job has been seen, its record expired.
    """


class CannotCancelError(PermanentBackendError):
    """The backend has no way to cancel this job: it may still be running at the service."""
