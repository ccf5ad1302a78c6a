"""PostgreSQL refusing connections for 30 s mid-night, longer than the lease's TTL: the night
ends by the lease-lost path and the rerun re-attaches (shorter: ``test_database_outage.py``).
"""

from __future__ import annotations

from pathlib import Path

from nightshift.store.ledger import Ledger
from tests.database_outage import (
    CATALOGUE,
    MARKS,
    OUTAGE_S,
    each_transition_once,
    finish,
    night_env,
    outage,
    start,
    when_a_and_b_run,
)

pytestmark = MARKS


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
