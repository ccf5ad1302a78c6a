"""The live table of jobs and states drawn by ``nightshift run`` (rich)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from nightshift.engine.events import JobChanged, JobFinished, NightEvent
from nightshift.engine.outcomes import is_final

__all__ = ["LiveTable"]

_STYLE = {
    "succeeded": "green",
    "running": "cyan",
    "queued": "yellow",
    "failed": "red",
    "timeout": "red",
    "stuck_queued": "red",
    "partial": "magenta",
    "skipped": "dim",
    "cancelled": "red",
}


class LiveTable:
    """Job states as they change; safe to update from any thread."""

    def __init__(self, labels: list[str], console: Console) -> None:
        self._console = console
        self._lock = threading.Lock()
        self._states: dict[str, tuple[str, float]] = {
            label: ("waiting", time.monotonic()) for label in labels
        }
        self._lines = False

    def update(self, label: str, state: str) -> None:
        """Note a job's new state and redraw."""
        with self._lock:
            if self._states.get(label, ("", 0.0))[0] == state:
                return  # the external state and our verdict often agree: say it once
            self._states[label] = (state, time.monotonic())
            done = sum(is_final(s) for s, _ in self._states.values())
        if self._lines and is_final(state):
            # not a terminal (CI, a log file): one line per finished job instead of a table
            line = f"[{done}/{len(self._states)}] {label}: {state}"
            # `gen:a:` would be an emoji and `[x]` markup: print labels as they are
            self._console.print(line, highlight=False, markup=False, emoji=False)

    def on_event(self, event: NightEvent) -> None:
        """A sink of the night's events: each state change, and each job's outcome."""
        if isinstance(event, JobChanged):
            self.update(event.label, event.state)
        elif isinstance(event, JobFinished):
            # a job kept from an earlier run changes no state: its outcome is its news
            self.update(event.outcome.label, event.outcome.state.value)

    def render(self) -> Table:
        """The table as it stands."""
        with self._lock:
            rows = list(self._states.items())
        done = sum(is_final(state) for _, (state, _) in rows)
        table = Table(title=f"nightshift: {done}/{len(rows)} jobs finished")
        table.add_column("job")
        table.add_column("state")
        table.add_column("for", justify="right")
        now = time.monotonic()
        for label, (state, since) in rows:
            style = _STYLE.get(state, "white")
            table.add_row(Text(label), Text(state, style=style), f"{now - since:.0f}s")
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
