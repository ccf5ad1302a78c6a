"""The Slack emulator answers as Slack does: form and JSON bodies, token checks, faults, down."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from nightshift.sandbox.slack_emulator import SlackEmulator

TOKEN = "xoxb-emu-5f2a"


@pytest.fixture
def slack() -> Iterator[SlackEmulator]:
    with SlackEmulator(TOKEN, channels=["#known"]) as emulator:
        yield emulator


def _form(url: str, fields: dict[str, str]) -> tuple[int, Any]:
    data = urllib.parse.urlencode(fields).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=5) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_a_form_body_with_a_token_field_posts_and_threads(slack: SlackEmulator) -> None:
    url = slack.base_url + "chat.postMessage"
    blocks = json.dumps([{"type": "section", "text": {"type": "mrkdwn", "text": "b"}}])

    status, root = _form(url, {"token": TOKEN, "channel": "#known", "text": "t", "blocks": blocks})
    _, reply = _form(url, {"token": TOKEN, "channel": "#known", "text": "r",
                           "thread_ts": root["ts"]})  # fmt: skip
    _, nobody = _form(url, {"channel": "#known", "text": "t"})
    _, unknown = _form(url, {"token": TOKEN, "channel": "#elsewhere", "text": "t"})

    assert status == 200 and root["ok"] and reply["ok"] and reply["ts"] > root["ts"]
    assert (nobody, unknown) == (
        {"ok": False, "error": "not_authed"},
        {"ok": False, "error": "channel_not_found"},
    )
    first, second = slack.messages
    assert first.blocks == json.loads(blocks) and second.thread_ts == root["ts"]


def test_web_client_auth_test_and_a_wrong_token(slack: SlackEmulator) -> None:
    assert WebClient(token=TOKEN, base_url=slack.base_url).auth_test()["user"] == "nightshift"

    with pytest.raises(SlackApiError) as caught:
        WebClient(token="xoxb-other", base_url=slack.base_url).chat_postMessage(
            channel="#known", text="x"
        )

    assert caught.value.response["error"] == "invalid_auth"
    assert slack.messages == []


def test_faults_answer_once_each_and_down_refuses_connections(slack: SlackEmulator) -> None:
    url = slack.base_url + "chat.postMessage"
    fields = {"token": TOKEN, "channel": "#known", "text": "t"}
    slack.inject("429", retry_after=7)
    slack.inject("503")

    with pytest.raises(urllib.error.HTTPError) as limited:
        urllib.request.urlopen(urllib.request.Request(url, urllib.parse.urlencode(fields).encode()))
    assert limited.value.code == 429 and limited.value.headers["Retry-After"] == "7"
    assert _form(url, fields)[0] == 503
    assert _form(url, fields)[0] == 200

    slack.down()
    with pytest.raises(urllib.error.URLError):
        _form(url, fields)
    slack.up()
    assert _form(url, fields)[0] == 200
    assert [status for _, status, _ in slack.calls] == [429, 503, 200, 200]


def test_webhooks_answer_ok_or_a_short_error(slack: SlackEmulator) -> None:
    hook = slack.webhook_url("#team")
    request = urllib.request.Request(
        hook, json.dumps({"text": "hi"}).encode(), {"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=5) as reply:
        assert reply.read() == b"ok"

    gone = hook.rsplit("/", 1)[0] + "/nope"
    assert _form(gone, {"text": "x"}) == (404, "no_service")
    assert [(m.channel, m.text, m.via) for m in slack.messages] == [("#team", "hi", "webhook")]
