"""``nightshift budgets``: the dwell budgets learned from the ledger's last 30 days, as a table."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

__all__ = ["BUDGET_EXIT_CODES", "WHOLE_JOB", "show_budgets"]

WHOLE_JOB = "(whole job)"  # the state column of a label's whole-job row

BUDGET_EXIT_CODES = """\
exit codes:
  0   the budgets were printed (also when there is no history yet)
  4   invalid --catalogue
  6   the ledger database could not be opened (NIGHTSHIFT_DATABASE_URL)
  64  bad command line (usage)
"""

_FIELDS = ["catalogue", "label", "state", "backend", "n", "p50", "p95", "watch_at", "alert_at"]
_FIELDS += ["source", "source_n", "basis"]


def show_budgets(
    url: str,
    *,
    catalogue: str | None = None,
    label: str | None = None,
    as_json: bool = False,
    now: datetime | None = None,
) -> int:
    """Print the budgets of ``catalogue`` (a key; None: every catalogue) and return 0.

    The ledger's errors (SQLAlchemy's, a missing driver) propagate for the caller to name.
    """
    import pandas as pd

    from nightshift.budgets.columns import CATALOGUE, STATE, WINDOW
    from nightshift.budgets.table import budget_tables
    from nightshift.store.ledger import Ledger

    now = now or datetime.now(UTC)
    ledger = Ledger(url, catalogue) if catalogue is not None else Ledger(url)
    try:
        if catalogue is None:
            history = ledger.history(now - WINDOW, all_catalogues=True)
        else:  # one catalogue's rows only, read as such: the budgets never mix catalogues
            history = ledger.history(now - WINDOW)
            history.insert(0, CATALOGUE, pd.Series(catalogue, index=history.index, dtype=str))
    finally:
        ledger.close()
    tables = budget_tables(history, now)
    rows = pd.concat([tables.states, tables.jobs.assign(**{STATE: WHOLE_JOB})], ignore_index=True)
    if label is not None:
        rows = rows[rows["label"] == label]
    rows = rows.sort_values(["catalogue", "label"], kind="stable")[_FIELDS]
    records = [_record(row) for row in rows.to_dict("records")]
    if as_json:
        print(
            json.dumps({"built_at": now.isoformat(), "window_days": WINDOW.days, "rows": records})
        )
    else:
        _print(records, WINDOW.days)
    return 0


def _record(row: dict[str, Any]) -> dict[str, Any]:
    """One JSON-ready row: NaN (learning) is null, numpy numbers are plain ones."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, float) and math.isnan(value):
            value = None
        elif hasattr(value, "item"):
            value = value.item()
        out[key] = value
    return out


def _print(records: list[dict[str, Any]], days: int) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from nightshift.config.durations import format_duration

    console = Console()
    if not records:
        console.print(f"no dwell history in the last {days} days", markup=False)
        return

    def seconds(value: float | None) -> str:
        return "-" if value is None else format_duration(value)

    for catalogue in dict.fromkeys(r["catalogue"] for r in records):
        table = Table(title=f"budgets of {catalogue} (last {days} days)")
        for column in ("label", "state", "n", "p50", "p95", "watch at", "alert at", "source"):
            table.add_column(column)
        for r in (r for r in records if r["catalogue"] == catalogue):
            # Text, not markup: labels like `gen:a` or `[x]` are shown as they are
            table.add_row(
                Text(r["label"]),
                Text(r["state"]),
                str(r["n"]),
                *(seconds(r[k]) for k in ("p50", "p95", "watch_at", "alert_at")),
                Text(r["basis"]),
            )
        console.print(table)
