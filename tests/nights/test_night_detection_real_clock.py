"""Dwell detection on the real clock: the timer alone sees a wait pass its levels, no poll.

Not in the unit layer (tests/unit/test_night_detection.py, on the fake clock): it waits two
real seconds, on purpose.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nightshift.engine.events import LevelChanged
from nightshift.store.alert_log import AlertLog
from nightshift.store.ledger import Ledger
from tests.dwell_night import S, dwell_night, rows
from tests.support import wait_until


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}", "test")
    yield ledger
    ledger.close()


def test_levels_change_on_the_real_clock_with_no_poll(
    tmp_path: Path, ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nightshift.budgets.lookup import Budget, Budgets

    quick = Budgets(states={("test", "slow", "submitted"): Budget(0.5, 1.0, 20)})
    # no floor here (an hour's polls would make it 3 h): the timer alone must see 1 s, then 2 s
    monkeypatch.setattr("nightshift.engine.dwell_watch.dwell_floor", lambda _poll: 0.0)
    # polled once an hour: only the timer can see the wait pass 1 s, then 2 s
    with dwell_night(
        tmp_path, ledger, [S], lambda _l, _n, _m: quick, poll="1h", real_clocks=True
    ) as n:
        wait_until(lambda: len(rows(ledger)) == 2, what="watch and alert", timeout=20)
        n.ctx.watcher.stop()
    assert n.backend.calls["slow"] == 0
    watch, alert = (e.alert for e in n.events if isinstance(e, LevelChanged))
    assert (watch.level, alert.level) == ("watch", "alert")
    assert 1.0 < watch.dwell_s < 1.0 + 1.0 and 2.0 < alert.dwell_s < 2.0 + 1.0
    assert [r.level for r in AlertLog(ledger.engine).alerts()] == ["watch", "alert"]
