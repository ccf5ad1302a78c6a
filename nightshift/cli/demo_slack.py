"""The demo's Slack: its ``notify:`` section pointed at the sandbox emulator, and what it received.

The demo starts ``sandbox.slack_emulator`` before writing its catalogue, routes by severity as a
team would (a failed night and in-night alerts to ``#batch-alerts``, a partial night's digest to
``#batch-digest``, an ok night nowhere) and at the end prints each channel as a person would read
it: the digest in full, the night's alert thread with its replies indented under the first alert.
Every message (text, blocks, ts, thread) is also kept in ``slack.json`` in the sandbox folder.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nightshift.sandbox.slack_emulator import SlackMessage

__all__ = ["ALERTS", "DIGEST", "SLACK_TOKEN", "SLACK_TOKEN_ENV", "notify_section", "slack_report"]

# the emulator's bot token, in a variable set for the demo's process only (never a real one)
SLACK_TOKEN_ENV = "SANDBOX_SLACK_TOKEN"
SLACK_TOKEN = "xoxb-sandbox-demo"
ALERTS, DIGEST = "#batch-alerts", "#batch-digest"
_DIGEST_LINES = 12  # a digest's text lines shown (the rest is in slack.json)

NOTIFY = """\
notify:                     # Slack is sandbox/slack_emulator.py, its token set for the demo only
  env: sandbox
  slack: {token: %(token)s, base_url: %(url)s}
  routes:
    failed:  {channel: "%(alerts)s", mention: "<!here>"}   # no job succeeded: at once
    partial: {channel: "%(digest)s"}                        # read in the morning
    ok:      null                                              # an ok night is silent
    alert:   {channel: "%(alerts)s"}                        # in-night alerts, one thread
"""


def notify_section(base_url: str) -> str:
    """The demo catalogue's ``notify:`` section, Slack being the emulator at ``base_url``."""
    values = {"token": SLACK_TOKEN_ENV, "url": json.dumps(base_url)}
    return NOTIFY % (values | {"alerts": ALERTS, "digest": DIGEST})


def slack_report(messages: list[SlackMessage], saved: Path) -> list[str]:
    """What each channel received, for a person; ``saved`` gets every message as JSON."""
    saved.write_text(json.dumps([_as_dict(m) for m in messages], indent=2), encoding="utf-8")
    if not messages:
        return ["slack: nothing sent (an ok night is silent: routes.ok is null)"]
    lines = [f"slack: {len(messages)} message(s) received (all of them in {saved})"]
    for channel in dict.fromkeys(m.channel for m in messages):
        here = [m for m in messages if m.channel == channel]
        lines.append(f"  {channel}")
        for root in (m for m in here if m.thread_ts is None):
            lines += _shown(root, "    ")
            for reply in (m for m in here if m.thread_ts == root.ts):
                lines += _shown(reply, "      > ", first_only=True)
    return lines


def _shown(message: SlackMessage, indent: str, *, first_only: bool = False) -> list[str]:
    """A message's plain text as Slack would show it (entities unescaped), the first lines."""
    text = html.unescape(message.text or "").strip().splitlines() or ["(blocks only)"]
    limit = 1 if first_only else _DIGEST_LINES
    more = [f"{' ' * len(indent)}... and {len(text) - limit} more"] if len(text) > limit else []
    pad = " " * len(indent)
    return [indent + text[0], *(pad + line for line in text[1:limit]), *more]


def _as_dict(message: SlackMessage) -> dict[str, Any]:
    return {
        "channel": message.channel,
        "ts": message.ts,
        "thread_ts": message.thread_ts,
        "text": message.text,
        "blocks": message.blocks,
    }
