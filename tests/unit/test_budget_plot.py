"""The budgets picture's order of states (drawing it is in tests/nights/test_pictures.py)."""

from __future__ import annotations

from nightshift.budgets.plot import state_order


def test_states_follow_the_lifecycle_then_their_names() -> None:
    got = state_order(["running", "zeta", "queued", "alpha", "submitting", "fallback"])
    assert got == ["submitting", "queued", "running", "fallback", "alpha", "zeta"]
