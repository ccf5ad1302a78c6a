"""The live table of jobs and states drawn by ``nightshift run`` (rich)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.live import Live
from rich.table import Table

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

_FINAL = {"succeeded", "failed", "timeout", "stuck_queued", "partial", "skipped", "cancelled"}


class LiveTable:
    """Job states as they change; safe to update from any thread."""

    def __init__(self, labels: list[str], console: Console) -> None:
        self._console = console
        self._lock = threading.Lock()
        self._states: dict[str, tuple[str, float]] = {
            label: ("waiting", time.monotonic()) for label in labels
        }

    def update(self, label: str, state: str) -> None:
        """Note a job's new state and redraw."""
        with self._lock:
            self._states[label] = (state, time.monotonic())

    def render(self) -> Table:
        """The table as it stands."""
        with self._lock:
            rows = list(self._states.items())
        done = sum(state in _FINAL for _, (state, _) in rows)
        table = Table(title=f"nightshift: {done}/{len(rows)} jobs finished")
        table.add_column("job")
        table.add_column("state")
        table.add_column("for", justify="right")
        now = time.monotonic()
        for label, (state, since) in rows:
            style = _STYLE.get(state, "white")
            table.add_row(label, f"[{style}]{state}[/{style}]", f"{now - since:.0f}s")
        return table

    @contextmanager
    def shown(self, enabled: bool = True) -> Iterator[None]:
        """Draw the table while the block runs (only on a terminal)."""
        if not enabled:
            yield
            return
        with Live(console=self._console, refresh_per_second=2, get_renderable=self.render):
            yield
