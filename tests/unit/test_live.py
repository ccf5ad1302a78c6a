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
