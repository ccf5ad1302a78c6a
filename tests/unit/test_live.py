"""What the live output prints: labels and details as they are, never emoji or markup."""

from __future__ import annotations

import io

from rich.console import Console

from nightshift.cli.live import LiveTable


def test_labels_are_printed_as_they_are() -> None:
    out = io.StringIO()
    table = LiveTable(["gen:a:", "x[bold]y"], Console(file=out, width=200))
    with table.shown(enabled=False):
        table.update("gen:a:", "succeeded")
        table.update("x[bold]y", "failed")
    assert out.getvalue().splitlines() == ["[1/2] gen:a:: succeeded", "[2/2] x[bold]y: failed"]
    rendered = io.StringIO()
    Console(file=rendered, width=200).print(table.render())
    assert "gen:a:" in rendered.getvalue() and "x[bold]y" in rendered.getvalue()


def test_the_table_is_a_sink_of_the_nights_events() -> None:
    from datetime import UTC, datetime

    from nightshift.engine.events import JobChanged, JobFinished
    from nightshift.engine.outcomes import JobOutcome, Outcome

    out = io.StringIO()
    table = LiveTable(["a", "b"], Console(file=out, width=200))
    at = datetime(2030, 1, 1, tzinfo=UTC)
    with table.shown(enabled=False):
        table.on_event(JobChanged("n", "c", "a", "command", 1, "a", "running", at, None))
        table.on_event(JobChanged("n", "c", "a", "command", 1, "a", "failed", at, 1.0))
        table.on_event(JobFinished("n", "c", JobOutcome("a", Outcome.FAILED), at))  # said once
        table.on_event(JobFinished("n", "c", JobOutcome("b", Outcome.SUCCEEDED), at))  # kept
    assert out.getvalue().splitlines() == ["[1/2] a: failed", "[2/2] b: succeeded"]
