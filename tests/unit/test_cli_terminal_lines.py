"""The lines a night says on the terminal at once (a ledger that cannot write, spans dropped):
one each, however often ``main`` runs in one process, on the stderr of the moment."""

from __future__ import annotations

import logging

import pytest

from nightshift.cli.main import _say_at_once


def test_a_line_is_said_once_however_often_main_set_it_up(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for _ in range(3):  # three commands run in one process (a test's, a notebook's)
        _say_at_once("nightshift.ledger")
    logging.getLogger("nightshift.ledger").error("the ledger cannot write (x): full")
    err = capsys.readouterr().err
    assert err.count("nightshift: the ledger cannot write (x): full") == 1, err
