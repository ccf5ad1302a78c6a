"""The command supervisor's first non-empty stderr line, read in chunks as a pipe gives them."""

from __future__ import annotations

from nightshift.backends.command.supervisor import _FirstLine


def test_a_line_split_across_chunks_is_taken_whole_once() -> None:
    first = _FirstLine()
    assert first.feed(b"\n  \nbroken li") is None
    assert first.feed(b"nk: /about -> 404\nsecond\n") == "broken link: /about -> 404"
    assert first.feed(b"third\n") is None
    assert first.line == "broken link: /about -> 404"


def test_a_last_line_without_newline_counts_at_the_end() -> None:
    first = _FirstLine()
    assert first.feed(b"\nno newline") is None
    assert first.feed(b"", last=True) == "no newline"


def test_a_huge_line_is_cut_without_waiting_for_its_end() -> None:
    first = _FirstLine()
    assert first.feed(b"x" * 70_000) == "x" * 500
