"""The budgets for people: one row per label and state plus the whole job, and as markdown.

Pure: frames in, a frame or text out (pandas is imported when called, not on import).
``nightshift budgets`` prints ``budget_rows`` as a table or JSON; the ``budgets`` flow publishes
``markdown_table`` as an artifact.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

from nightshift.budgets.columns import CATALOGUE, LABEL, STATE
from nightshift.config.durations import format_duration

if TYPE_CHECKING:
    import pandas as pd

    from nightshift.budgets.snapshots import SnapshotInfo
    from nightshift.budgets.table import BudgetTables

__all__ = ["FIELDS", "WHOLE_JOB", "budget_rows", "markdown_table", "records"]

WHOLE_JOB = "(whole job)"  # the state column of a label's whole-job row
FIELDS = ["catalogue", "label", "state", "backend", "n", "p50", "p95", "watch_at", "alert_at"]
FIELDS += ["source", "source_n", "basis"]
_HEADER = ["label", "state", "n", "p50", "p95", "watch at", "alert at", "source"]
_SECONDS = ["p50", "p95", "watch_at", "alert_at"]


def budget_rows(
    tables: BudgetTables, *, catalogue: str | None = None, label: str | None = None
) -> pd.DataFrame:
    """Each label's states then its whole job (``WHOLE_JOB``), as FIELDS, by catalogue and label."""
    import pandas as pd

    rows = pd.concat([tables.states, tables.jobs.assign(**{STATE: WHOLE_JOB})], ignore_index=True)
    if catalogue is not None:
        rows = rows[rows[CATALOGUE] == catalogue]
    if label is not None:
        rows = rows[rows[LABEL] == label]
    return rows.sort_values([CATALOGUE, LABEL], kind="stable")[FIELDS].reset_index(drop=True)


def records(rows: pd.DataFrame) -> list[dict[str, Any]]:
    """JSON-ready rows: NaN (learning) is None, numpy numbers are plain ones."""
    out = []
    for row in rows.to_dict("records"):
        record: dict[str, Any] = {}
        for key, value in row.items():
            if isinstance(value, float) and math.isnan(value):
                value = None
            elif hasattr(value, "item"):
                value = value.item()
            record[str(key)] = value
        out.append(record)
    return out


def markdown_table(tables: BudgetTables, info: SnapshotInfo) -> str:
    """The snapshot as markdown: a heading and a table per catalogue (durations for people)."""
    rows = records(budget_rows(tables))
    days = round((info.built_at - info.since).total_seconds() / 86_400)
    lines = [
        f"# Dwell budgets, snapshot {info.id}",
        "",
        f"Built {info.built_at:%Y-%m-%d %H:%M} UTC from {info.dwells:,} dwells of the last "
        f"{days} days. A job in a state longer than *watch at* (p95) is `watch`, longer than "
        "*alert at* (2 x p95) is `alert`; *source* says whose samples set it (the job's own, "
        "its backend's, or none yet: learning).",
    ]
    if not rows:
        lines += ["", f"No dwell history in the last {days} days: nothing learned yet."]
    for catalogue in dict.fromkeys(r["catalogue"] for r in rows):
        lines += ["", f"## {_escape(catalogue)}", ""]
        lines += ["| " + " | ".join(_HEADER) + " |", "|" + " --- |" * len(_HEADER)]
        for r in (r for r in rows if r["catalogue"] == catalogue):
            cells = [_escape(r["label"]), _escape(r["state"]), str(r["n"])]
            cells += ["-" if r[k] is None else format_duration(r[k]) for k in _SECONDS]
            cells.append(_escape(r["basis"]))
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _escape(text: str) -> str:
    """Text shown as it is in a markdown table cell (labels like `gen:[x]` or `a|b`)."""
    return re.sub(r"([\\`*_\[\]<>|~])", r"\\\1", text)
