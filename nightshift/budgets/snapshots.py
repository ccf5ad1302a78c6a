"""Budget snapshots in the ledger database: the budgets as last learned, and when.

One ``budget_snapshots`` row per build (when, from which window, how many dwells it read) and its
budgets in ``budget_rows``, every catalogue's: ``state`` rows (catalogue, label, state, backend),
``backend`` rows (catalogue, backend, state) and ``job`` rows (catalogue, label, backend). A
snapshot is written in one transaction, so a reader sees all of it or none of it. Only what was
learned is stored; the watch and alert thresholds and the basis are derived again on reading.
``build_snapshot`` stores every job's own p50 and p95 however few its samples: how many are
enough is each catalogue's ``defaults.min_samples``, applied by whoever reads (``at_least``,
``Budgets.from_records``), so one snapshot serves catalogues that differ.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from nightshift.budgets.columns import (
    BACKEND,
    BACKEND_BUDGET_COLUMNS,
    CATALOGUE,
    JOB_BUDGET_COLUMNS,
    LABEL,
    MIN_SAMPLES,
    P50,
    P95,
    SOURCE,
    SOURCE_N,
    STATE,
    STATE_BUDGET_COLUMNS,
    N,
)
from nightshift.store.db import UTCDateTime

if TYPE_CHECKING:
    import pandas as pd

    from nightshift.budgets.lookup import Budgets
    from nightshift.budgets.table import BudgetTables

__all__ = ["KEEP", "BudgetSnapshots", "Snapshot", "SnapshotInfo"]

KEEP = 12  # snapshots kept by default: a quarter of weekly builds

_metadata = sa.MetaData()

_snapshots = sa.Table(
    "budget_snapshots",
    _metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("built_at", UTCDateTime(), nullable=False),
    sa.Column("since", UTCDateTime(), nullable=False),  # the oldest dwell it could read
    sa.Column("dwells", sa.Integer, nullable=False),  # how many history rows it read
    sa.Index("ix_budget_snapshots_built_at", "built_at"),
)

# kind: "state" (catalogue, label, state, backend), "backend" (catalogue, backend, state; no
# label, no source) or "job" (catalogue, label, backend; no state); p50/p95 NULL while learning
_rows = sa.Table(
    "budget_rows",
    _metadata,
    sa.Column("snapshot_id", sa.Integer, nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("catalogue", sa.String(300), nullable=False),
    sa.Column("label", sa.String(200), nullable=True),
    sa.Column("backend", sa.String(64), nullable=True),
    sa.Column("state", sa.String(32), nullable=True),
    sa.Column("n", sa.Integer, nullable=False),
    sa.Column("p50", sa.Float, nullable=True),
    sa.Column("p95", sa.Float, nullable=True),
    sa.Column("source", sa.String(16), nullable=True),
    sa.Column("source_n", sa.Integer, nullable=True),
    sa.Index("ix_budget_rows_snapshot_catalogue", "snapshot_id", "catalogue"),
)

# each table's kind, the stored columns it has, and the columns its rows are sorted by
_STATE, _BACKEND, _JOB = "state", "backend", "job"
_STORED = {
    _STATE: [CATALOGUE, LABEL, STATE, BACKEND, N, P50, P95, SOURCE, SOURCE_N],
    _BACKEND: [CATALOGUE, BACKEND, STATE, N, P50, P95],
    _JOB: [CATALOGUE, LABEL, BACKEND, N, P50, P95, SOURCE, SOURCE_N],
}
_ORDER = {
    _STATE: [CATALOGUE, LABEL, STATE],
    _BACKEND: [CATALOGUE, BACKEND, STATE],
    _JOB: [CATALOGUE, LABEL],
}
_COLUMNS = {
    _STATE: STATE_BUDGET_COLUMNS,
    _BACKEND: BACKEND_BUDGET_COLUMNS,
    _JOB: JOB_BUDGET_COLUMNS,
}
_TEXT = {CATALOGUE, LABEL, STATE, BACKEND, SOURCE}


@dataclass(frozen=True)
class SnapshotInfo:
    """When a snapshot was built and from what."""

    id: int
    built_at: datetime  # aware, UTC: the ``now`` it was built for
    since: datetime  # the oldest dwell end it could read (built_at - the window)
    dwells: int  # the history rows it read


@dataclass(frozen=True)
class Snapshot:
    """A stored snapshot: its info and its three budget tables."""

    info: SnapshotInfo
    tables: BudgetTables


class BudgetSnapshots:
    """The budget snapshots behind an engine (the ledger's); thread-safe."""

    def __init__(self, engine: sa.Engine) -> None:
        """The schema is the ledger's: make a ``Ledger`` on the URL first (it upgrades it)."""
        self.engine = engine
        self._lock = threading.Lock()

    def save(
        self, tables: BudgetTables, *, built_at: datetime, since: datetime, dwells: int
    ) -> int:
        """Store ``tables`` (every catalogue's) as a new snapshot in one transaction; its id."""
        snapshot = sa.insert(_snapshots).values(built_at=built_at, since=since, dwells=dwells)
        with self._lock, self.engine.begin() as conn:
            snapshot_id = int(conn.execute(snapshot.returning(_snapshots.c.id)).scalar_one())
            for kind, frame in zip((_STATE, _BACKEND, _JOB), tables, strict=True):
                rows = _records(frame, kind, snapshot_id)
                if rows:
                    conn.execute(sa.insert(_rows), rows)
        return snapshot_id

    def latest_info(self) -> SnapshotInfo | None:
        """The newest snapshot's info (the latest built, the last stored of equals), or None."""
        with self.engine.begin() as conn:
            return _latest(conn)

    def latest(self, catalogue: str | None = None) -> Snapshot | None:
        """The newest snapshot (only ``catalogue``'s rows if given), or None when there is none."""
        with self.engine.begin() as conn:  # one transaction: a prune cannot come in between
            info = _latest(conn)
            return None if info is None else Snapshot(info, _tables(conn, info.id, catalogue))

    def latest_budgets(
        self, catalogue: str | None = None, *, min_samples: int = MIN_SAMPLES
    ) -> tuple[SnapshotInfo, Budgets] | None:
        """The newest snapshot's info and its budgets of at least ``min_samples`` samples, read
        as rows: what a night watches with, without pandas (~50 MB a night spends better on its
        jobs). None when there is none."""
        from nightshift.budgets.lookup import Budgets

        with self.engine.begin() as conn:  # one transaction: a prune cannot come in between
            info = _latest(conn)
            if info is None:
                return None
            rows = {
                kind: [row._asdict() for row in conn.execute(_rows_of(info.id, kind, catalogue))]
                for kind in _STORED
            }
        budgets = Budgets.from_records(
            rows[_STATE], rows[_BACKEND], rows[_JOB], min_samples=min_samples
        )
        return info, budgets

    def tables(self, snapshot_id: int, catalogue: str | None = None) -> BudgetTables:
        """The budget tables of one snapshot, as ``budget_tables`` made them."""
        with self.engine.begin() as conn:
            return _tables(conn, snapshot_id, catalogue)

    def prune(self, *, keep: int = KEEP, before: datetime | None = None) -> int:
        """Delete all but the ``keep`` newest snapshots, and those built before ``before``.

        The newest snapshot always stays, whatever the arguments. Returns how many were deleted.
        """
        s = _snapshots.c
        newest = sa.select(s.id).order_by(s.built_at.desc(), s.id.desc()).limit(max(1, keep))
        with self._lock, self.engine.begin() as conn:
            kept = [row.id for row in conn.execute(newest)]
            if not kept:
                return 0
            doomed: sa.ColumnElement[bool] = s.id.not_in(kept)
            if before is not None:
                doomed = sa.or_(doomed, s.built_at < before)
            query = sa.select(s.id).where(doomed, s.id != kept[0])
            ids = [row.id for row in conn.execute(query)]
            if ids:
                conn.execute(sa.delete(_rows).where(_rows.c.snapshot_id.in_(ids)))
                conn.execute(sa.delete(_snapshots).where(s.id.in_(ids)))
        return len(ids)


def _records(frame: pd.DataFrame, kind: str, snapshot_id: int) -> list[dict[str, Any]]:
    """The stored columns of ``frame`` as rows to insert: NaN (learning) is NULL."""
    stored = frame[_STORED[kind]]
    # object first, so that a missing value becomes None and numbers stay Python numbers
    plain = stored.astype(object).where(stored.notna(), None)
    return [{"snapshot_id": snapshot_id, "kind": kind, **row} for row in plain.to_dict("records")]


def _latest(conn: sa.Connection) -> SnapshotInfo | None:
    s = _snapshots.c
    query = sa.select(_snapshots).order_by(s.built_at.desc(), s.id.desc()).limit(1)
    row = conn.execute(query).first()
    return None if row is None else SnapshotInfo(**row._asdict())


def _tables(conn: sa.Connection, snapshot_id: int, catalogue: str | None) -> BudgetTables:
    from nightshift.budgets.table import BudgetTables

    frames = [
        _frame(conn.execute(_rows_of(snapshot_id, kind, catalogue)).all(), kind) for kind in _STORED
    ]
    return BudgetTables(*frames)


def _rows_of(snapshot_id: int, kind: str, catalogue: str | None) -> sa.Select[Any]:
    """The stored columns of one snapshot's rows of one kind (one catalogue's if given)."""
    query = sa.select(*(_rows.c[c] for c in _STORED[kind]))
    query = query.where(_rows.c.snapshot_id == snapshot_id, _rows.c.kind == kind)
    if catalogue is not None:
        query = query.where(_rows.c.catalogue == catalogue)
    return query


def _frame(rows: Sequence[Any], kind: str) -> pd.DataFrame:
    """One budget table from its rows: the dtypes, order and derived columns it was saved with."""
    import pandas as pd

    from nightshift.budgets.table import thresholds

    columns = _STORED[kind]
    frame = pd.DataFrame([tuple(row) for row in rows], columns=columns)
    dtypes = {c: str if c in _TEXT else "float64" for c in columns}
    dtypes.update({N: "int64", SOURCE_N: "int64"} if kind != _BACKEND else {N: "int64"})
    frame = frame.astype(dtypes)
    if kind != _BACKEND:
        frame = thresholds(frame)
    return frame.sort_values(_ORDER[kind], ignore_index=True)[_COLUMNS[kind]]
