"""``nightshift`` whose ledger finds its disk full while a file exists (``NIGHTSHIFT_TEST_FULL``):
every write of a job's state then fails as SQLite says it on a full disk. For the tests that stop
such a night from outside (``tests/e2e/test_full_disk_signal.py``): run as
``python -m tests.full_disk_cli run ...``."""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from nightshift.cli.main import main
from nightshift.store.ledger import Ledger

FULL = Path(os.environ["NIGHTSHIFT_TEST_FULL"])


def _failing(write: Any) -> Any:
    def written(self: Ledger, *args: Any, **kwargs: Any) -> Any:
        if FULL.exists():
            full = sqlite3.OperationalError("database or disk is full")
            raise sa.exc.OperationalError("INSERT", {}, full)
        return write(self, *args, **kwargs)

    return written


for _name in ("transitions", "record_state", "record_submit"):
    setattr(Ledger, _name, _failing(getattr(Ledger, _name)))

if __name__ == "__main__":
    sys.exit(main())
