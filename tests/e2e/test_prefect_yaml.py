"""prefect.yaml: every flow deployed, parameters valid, one place for the time zone and hours."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from nightshift.config.timers import schedule_interval

REPO = Path(__file__).resolve().parents[2]
CONFIG = yaml.safe_load((REPO / "prefect.yaml").read_text())
DEPLOYMENTS = {d["name"]: d for d in CONFIG["deployments"]}


def test_every_flow_has_its_deployment_and_schedule() -> None:
    assert {name: d["entrypoint"] for name, d in DEPLOYMENTS.items()} == {
        "nightly-batch-daily": "flows/nightly.py:nightly",
        "budgets-weekly": "flows/budgets.py:budgets",
        "watchdog": "flows/watchdog.py:watchdog",
        "ledger-retention-daily": "flows/retention.py:retention",
    }
    assert DEPLOYMENTS["nightly-batch-daily"]["schedules"][0]["cron"] == "0 2 * * *"
    assert DEPLOYMENTS["watchdog"]["schedules"][0]["interval"] == 600
    for name, d in DEPLOYMENTS.items():
        assert d["work_pool"]["name"] == "nightshift"
        # the nightly's runs wait their turn (a late run must not cancel tonight's); the others'
        # runs never pile up
        strategy = "ENQUEUE" if name == "nightly-batch-daily" else "CANCEL_NEW"
        assert d["concurrency_limit"] == {"limit": 1, "collision_strategy": strategy}


@pytest.mark.parametrize("name", sorted(DEPLOYMENTS))
def test_parameters_are_valid_against_the_flows_signature(name: str) -> None:
    from prefect.flows import load_flow_from_entrypoint

    deployment: dict[str, Any] = DEPLOYMENTS[name]
    flow = load_flow_from_entrypoint(str(REPO / deployment["entrypoint"]))
    parameters = deployment.get("parameters") or {}

    assert set(parameters) <= set(flow.parameters.properties)
    flow.validate_parameters(parameters)  # raises on a wrong type or a missing required one


def test_one_change_moves_every_schedule_to_another_time_zone(tmp_path: Path) -> None:
    text = (REPO / "prefect.yaml").read_text()
    assert text.count('timezone: "UTC"') == 1  # the anchor; every schedule merges it
    tokyo = yaml.safe_load(text.replace('timezone: "UTC"', 'timezone: "Asia/Tokyo"'))

    assert {s["timezone"] for d in tokyo["deployments"] for s in d["schedules"]} == {"Asia/Tokyo"}


def test_the_watchdogs_interval_is_not_taken_for_the_catalogues_nights(tmp_path: Path) -> None:
    # schedule_interval warns about timers longer than the gap between two nights: it must read
    # the nightly deployment's schedule, not the watchdog's (which takes no catalogue)
    # (listed first, so taking the first deployment with a schedule is not enough)
    config = yaml.safe_load((REPO / "prefect.yaml").read_text())
    config["deployments"].sort(key=lambda d: d["name"] != "watchdog")
    (tmp_path / "prefect.yaml").write_text(yaml.safe_dump(config))

    gap, source = schedule_interval(tmp_path / "nightshift.yaml")

    assert gap == 86400.0
    assert source == "schedule of deployment 'nightly-batch-daily' in prefect.yaml"
