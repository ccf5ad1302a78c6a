"""Fixtures of the nights layer shared by more than one of its files."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.database_outage import own_database


@pytest.fixture
def own_db() -> Iterator[str]:
    """A PostgreSQL database of the test's own, dropped afterwards: an outage touches nobody
    else's (``tests/database_outage.py``)."""
    with own_database() as url:
        yield url
