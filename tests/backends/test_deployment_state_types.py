"""The deployment backend's state table against Prefect's own list of state types.

Not in the unit layer (tests/unit/test_deployment_states.py, on plain values): it imports Prefect.
"""

from __future__ import annotations

from nightshift.backends.deployment_states import STATE_TYPES
from tests.unit.test_deployment_states import EXPECTED


def test_the_table_covers_every_state_type_prefect_has() -> None:
    from prefect.client.schemas.objects import StateType

    assert set(STATE_TYPES) == {t.value for t in StateType} == set(EXPECTED)
