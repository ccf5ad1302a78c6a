"""PostgreSQL refusing connections for 30 s mid-night, shorter than the lease's TTL: it costs
nothing (past the TTL: ``test_database_outage_past_ttl.py``; the parts:
``tests/database_outage.py``).
"""

from __future__ import annotations

from pathlib import Path

from nightshift.store.ledger import Ledger
from tests.database_outage import (
    CATALOGUE,
    MARKS,
    NIGHT,
    OUTAGE_S,
    each_transition_once,
    finish,
    night_env,
    outage,
    start,
    when_a_and_b_run,
)

pytestmark = MARKS


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
