"""What a night is set up from: its prepared night, its Slack notifier, and whether it may
still submit."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nightshift.config.catalogue import Catalogue
from nightshift.engine.night import watcher_stopped
from nightshift.engine.stopping import NightStop
from nightshift.engine.watcher import Watcher
from nightshift.errors import CatalogueError
from nightshift.notify.notifier import Notifier
from nightshift.orchestration.prepared_night import PreparedNight, prepare_night
from nightshift.store.lease import Lease
from nightshift.store.ledger import Ledger
from nightshift.store.outbox import Outbox

__all__ = ["NightSetup", "notifier_for", "prepared_or_none", "stamp", "stop_reason"]


@dataclass(frozen=True)
class NightSetup:
    """A night as its flow set it up: what it runs, writes to, tells, and closes at its end."""

    prepared: PreparedNight
    stop: NightStop
    notifier: Notifier | None
    logger: Any


def prepared_or_none(
    catalog: str,
    only: list[str] | None,
    night: str | None,
    run_dir: str | None,
    scheduled: datetime | None,
    logger: Any,
) -> PreparedNight | None:
    """A deployed run's night (``prepare_night``), or None after one ERROR line naming the
    catalogue's absolute path (no traceback) when the catalogue is invalid."""
    try:
        # a deployed run reads it from the folder it was deployed from: say which file that is
        where = Path(catalog).absolute()
        return prepare_night(where, only=only, night=night, run_dir=run_dir, scheduled=scheduled)
    except CatalogueError as exc:
        logger.error("%s", exc.one_line())
        return None


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
