"""A SQLite ledger's WAL mode, switched to by whichever connection comes first.

Two connections switching a new file at once can deadlock, and SQLite answers one of them
"database is locked" at once, without its busy handler (CI at c879720: one of two processes
opening a new ledger failed so; six processes racing on a loaded machine, 1 race in 30-34).
The refusal is injected here into a real connection; the race itself:
``tests/store/test_ledger_migrations.py::test_processes_starting_together_upgrade_once``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from nightshift.store.db import use_wal


class _Refusing(sqlite3.Connection):
    """A real connection whose first ``refusals`` switches to WAL fail as the refused side of
    that deadlock does (or with ``error``)."""

    refusals = 0
    error = "database is locked"
    switches = 0

    def cursor(self, factory: Any = None) -> Any:
        return super().cursor(_RefusingCursor)


class _RefusingCursor(sqlite3.Cursor):
    def execute(self, sql: str, parameters: Any = (), /) -> Any:
        conn = self.connection
        assert isinstance(conn, _Refusing)
        if sql == "PRAGMA journal_mode = WAL":
            conn.switches += 1
            if conn.refusals > 0:
                conn.refusals -= 1
                raise sqlite3.OperationalError(conn.error)
        return super().execute(sql, parameters)


def _connect(path: Path, refusals: int, error: str = "database is locked") -> _Refusing:
    conn = sqlite3.connect(path, factory=_Refusing)
    assert isinstance(conn, _Refusing)
    conn.refusals, conn.error = refusals, error
    return conn


def _mode(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0])


def test_a_switch_refused_at_once_is_tried_again(tmp_path: Path) -> None:
    conn = _connect(tmp_path / "ledger.sqlite3", refusals=2)
    try:
        use_wal(conn, wait_s=30.0)
        assert conn.switches == 3
    finally:
        conn.close()
    assert _mode(tmp_path / "ledger.sqlite3") == "wal"


def test_a_file_already_in_wal_is_not_switched_again(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    with sqlite3.connect(path) as first:
        first.execute("PRAGMA journal_mode = WAL")
    conn = _connect(path, refusals=1)  # a switch now would be refused: none is asked
    try:
        use_wal(conn, wait_s=30.0)
        assert conn.switches == 0
    finally:
        conn.close()


def test_a_switch_refused_for_longer_than_the_wait_says_so(tmp_path: Path) -> None:
    conn = _connect(tmp_path / "ledger.sqlite3", refusals=10**6)
    try:
        with pytest.raises(sqlite3.OperationalError, match="database is locked"):
            use_wal(conn, wait_s=0.05)
        assert conn.switches >= 2
    finally:
        conn.close()


def test_another_error_is_not_tried_again(tmp_path: Path) -> None:
    conn = _connect(tmp_path / "ledger.sqlite3", refusals=1, error="disk I/O error")
    try:
        with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):
            use_wal(conn, wait_s=30.0)
        assert conn.switches == 1
    finally:
        conn.close()
