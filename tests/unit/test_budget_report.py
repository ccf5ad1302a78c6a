"""The budgets for people: rows per label and state, JSON-ready records, the markdown table."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pandas as pd

from nightshift.budgets.columns import HISTORY_COLUMNS
from nightshift.budgets.report import WHOLE_JOB, budget_rows, markdown_table, records
from nightshift.budgets.snapshots import SnapshotInfo
from nightshift.budgets.table import budget_tables

NOW = datetime(2026, 11, 29, 6, 0, tzinfo=UTC)
INFO = SnapshotInfo(7, NOW, NOW - timedelta(days=30), 1234)


def _tables(*labels: tuple[str, str, int, float]) -> object:
    """Budget tables of (catalogue, label, nights, queued seconds) jobs, one dwell a night."""
    rows = [
        (cat, f"n{i}", "r", label, "cli", "queued", dwell, NOW - timedelta(days=i + 1))
        for cat, label, nights, dwell in labels
        for i in range(nights)
    ]
    frame = pd.DataFrame(rows, columns=HISTORY_COLUMNS)
    for column in HISTORY_COLUMNS[:-2]:
        frame[column] = frame[column].astype(str)
    frame["at"] = pd.to_datetime(frame["at"], utc=True).dt.as_unit("us")
    return budget_tables(frame, NOW)


def test_rows_give_each_label_its_states_then_its_whole_job() -> None:
    tables = _tables(("b", "z", 7, 60.0), ("a", "y", 7, 5.0), ("a", "x", 2, 5.0))

    rows = budget_rows(tables)  # type: ignore[arg-type]

    keys = list(zip(rows["catalogue"], rows["label"], rows["state"], strict=True))
    assert keys == [
        ("a", "x", "queued"),
        ("a", "x", WHOLE_JOB),
        ("a", "y", "queued"),
        ("a", "y", WHOLE_JOB),
        ("b", "z", "queued"),
        ("b", "z", WHOLE_JOB),
    ]
    only = budget_rows(tables, catalogue="a", label="y")  # type: ignore[arg-type]
    assert list(only["state"]) == ["queued", WHOLE_JOB]
    learning = records(budget_rows(tables, label="x"))  # type: ignore[arg-type]
    assert learning[1]["p95"] is None and learning[1]["n"] == 2
    assert isinstance(learning[0]["p95"], float) and type(learning[0]["n"]) is int


def test_the_markdown_table_has_a_section_per_catalogue_and_escapes_labels() -> None:
    tables = _tables(("team-a", "gen:[x]|*y*", 7, 90.0), ("team-b", "load", 3, 5.0))

    text = markdown_table(tables, INFO)  # type: ignore[arg-type]

    assert text.startswith("# Dwell budgets, snapshot 7\n")
    assert "Built 2026-11-29 06:00 UTC from 1,234 dwells of the last 30 days." in text
    assert "## team-a" in text and "## team-b" in text
    assert r"| gen:\[x\]\|\*y\* | queued | 7 | 2m | 2m | 2m | 3m | job (n=7) |" in text
    assert "| load | (whole job) | 3 | - | - | - | - | learning (n=3) |" in text


def test_the_markdown_table_of_nothing_says_so() -> None:
    text = markdown_table(_tables(), INFO)  # type: ignore[arg-type]

    assert "No dwell history in the last 30 days: nothing learned yet." in text
    assert "|" not in text
