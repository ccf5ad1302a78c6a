"""A night prepared once: what ``nightshift run`` checks before it starts, and the flow then runs.

No Prefect here: the CLI prepares its night (and says what is wrong, in one line) before it
reaches the Prefect API; a deployed run without one prepares its own inside the flow.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

from nightshift.config.catalogue import Catalogue
from nightshift.config.loader import load_catalogue
from nightshift.config.settings import Settings, load_settings
from nightshift.engine.plan import Plan, check_only, expected_durations, plan_night, which_night
from nightshift.errors import NightArgumentError
from nightshift.store.db import db_now
from nightshift.store.lease import Lease
from nightshift.store.lease_owner import gone_here
from nightshift.store.ledger import Ledger

__all__ = ["PreparedNight", "prepare_night", "run_dir_for"]


class PreparedNight:
    """A night ready to run: its settings, catalogue, date, selection, plan, open ledger and
    run folder. Whoever runs it closes its ledger (the flow, at the night's end).

    Handed to the flow as a code-only parameter. Slots, not a dataclass: Prefect neither walks
    into it nor encodes it for the API (with no ``__dict__`` it stores a placeholder).
    """

    __slots__ = ("catalogue", "ledger", "night", "only", "plan", "run_path", "settings")

    def __init__(
        self,
        *,
        settings: Settings,
        catalogue: Catalogue,
        night: str,
        only: list[str] | None,
        plan: Plan,
        ledger: Ledger,
        run_path: Path,
    ) -> None:
        self.settings = settings
        self.catalogue = catalogue
        self.night = night
        self.only = only
        self.plan = plan
        self.ledger = ledger
        self.run_path = run_path

    def lease_holder(self, now: datetime | None = None) -> tuple[str, float] | None:
        """Who holds the catalogue's lease and its seconds left; None when it is free or expired
        (a crashed night's lease: this night takes it over), on the ledger's clock as the lease
        decides it (``now``: a SQLite ledger's, this host's); None too when its holder was a
        process of this machine that is gone (``lease_owner.gone_here``: taken over at once).
        Raises the database's errors."""
        engine = self.ledger.engine
        holder = Lease(engine, self.catalogue.key).holder()
        if holder is None:
            return None
        owner, expires_at = holder
        left = (expires_at - db_now(engine, lambda: now or datetime.now(UTC))).total_seconds()
        return (owner, left) if left > 0 and not gone_here(owner) else None

    def listed_labels(self) -> list[str]:
        """The night's jobs as the catalogue lists them, chains after (a table's rows)."""
        place = {job.label: i for i, job in enumerate(self.catalogue.jobs)}
        chained = [label for chain in self.plan.chains for label in chain]
        return [*sorted(self.plan.independent, key=place.__getitem__), *chained]

    def close(self) -> None:
        """Release the ledger's connections (the night will not run)."""
        self.ledger.close()


def prepare_night(
    catalog: str | Path,
    *,
    only: list[str] | None = None,
    night: str | None = None,
    run_dir: str | None = None,
    scheduled: datetime | None = None,
) -> PreparedNight:
    """Read, check and plan a night of ``catalog`` (the night of ``scheduled`` by default).

    Raises what a caller says in one line, in this order: ``NightArgumentError`` (a
    ``ValueError``) for a ``night`` that is no date, ``CatalogueError``, ``NightArgumentError``
    for an ``only`` naming no job of the catalogue, the database's errors for a ledger that
    cannot be opened or read.
    """
    try:
        night = which_night(night, scheduled)
    except ValueError as exc:
        raise NightArgumentError(str(exc)) from None
    catalogue = load_catalogue(catalog)
    try:
        check_only(catalogue, only)
    except ValueError as exc:
        raise NightArgumentError(f"{catalog}: {exc}") from None
    settings = load_settings()
    ledger = Ledger(settings.ledger_url(), catalogue.key)
    try:
        # long jobs start first: their usual durations in the ledger's recent nights
        plan = plan_night(catalogue, only, expected_durations(catalogue, ledger))
    except BaseException:
        ledger.close()
        raise
    return PreparedNight(
        settings=settings,
        catalogue=catalogue,
        night=night,
        only=only,
        plan=plan,
        ledger=ledger,
        run_path=Path(run_dir) if run_dir else run_dir_for(settings, night),
    )


def run_dir_for(settings: Settings, night: str) -> Path:
    """Where a night's summary and log tails go by default."""
    stamp = datetime.now(UTC).strftime("%H%M%S")
    return settings.state_dir / "runs" / night / f"{stamp}-{uuid.uuid4().hex[:6]}"
