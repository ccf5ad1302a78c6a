"""PostgreSQL refusing connections for 30 s mid-night: shorter than the lease's TTL it costs
nothing; longer, the night ends by the lease-lost path and the rerun re-attaches.

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
from pathlib import Path

import pytest
import sqlalchemy as sa

from nightshift.store.ledger import Ledger
from tests.support import REPO, wait_until

PG = os.environ.get("NIGHTSHIFT_TEST_POSTGRES_URL", "")
NIGHT = "2026-12-01"
OUTAGE_S = 30.0
CATALOGUE = """\
name: outage
defaults: {poll: {initial: 0.5s, max: 2s}, stagger: 0s, retries: 1}
jobs:
  - {label: a, backend: cli, task: "a [queue=0 run=%(a)s]"}
  - {label: b, backend: cli, task: "b [queue=0 run=%(b)s]"}
  - {label: c, backend: cli, task: "c [queue=0 run=3]", depends_on: [a]}
"""

pytestmark = [
    pytest.mark.usefixtures("prefect_server"),
    pytest.mark.skipif(not PG, reason="NIGHTSHIFT_TEST_POSTGRES_URL is not set"),
]


def _admin() -> sa.Engine:
    """A connection to the server's ``postgres`` database, only to manage our own one."""
    url = sa.make_url(PG).set(database="postgres")
    return sa.create_engine(url, isolation_level="AUTOCOMMIT")


@pytest.fixture
def own_db() -> Iterator[str]:
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


def test_an_outage_shorter_than_the_lease_ttl_costs_nothing(sandbox: Path, own_db: str) -> None:
    path = sandbox / "nightshift.yaml"
    path.write_text(CATALOGUE % {"a": 8, "b": 45})
    night = start(path, night_env(sandbox, own_db))
    when_a_and_b_run(Ledger(own_db, "outage"), night)
    outage(own_db, OUTAGE_S)
    code, summary = finish(night)
    states = {job["label"]: (job["state"], job["attempts"]) for job in summary["jobs"]}
    assert (code, states) == (0, {x: ("succeeded", 1) for x in "abc"}), summary
    assert all(job["external_id"] for job in summary["jobs"])
    ledger = Ledger(own_db, "outage")
    chains = each_transition_once(ledger)
    print(f"outage {OUTAGE_S:g}s, exit {code}, states {states}, transitions {chains}")
    assert {label: states[-1] for label, states in chains.items()} == dict.fromkeys(
        "abc", "succeeded"
    )
    for label in "abc":
        record = ledger.get_job(NIGHT, label)
        assert record is not None and (record.state, record.attempts) == ("succeeded", 1)
        assert record.external_id == next(
            j["external_id"] for j in summary["jobs"] if j["label"] == label
        )
    ledger.close()
    assert len(list((sandbox / "agy" / "jobs").glob("agy-*.json"))) == 3  # each once


def test_an_outage_past_the_ttl_ends_the_night_and_the_rerun_reattaches(
    sandbox: Path, own_db: str
) -> None:
    path = sandbox / "nightshift.yaml"
    # a ends early in the outage, before the lease lapses: its final write meets no database
    path.write_text(CATALOGUE % {"a": 4, "b": 40})
    env = night_env(sandbox, own_db, ttl=10)
    night = start(path, env)
    when_a_and_b_run(Ledger(own_db, "outage"), night)
    outage(own_db, OUTAGE_S)
    _code, summary = finish(night)
    jobs = {job["label"]: job for job in summary["jobs"]}
    for label in "ab":  # submitted before the outage: never "failed, attempts 0"
        assert jobs[label]["external_id"] and jobs[label]["attempts"] == 1, summary
        assert jobs[label]["state"] != "failed", summary
    # the lease was given back once the database answered: the rerun starts at once
    rerun = start(path, env)
    code, again = finish(rerun)
    assert code == 0, again
    assert {j["label"]: j["state"] for j in again["jobs"]} == dict.fromkeys("abc", "succeeded")
    for label in "ab":  # re-attached, not submitted again
        rerun_job = next(j for j in again["jobs"] if j["label"] == label)
        assert rerun_job["external_id"] == jobs[label]["external_id"]
    assert len(list((sandbox / "agy" / "jobs").glob("agy-*.json"))) == 3
    ledger = Ledger(own_db, "outage")
    chains = each_transition_once(ledger)
    ledger.close()
    first = {x: (j["state"], j["attempts"], j["external_id"]) for x, j in jobs.items()}
    print(
        f"outage {OUTAGE_S:g}s past ttl 10s: first night exit {_code} {first}; rerun exit "
        f"{code}; transitions {chains}"
    )
