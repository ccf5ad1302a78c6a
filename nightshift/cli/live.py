"""The live table of jobs and states drawn by ``nightshift run`` (rich).

With learned budgets it also marks a job whose wait is abnormal (``watch``, ``ALERT``), shows
each job's expected end and the night's (``7/12 finished, expected done ~02:41 UTC``). A night
too long for the terminal shows its counts by state and only the jobs that need a look: not ok
(failed, timed out, ...) or marked.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from nightshift.engine.context import utcnow
from nightshift.engine.events import (
    IncidentChanged,
    JobChanged,
    JobFinished,
    LevelChanged,
    NightEvent,
)
from nightshift.engine.expected import clock_text
from nightshift.engine.incidents import Closed, IncidentChange, Opened
from nightshift.engine.night_progress import NightProgress
from nightshift.states import JobState, is_final

__all__ = ["LiveTable"]

_STYLE: dict[str, str] = {
    JobState.SUCCEEDED: "green",
    JobState.RUNNING: "cyan",
    JobState.QUEUED: "yellow",
    JobState.FAILED: "red",
    JobState.TIMEOUT: "red",
    JobState.STUCK_QUEUED: "red",
    JobState.PARTIAL: "magenta",
    JobState.SKIPPED: "dim",
    JobState.CANCELLED: "red",
}
_MARKER = {"watch": (" watch", "bold yellow"), "alert": (" ALERT", "bold red")}
_CHROME = 7  # lines of a table that are not job rows: title, borders, header, caption


class LiveTable:
    """Job states as they change; safe to update from any thread."""

    def __init__(
        self, labels: list[str], console: Console, wall: Callable[[], datetime] = utcnow
    ) -> None:
        self._console = console
        self._wall = wall
        self.progress = NightProgress(labels)
        self._lock = threading.Lock()
        self._states: dict[str, tuple[str, float]] = {
            label: (JobState.WAITING, time.monotonic()) for label in labels
        }
        self._done = 0  # jobs in a final state, kept as they change (a night may have thousands)
        self._lines = False
        self._incidents: dict[str, str] = {}  # key -> its line, while it lasts

    def update(self, label: str, state: str) -> None:
        """Note a job's new state and redraw."""
        with self._lock:
            was = self._states.get(label, ("", 0.0))[0]
            if was == state:
                return  # the external state and our verdict often agree: say it once
            self._states[label] = (state, time.monotonic())
            self._done += is_final(state) - is_final(was)
            done = self._done
        if self._lines and is_final(state):
            # not a terminal (CI, a log file): one line per finished job instead of a table
            line = f"[{done}/{len(self._states)}] {label}: {state}"
            self._say(line)

    def _say(self, line: str) -> None:
        # `gen:a:` would be an emoji and `[x]` markup: print labels as they are
        self._console.print(line, highlight=False, markup=False, emoji=False)

    def on_event(self, event: NightEvent) -> None:
        """A sink of the night's events: each state change, and each job's outcome."""
        with self._lock:  # the progress is read by the refresh thread too (``render``)
            self.progress.on_event(event)
        if isinstance(event, JobChanged):
            self.update(event.label, event.state)
        elif isinstance(event, LevelChanged) and self._lines:
            # a marker in the table; without one, a line of its own
            self._say(f"[{event.alert.level}] {event.alert.line()}")
        elif isinstance(event, JobFinished):
            # a job kept from an earlier run changes no state: its outcome is its news
            self.update(event.outcome.label, event.outcome.state.value)
        elif isinstance(event, IncidentChanged):
            self._incident(event.change)

    def _incident(self, change: IncidentChange) -> None:
        """An incident above the jobs while it lasts (a line of its own at its start and end)."""
        incident = change.incident
        with self._lock:
            if isinstance(change, Closed):
                self._incidents.pop(incident.key, None)
            else:
                self._incidents[incident.key] = f"incident: {incident.headline()}"
        if self._lines and isinstance(change, Opened | Closed):
            self._say(f"incident: {incident.line()}")

    def render(self) -> Table:
        """The table as it stands."""
        wall = self._wall()
        with self._lock:
            rows = list(self._states.items())
            views = {view.label: view for view in self.progress.jobs(wall)}
            expected = self.progress.known
            at = self.progress.expected_done(wall) if expected else None
            incidents = list(self._incidents.values())
        done = sum(is_final(state) for _, (state, _) in rows)
        title = f"nightshift: {done}/{len(rows)} jobs finished"
        if at is not None:
            title = f"nightshift: {done}/{len(rows)} finished, expected done {clock_text(at, wall)}"
        if incidents:  # one backend's jobs stalled together: said above the jobs
            title = "\n".join([title, *incidents])
        table = Table(title=title, min_width=max(map(len, title.splitlines())))
        table.add_column("job")
        table.add_column("state")
        table.add_column("for", justify="right")
        if expected:
            table.add_column("expected end", justify="right")
        now = time.monotonic()
        room = self._console.height - _CHROME
        if len(rows) > room:
            # too long to see: the counts, and the jobs that need a look
            table.caption = counts_line(state for _, (state, _) in rows)
            rows = [(x, s) for x, s in rows if needs_look(s[0], views.get(x))]
            if len(rows) > room:
                table.caption += f"; {len(rows) - room + 1} more not shown"
                rows = rows[: max(0, room - 1)]
            # one line, never wrapped
            table.min_width = max(table.min_width or 0, len(table.caption))
        for label, (state, since) in rows:
            view = views.get(label)
            cell = Text(state, style=_STYLE.get(state, "white"))
            if view is not None and marked(view, state) and view.level is not None:
                cell.append(*_MARKER[view.level])
            row: list[Text | str] = [Text(label), cell, f"{now - since:.0f}s"]
            if expected:
                end = view.expected_end if view is not None and not is_final(state) else None
                row.append(clock_text(end, wall) if end is not None else "")
            table.add_row(*row)
        return table

    @contextmanager
    def shown(self, enabled: bool = True) -> Iterator[None]:
        """Draw the table while the block runs (only on a terminal)."""
        if not enabled:
            self._lines = True
            try:
                yield
            finally:
                self._lines = False
            return
        with Live(console=self._console, refresh_per_second=2, get_renderable=self.render):
            yield


def marked(view: Any, state: str) -> bool:
    """The job's wait is abnormal (watch or alert) in the state it is in."""
    return view is not None and view.state == state and view.level in _MARKER


def needs_look(state: str, view: Any) -> bool:
    """A finished job that is not ok, or a job whose wait is abnormal."""
    return (is_final(state) and state != JobState.SUCCEEDED) or marked(view, state)


def counts_line(states: Iterable[str]) -> str:
    """``running 812 · queued 40 · succeeded 140 · failed 3``: each state's count."""
    counts = Counter(states)
    return " · ".join(f"{state} {n}" for state, n in counts.most_common())
