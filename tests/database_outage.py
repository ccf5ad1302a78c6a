"""PostgreSQL refusing connections mid-night, for the outage tests (``tests/nights/
test_database_outage*.py``, two files so that their two 30 s outages can run side by side on two
test workers).

A database of the test's own (``ALTER DATABASE ... ALLOW_CONNECTIONS false`` and terminating its
backends is the outage); a real ``nightshift run`` against the session's Prefect server.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa

from nightshift.store.ledger import Ledger
from tests.support import REPO, wait_until

PG = os.environ.get("NIGHTSHIFT_TEST_POSTGRES_URL", "")
NIGHT = "2026-12-01"
# each outage test's marks: a night on the session's Prefect server, on PostgreSQL
MARKS = [
    pytest.mark.usefixtures("prefect_server"),
    pytest.mark.skipif(not PG, reason="NIGHTSHIFT_TEST_POSTGRES_URL is not set"),
]
OUTAGE_S = 30.0
CATALOGUE = """\
name: outage
defaults: {poll: {initial: 0.5s, max: 2s}, stagger: 0s, retries: 1}
jobs:
  - {label: a, backend: cli, task: "a [queue=0 run=%(a)s]"}
  - {label: b, backend: cli, task: "b [queue=0 run=%(b)s]"}
  - {label: c, backend: cli, task: "c [queue=0 run=3]", depends_on: [a]}
"""


def _admin() -> sa.Engine:
    """A connection to the server's ``postgres`` database, only to manage our own one."""
    url = sa.make_url(PG).set(database="postgres")
    return sa.create_engine(url, isolation_level="AUTOCOMMIT")


@contextmanager
def own_database() -> Iterator[str]:
    """A database of this test's own: the outage touches nobody else's."""
    name = f"ns_outage_{uuid.uuid4().hex[:10]}"
    admin = _admin()
    with admin.connect() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {name}"))
    yield str(sa.make_url(PG).set(database=name).render_as_string(hide_password=False))
    with admin.connect() as conn:
        conn.execute(sa.text(f"ALTER DATABASE {name} WITH ALLOW_CONNECTIONS true"))
        conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
    admin.dispose()


def outage(url: str, seconds: float) -> None:
    """Refuse every connection to the database for ``seconds``, cutting the open ones."""
    name = sa.make_url(url).database
    admin = _admin()
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f"ALTER DATABASE {name} WITH ALLOW_CONNECTIONS false"))
            conn.execute(
                sa.text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = :name AND pid <> pg_backend_pid()"
                ),
                {"name": name},
            )
        time.sleep(seconds)  # the outage itself: its length is what the test is about
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f"ALTER DATABASE {name} WITH ALLOW_CONNECTIONS true"))
        admin.dispose()


def start(path: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "nightshift.cli.main", "run", "--catalog", str(path)]
    return subprocess.Popen(
        [*argv, "--night", NIGHT, "--json"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(night: subprocess.Popen[str]) -> tuple[int, dict]:
    out, err = night.communicate(timeout=600)
    lines = out.strip().splitlines()
    assert lines, err[-3000:]
    return night.returncode, json.loads(lines[-1])


def night_env(sandbox: Path, url: str, ttl: float | None = None) -> dict[str, str]:
    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value())}
    env["NIGHTSHIFT_DATABASE_URL"] = url
    if ttl is not None:
        env["NIGHTSHIFT_LEASE_TTL"] = str(ttl)
    return env


def when_a_and_b_run(ledger: Ledger, night: subprocess.Popen[str]) -> None:
    def running() -> bool:
        assert night.poll() is None, night.communicate()[1][-3000:]
        seen = {t.label for t in ledger.dwells(NIGHT) if t.to_state == "running"}
        return {"a", "b"} <= seen

    wait_until(running, 240, "jobs a and b to run", interval=0.3)
    ledger.close()  # its connections would be cut anyway


def each_transition_once(ledger: Ledger) -> dict[str, list[str]]:
    chains: dict[str, list[str]] = {}
    for row in ledger.dwells(NIGHT):
        chains.setdefault(row.label, []).append(row.to_state)
    for label, states in chains.items():
        repeats = [s for s, t in itertools.pairwise(states) if s == t]
        assert not repeats, f"{label}: {states}"
        assert len(states) == len(set(states)), f"{label}: {states}"
    return chains
