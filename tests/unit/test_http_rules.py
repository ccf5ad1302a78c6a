"""The http backend's pure rules: paths, templates, states, what an answer means, SSE."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from nightshift.backends.base import ExternalState
from nightshift.backends.http.rules import (
    Paths,
    StateMap,
    classify_answer,
    error_message,
    extract,
    fill,
    fill_url,
    parse_retry_after,
    sse_events,
    to_status,
)

STATES = StateMap.of(
    {"queued": ["queued"], "running": ["started"], "succeeded": ["finished"],
     "failed": ["failed"], "cancelled": ["canceled"]}
)  # fmt: skip
PATHS = Paths(state="data.status", id="data.id", result="data.result", error="data.error",
              started_at="data.started_at", finished_at="data.ended_at")  # fmt: skip


def test_extract_follows_dotted_paths_through_objects_and_lists() -> None:
    answer = {"data": {"jobs": [{"id": "a"}, {"id": "b"}]}}
    assert extract(answer, "data.jobs.1.id") == "b"
    assert extract(answer, "data.nope", None) is None
    with pytest.raises(KeyError, match="'nope'"):
        extract(answer, "data.jobs.0.nope")


def test_templates_fill_only_their_placeholders() -> None:
    body = {"task": "t for {label}", "raw": '{"json": 1}', "n": 3, "l": ["{key}"]}
    assert fill(body, {"label": "a", "key": "k/1"}) == {
        "task": "t for a", "raw": '{"json": 1}', "n": 3, "l": ["k/1"]
    }  # fmt: skip
    assert fill_url("http://x/jobs?key={key}", {"key": "cat/n a/1"}) == (
        "http://x/jobs?key=cat%2Fn%20a%2F1"
    )
    assert fill_url("http://x/jobs?ids={ids}", {"ids": "a,b"}) == "http://x/jobs?ids=a,b"


def test_answers_map_to_states_with_times_result_and_error() -> None:
    ok = to_status(
        {"data": {"id": "j1", "status": "FINISHED", "result": {"rows": 3},
                  "started_at": "2030-01-01T00:00:00Z", "ended_at": 1893456060}},
        PATHS, STATES,
    )  # fmt: skip
    assert ok.state is ExternalState.SUCCEEDED
    assert ok.extra["result"] == {"rows": 3} and ok.extra["job_id"] == "j1"
    assert ok.started_at == datetime(2030, 1, 1, tzinfo=UTC)
    assert ok.finished_at == datetime(2030, 1, 1, 0, 1, tzinfo=UTC)
    failed = to_status({"data": {"status": "failed", "error": {"message": "disk full"}}}, PATHS,
                       STATES)  # fmt: skip
    assert (failed.state, failed.detail) == (ExternalState.FAILED, "disk full")
    plain = to_status({"data": {"status": "failed"}}, PATHS, STATES)
    assert plain.detail == "the API says 'failed'"
    with pytest.raises(ValueError, match="'paused' is not mapped"):
        to_status({"data": {"status": "paused"}}, PATHS, STATES)
    with pytest.raises(ValueError, match="no 'status'"):
        to_status({"data": {}}, PATHS, STATES)


@pytest.mark.parametrize(
    ("code", "body", "headers", "known", "kind"),
    [
        (200, "{}", {}, False, "ok"),
        (201, "{}", {}, False, "ok"),
        (429, '{"error": "quota"}', {"Retry-After": "7"}, False, "backpressure"),
        (500, "boom", {}, True, "transient"),
        (503, "", {}, False, "transient"),
        (408, "", {}, False, "transient"),
        (404, '{"error": "no job j1"}', {}, True, "expired"),
        (404, "not here", {}, False, "permanent"),
        (400, '{"detail": "task is required"}', {}, False, "permanent"),
        (401, '{"error": "unknown token"}', {}, False, "permanent"),
    ],
)
def test_what_an_answer_means(
    code: int, body: str, headers: dict[str, str], known: bool, kind: str
) -> None:
    assert classify_answer(code, body, headers, known_id=known).kind == kind


def test_a_429_waits_as_long_as_retry_after_says_and_a_4xx_carries_the_body_message() -> None:
    assert classify_answer(429, "", {"retry-after": "7"}).retry_after_s == 7
    now = datetime(2030, 1, 1, tzinfo=UTC)
    assert parse_retry_after("Tue, 01 Jan 2030 00:00:30 GMT", now) == 30
    assert parse_retry_after(None) == 1.0 and parse_retry_after("soon") == 1.0
    assert parse_retry_after("99999") == 300.0  # bounded
    bad = classify_answer(422, '{"error": {"message": "seconds must be a number"}}')
    assert bad.message == "HTTP 422: seconds must be a number"
    assert "does not know the job" in classify_answer(404, "gone", known_id=True).message
    assert error_message("x" * 400).endswith("…") and len(error_message("x" * 400)) == 300


def test_server_sent_events_are_parsed_as_the_spec_says() -> None:
    lines = [": keep-alive", "", "event: status", 'data: {"a":', "data: 1}", "id: 7", "",
             "data: plain", "", "retry: 500", ""]  # fmt: skip
    events = list(sse_events(lines))
    assert [(e.event, e.data, e.id) for e in events] == [
        ("status", '{"a":\n1}', "7"),
        ("message", "plain", "7"),
    ]


def test_a_final_answer_says_what_the_job_cost_where_cost_path_points() -> None:
    paths = Paths(state="data.status", cost="data.usage.usd")
    done = to_status({"data": {"status": "finished", "usage": {"usd": "4.10"}}}, paths, STATES)
    assert done.extra["cost_usd"] == 4.1
    # only a final answer's cost counts; a cost that is no number is no cost
    running = to_status({"data": {"status": "started", "usage": {"usd": 1}}}, paths, STATES)
    assert "cost_usd" not in running.extra
    for odd in ("n/a", True, -1, None, "nan"):
        answer = {"data": {"status": "failed", "usage": {"usd": odd}}}
        assert "cost_usd" not in to_status(answer, paths, STATES).extra
