"""The pictures the flows publish, drawn for real with matplotlib: the budgets pages (a PNG per
catalogue and page, learning states included, nothing for none) and the night report's plot.

Not in the unit layer: importing matplotlib and drawing take seconds.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
from PIL import Image

from nightshift.budgets.columns import HISTORY_COLUMNS
from nightshift.budgets.plot import plot_budgets
from nightshift.budgets.table import budget_tables, recent_dwells
from nightshift.orchestration.report_plot import plot_report
from tests.unit.test_night_report import report

NOW = datetime(2026, 11, 29, 6, 0, tzinfo=UTC)


def _history(jobs: dict[tuple[str, str], int]) -> pd.DataFrame:
    """Per (catalogue, label): that many nights of submitted, queued and running dwells."""
    rows = []
    for (catalogue, label), nights in jobs.items():
        for i in range(nights):
            at = NOW - timedelta(days=i + 1)
            for k, state in enumerate(["submitted", "queued", "running"]):
                dwell = 0.0 if state == "submitted" else 10.0 ** (k + 1) * (1 + i / 10)
                rows.append((catalogue, f"n{i}", "r", label, "cli", state, dwell, at))
    frame = pd.DataFrame(rows, columns=HISTORY_COLUMNS)
    for column in HISTORY_COLUMNS[:-2]:
        frame[column] = frame[column].astype(str)
    frame["at"] = pd.to_datetime(frame["at"], utc=True).dt.as_unit("us")
    return frame


def _draw(history: pd.DataFrame, folder: Path, per_page: int = 40) -> list[Path]:
    tables = budget_tables(history, NOW)
    dwells = recent_dwells(history, NOW)
    return plot_budgets(dwells, tables, folder, built_at=NOW, per_page=per_page)


def test_a_picture_per_catalogue_with_learning_and_instant_states(tmp_path: Path) -> None:
    history = _history({("team/a", "etl"): 9, ("team/a", "new"): 2, ("team_a", "x"): 7})

    paths = _draw(history, tmp_path)

    names = [p.name for p in paths]  # in catalogue order; one key's name never hides another's
    assert names[0] == "budgets-team_a.png"
    assert names[1].startswith("budgets-team_a-") and names[1].endswith(".png")
    with Image.open(tmp_path / "budgets-team_a.png") as image:  # team/a: two jobs
        assert image.format == "PNG" and image.width == 1050 and image.height > 300


def test_many_jobs_are_split_into_pages_of_similar_height(tmp_path: Path) -> None:
    history = _history({("cat", f"job-{i:02d}"): 7 for i in range(5)})

    paths = _draw(history, tmp_path, per_page=2)

    assert [p.name for p in paths] == [f"budgets-cat-{page}.png" for page in (1, 2, 3)]
    with Image.open(paths[0]) as full, Image.open(paths[2]) as last:
        assert last.height < full.height  # one job on the last page, two on the others


def test_no_history_draws_nothing(tmp_path: Path) -> None:
    assert _draw(_history({}), tmp_path) == []


def test_the_plot_is_a_png() -> None:
    png = plot_report(report())
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 5000


def test_the_plot_drawn_apart_is_the_same_picture() -> None:
    """A night draws it in a process of its own (matplotlib never in the night's memory)."""
    from nightshift.orchestration.report_plot import draw_apart

    assert draw_apart(report()) == plot_report(report())
