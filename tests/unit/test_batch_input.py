"""Batch input validation (pure)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nightshift.backends.gemini.batch_input import (
    BatchRow,
    load_batch_input,
    parse_batch_input,
    render_rows,
    sdk_request,
)
from nightshift.errors import InputFileError

REQUEST = {"contents": [{"role": "user", "parts": [{"text": "hello"}]}]}


def line(key: object = "a", request: object = REQUEST) -> str:
    return json.dumps({"key": key, "request": request})


def problems(text: str) -> list[tuple[int, str]]:
    with pytest.raises(InputFileError) as info:
        parse_batch_input(text, "in.jsonl")
    return [(p.line, p.reason) for p in info.value.problems]


def test_valid_file_gives_rows_in_order() -> None:
    rows = parse_batch_input(line("a") + "\n" + line("b") + "\n")
    assert rows == [BatchRow("a", REQUEST, 1), BatchRow("b", REQUEST, 2)]


def test_missing_final_newline_is_fine() -> None:
    assert [r.key for r in parse_batch_input(line("a"))] == ["a"]


@pytest.mark.parametrize("blank", ["", "   ", "\t"])
def test_blank_lines_are_rejected(blank: str) -> None:
    assert problems(f"{line('a')}\n{blank}\n{line('b')}\n") == [(2, "blank line")]


def test_record_split_across_lines_is_named_once() -> None:
    text = '{"key": "a",\n "request":\n {"contents": [{"parts": [{"text": "x"}]}]}}\n' + line("b")
    [(number, reason)] = problems(text)
    assert number == 1 and reason.startswith("record split across lines 1-3")


def test_invalid_json_is_not_mistaken_for_a_split_record() -> None:
    [(number, reason)] = problems('{"key": "a", oops\n' + line("b"))
    assert number == 1 and reason.startswith("invalid JSON")


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        ({"request": REQUEST}, "missing 'key'"),
        ({"key": 3, "request": REQUEST}, "'key' must be a string, got int"),
        ({"key": " ", "request": REQUEST}, "'key' is empty"),
        ({"key": "a"}, "missing 'request' object"),
        ({"key": "a", "request": {"generationConfig": {}}}, "request has no 'contents'"),
        ({"key": "a", "request": {"contents": "hi"}}, "request 'contents' must be a list"),
    ],
)
def test_bad_records(record: dict, reason: str) -> None:
    assert problems(json.dumps(record)) == [(1, reason)]


def test_non_object_line() -> None:
    assert problems("[1, 2]") == [(1, "expected a JSON object, got list")]


def test_duplicate_key_names_the_first_line() -> None:
    text = "\n".join([line("a"), line("b"), line("a"), line("a")])
    assert problems(text) == [
        (3, "duplicate key 'a' (first on line 1)"),
        (4, "duplicate key 'a' (first on line 1)"),
    ]


def test_every_bad_line_is_reported() -> None:
    text = "\n".join(["", "{oops", line(1), line("a"), line("a"), line("b", {})])
    assert [n for n, _ in problems(text)] == [1, 2, 3, 5, 6]


def test_empty_file() -> None:
    assert problems("") == [(1, "file has no requests")]


def test_error_message_lists_path_and_lines() -> None:
    with pytest.raises(InputFileError) as info:
        parse_batch_input("\n" + line("a"), Path("night/in.jsonl"))
    assert "night/in.jsonl:1: blank line" in str(info.value)


def test_load_reads_files_and_reports_unreadable_ones(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text(line("a") + "\n")
    assert [r.key for r in load_batch_input(path)] == ["a"]
    with pytest.raises(InputFileError, match="cannot read file"):
        load_batch_input(tmp_path / "missing.jsonl")


def test_render_rows_round_trips() -> None:
    rows = parse_batch_input(line("a") + "\n" + line("b"))
    again = parse_batch_input(render_rows(rows))
    assert [(r.key, r.request) for r in again] == [(r.key, r.request) for r in rows]


def test_sdk_request_moves_config_fields() -> None:
    request = {
        **REQUEST,
        "generationConfig": {"temperature": 0.1, "maxOutputTokens": 5},
        "systemInstruction": {"parts": [{"text": "be brief"}]},
    }
    contents, config = sdk_request(request)
    assert contents == REQUEST["contents"]
    assert config == {
        "temperature": 0.1,
        "maxOutputTokens": 5,
        "systemInstruction": {"parts": [{"text": "be brief"}]},
    }


def test_invalid_utf8_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes((line("a") + "\n" + line("b") + "\n").encode().replace(b'"b"', b'"\xe9"'))
    with pytest.raises(InputFileError) as info:
        load_batch_input(path)
    assert [(p.line, p.reason) for p in info.value.problems] == [
        (2, "not UTF-8: invalid byte 0xe9 at column 10")
    ]
    assert f"{path}:2: not UTF-8" in str(info.value)


def test_a_key_given_twice_in_one_object_is_refused() -> None:
    request, contents = json.dumps(REQUEST), json.dumps(REQUEST["contents"])
    twice = '{"key": "a", "key": "b", "request": ' + request + "}"
    nested = '{"key": "c", "request": {"contents": [], "contents": ' + contents + "}}"
    assert problems(line("z") + "\n" + twice + "\n" + nested + "\n") == [
        (2, "invalid JSON: key 'key' given twice in one object"),
        (3, "invalid JSON: key 'contents' given twice in one object"),
    ]
