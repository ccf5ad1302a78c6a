"""What a night is set up from: its catalogue, its run folder, its Slack notifier, and whether
it may still submit."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nightshift.config.catalogue import Catalogue
from nightshift.config.loader import load_catalogue
from nightshift.config.settings import Settings
from nightshift.engine.night import watcher_stopped
from nightshift.engine.stopping import NightStop
from nightshift.engine.watcher import Watcher
from nightshift.errors import CatalogueError
from nightshift.notify.notifier import Notifier
from nightshift.store.lease import Lease
from nightshift.store.ledger import Ledger
from nightshift.store.outbox import Outbox

__all__ = ["NightSetup", "catalogue_or_none", "notifier_for", "run_dir_for", "stamp", "stop_reason"]


@dataclass(frozen=True)
class NightSetup:
    """A night as its flow set it up: what it runs, writes to, tells, and closes at its end."""

    catalogue: Catalogue
    settings: Settings
    ledger: Ledger
    night: str
    run_path: Path
    stop: NightStop
    notifier: Notifier | None
    # the Slack task (``tasks/notify.py``), handed in: this layer does not import tasks
    notify: Callable[..., Any]
    logger: Any


def catalogue_or_none(catalog: str, logger: Any) -> Catalogue | None:
    """The catalogue, or None after one ERROR line naming its absolute path (no traceback)."""
    try:
        # a deployed run reads it from the folder it was deployed from: say which file that is
        return load_catalogue(Path(catalog).absolute())
    except CatalogueError as exc:
        logger.error("%s", exc.one_line())
        return None


def run_dir_for(settings: Settings, night: str) -> Path:
    """Where a night's summary and log tails go by default."""
    stamp = datetime.now(UTC).strftime("%H%M%S")
    return settings.state_dir / "runs" / night / f"{stamp}-{uuid.uuid4().hex[:6]}"


def notifier_for(catalogue: Catalogue, ledger: Ledger, logger: Any) -> Notifier | None:
    """The catalogue's Slack notifier, its outbox in the ledger; None without ``notify:``."""
    if catalogue.notify is None:
        return None
    outbox = Outbox(ledger.engine)
    return Notifier(catalogue.notify, catalogue=catalogue.key, outbox=outbox, logger=logger)


def stop_reason(lease: Lease, watcher: Watcher) -> str | None:
    """Why no more jobs may be submitted tonight, if there is a reason."""
    if (lost := lease.lost_reason) is not None:
        return f"not submitted: {lost}"
    return watcher_stopped(watcher)


def stamp() -> str:
    """Now, as a night's start and end are written."""
    return datetime.now(UTC).isoformat(timespec="seconds")
