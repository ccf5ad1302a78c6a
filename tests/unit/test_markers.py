"""`-m` picks layers by folder: the folders it cannot select are not even collected."""

from __future__ import annotations

import pytest

from tests.conftest import _could_select, _only_unit


@pytest.mark.parametrize("expression", ["unit", "unit and not slow", "(unit)", "unit or unit"])
def test_an_expression_of_the_unit_layer_alone(expression: str) -> None:
    assert _only_unit(expression)


@pytest.mark.parametrize("expression", ["", "not unit", "unit or store", "slow", "not slow"])
def test_an_expression_that_may_select_other_layers(expression: str) -> None:
    assert not _only_unit(expression)


def test_a_folder_is_skipped_only_when_no_marker_of_its_tests_could_match() -> None:
    assert not _could_select("unit", "store")
    assert _could_select("store and not unit", "store")
    assert _could_select("slow", "e2e")  # a test there may carry `slow`: collect it
    assert not _could_select("unit and slow", "e2e")
