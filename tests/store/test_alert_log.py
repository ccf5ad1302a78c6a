"""The alert log keeps each (catalogue, night, label, kind, state, level) once, on both DBs."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

from nightshift.store.alert_log import DWELL, STOPPED, AlertLog, AlertRecord
from nightshift.store.ledger import Ledger

T0 = datetime(2026, 11, 29, 1, 0, tzinfo=UTC)


def _alert(level: str = "watch", **changes: object) -> AlertRecord:
    fields: dict[str, object] = {
        "catalogue": "nightly.yaml",
        "night": "2026-11-29",
        "label": "etl",
        "kind": DWELL,
        "state": "queued",
        "level": level,
        "raised_by": "night",
        "at": T0,
        "dwell_s": 120.0,
        "p95_s": 100.0,
    }
    fields.update(changes)
    return AlertRecord(**fields)  # type: ignore[arg-type]


def test_a_level_is_kept_once_and_read_back(db_url: str) -> None:
    log = AlertLog(Ledger(db_url, "nightly.yaml").engine)

    assert log.record(_alert("watch")) is True
    assert log.record(_alert("watch", at=T0 + timedelta(minutes=5), raised_by="watchdog")) is False
    assert log.record(_alert("alert", dwell_s=201.0)) is True
    # another catalogue, night, state or kind is another key
    assert log.record(_alert("watch", catalogue="other.yaml")) is True
    assert log.record(_alert("watch", night="2026-11-30")) is True
    assert log.record(_alert("watch", state="running")) is True
    assert log.record(_alert("alert", kind=STOPPED, state="", detail="lease expired")) is True

    assert log.raised("nightly.yaml", "2026-11-29") == {
        ("etl", "queued", "watch"),
        ("etl", "queued", "alert"),
        ("etl", "running", "watch"),
    }
    rows = log.alerts(catalogue="nightly.yaml", night="2026-11-29")
    assert [r.key[3:] for r in rows] == [
        (DWELL, "queued", "watch"),
        (DWELL, "queued", "alert"),
        (DWELL, "running", "watch"),
        (STOPPED, "", "alert"),
    ]
    assert rows[0] == _alert("watch")  # the first write won; times come back aware
    assert log.alerts(since=T0 + timedelta(seconds=1)) == []


def test_two_writers_racing_on_one_key_keep_one_row(db_url: str) -> None:
    ledger = Ledger(db_url, "nightly.yaml")
    logs = [AlertLog(ledger.engine), AlertLog(Ledger(db_url, "nightly.yaml").engine)]
    results: list[bool] = []
    start = threading.Barrier(2)

    def raise_it(log: AlertLog) -> None:
        start.wait()
        results.append(log.record(_alert("alert")))

    threads = [threading.Thread(target=raise_it, args=(log,)) for log in logs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert sorted(results) == [False, True]
    assert len(logs[0].alerts()) == 1
