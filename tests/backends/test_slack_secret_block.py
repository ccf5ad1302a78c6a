"""A Slack token kept in a Prefect Secret block, read from a real Prefect server at send time."""

from __future__ import annotations

import uuid

import pytest

from nightshift.config.notify import Route, SlackSettings
from nightshift.notify.send import SlackSender
from nightshift.sandbox.slack_emulator import SlackEmulator

pytestmark = pytest.mark.usefixtures("prefect_server")

TOKEN = "xoxb-block-5e4d3c2b1a"


def test_the_token_comes_from_the_secret_block_and_a_missing_block_is_one_line() -> None:
    from prefect.blocks.system import Secret

    name = f"slack-bot-{uuid.uuid4().hex[:8]}"
    Secret(value=TOKEN).save(name)
    with SlackEmulator(TOKEN) as slack:
        sender = SlackSender(SlackSettings(token_block=name, base_url=slack.base_url))
        sent = sender.post("partial", Route(channel="#digest"), "night partial", [])
        missing = SlackSender(SlackSettings(token_block="no-such-block", base_url=slack.base_url))
        refused = missing.post("partial", Route(channel="#digest"), "night partial", [])

    assert sent.ok and [m.channel for m in slack.messages] == ["#digest"]
    assert not refused.ok
    assert refused.error == (
        "cannot read the Slack token: fix notify.slack.token_block "
        "(Prefect Secret block 'no-such-block')"
    )
    assert TOKEN not in (refused.error or "")
