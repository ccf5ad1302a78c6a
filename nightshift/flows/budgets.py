"""The budgets flow: learn what normal is again, store it, and show it. Flows wire; tasks do.

Reads every catalogue's last 30 days of dwells from the ledger, stores them as a new budget
snapshot (the one every night after it watches with), and leaves in its run folder the table as
``budgets.md`` and the picture as ``budgets-<catalogue>.png``. On the flow run: the table as a
markdown artifact (``budgets``) and the picture as another (``budgets-plot``), the PNG embedded.
"""

from __future__ import annotations

import base64
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact

from nightshift.budgets.current import build_snapshot, window_history
from nightshift.budgets.snapshots import KEEP
from nightshift.config.settings import Settings, load_settings
from nightshift.store.ledger import Ledger

__all__ = ["budgets", "budgets_run_dir"]

# the API stores an artifact whole: pictures past this many bytes in all are named, not embedded
MAX_EMBEDDED_BYTES = 8_000_000


@flow(name="budgets")
def budgets(run_dir: str | None = None, keep: int = KEEP) -> dict[str, Any]:
    """Build a new budget snapshot from the ledger and publish its table and picture.

    ``run_dir``: where the table and PNGs go (default: a new folder under the state folder's
    ``runs/budgets``). ``keep``: how many snapshots stay in the ledger afterwards.
    """
    from nightshift.budgets.columns import MIN_SAMPLES
    from nightshift.budgets.plot import plot_budgets
    from nightshift.budgets.report import markdown_table
    from nightshift.budgets.table import at_least, recent_dwells

    logger = get_run_logger()
    settings = load_settings()
    now = datetime.now(UTC)
    run_path = Path(run_dir) if run_dir else budgets_run_dir(settings, now)
    run_path.mkdir(parents=True, exist_ok=True)
    ledger = Ledger(settings.ledger_url())
    try:
        history = window_history(ledger, now)
        snapshot = build_snapshot(ledger, now, history=history, keep=keep)
    finally:
        ledger.close()
    # shown with the default min_samples: the flow reads every catalogue, none of their files
    # (`nightshift budgets --catalogue F` shows one as its `defaults.min_samples` sees it)
    info, tables = snapshot.info, at_least(snapshot.tables, MIN_SAMPLES)
    logger.info(
        "budget snapshot %d: %d dwells, %d job x state budgets (%s)",
        info.id,
        info.dwells,
        len(tables.states),
        ", ".join(f"{k} {v}" for k, v in tables.states["source"].value_counts().items()) or "-",
    )
    table = markdown_table(tables, info)
    (run_path / "budgets.md").write_text(table, encoding="utf-8")
    create_markdown_artifact(table, key="budgets", description=f"budget snapshot {info.id}")
    plots = plot_budgets(recent_dwells(history, now), tables, run_path, built_at=info.built_at)
    if plots:
        create_markdown_artifact(
            _pictures(plots), key="budgets-plot", description=f"budget snapshot {info.id}"
        )
    logger.info("table and %d picture(s) in %s", len(plots), run_path)
    return {
        "snapshot": info.id,
        "built_at": info.built_at.isoformat(),
        "dwells": info.dwells,
        "run_dir": str(run_path),
        "plots": [str(p) for p in plots],
    }


def budgets_run_dir(settings: Settings, now: datetime) -> Path:
    """Where a budgets run's table and pictures go by default."""
    stamp = f"{now:%H%M%S}-{uuid.uuid4().hex[:6]}"
    return settings.state_dir / "runs" / "budgets" / f"{now:%Y-%m-%d}" / stamp


def _pictures(paths: list[Path]) -> str:
    """Markdown showing each PNG inline (a data: URI) with the file it is in."""
    parts = []
    room = MAX_EMBEDDED_BYTES
    for path in paths:
        data = path.read_bytes()
        parts.append(f"**{path.name}** (`{path}`)\n")
        room -= len(data)
        if room >= 0:
            encoded = base64.b64encode(data).decode()
            parts.append(f"![{path.stem}](data:image/png;base64,{encoded})\n")
        else:
            parts.append("not shown here (the pictures are too big together): open the file\n")
    return "\n".join(parts)
