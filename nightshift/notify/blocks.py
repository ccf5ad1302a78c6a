"""Block Kit pieces within Slack's limits, and escaping of text we did not write (pure).

Limits (Slack's): 50 blocks a message, 3,000 characters in a section's text, 150 in a header's
plain text, 10 fields of 2,000 characters. Slack does not always refuse what exceeds them, so we
cut first and say what was cut ("... and N more").
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "HEADER_CHARS",
    "MAX_BLOCKS",
    "SECTION_CHARS",
    "Block",
    "context",
    "cut",
    "escape",
    "header",
    "pack_lines",
    "section",
]

MAX_BLOCKS = 50
SECTION_CHARS = 3000
HEADER_CHARS = 150

Block = dict[str, Any]


def escape(text: str) -> str:
    """Slack's three control characters (``&`` first): ``<!channel>`` then pings nobody."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def cut(text: str, limit: int) -> str:
    """``text`` at most ``limit`` characters, ending in "..." when it was longer."""
    return text if len(text) <= limit else text[: max(0, limit - 3)].rstrip() + "..."


def header(text: str) -> Block:
    """A header block (plain text, emoji shortcodes shown), cut to 150 characters."""
    return {"type": "header", "text": {"type": "plain_text", "text": cut(text, HEADER_CHARS),
                                       "emoji": True}}  # fmt: skip


def section(mrkdwn: str) -> Block:
    """A mrkdwn section cut to 3,000 characters (callers escape what they did not write)."""
    return {"type": "section", "text": {"type": "mrkdwn", "text": cut(mrkdwn, SECTION_CHARS)}}


def context(mrkdwn: str) -> Block:
    """A context block: small grey text under the rest."""
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": cut(mrkdwn, 2000)}]}


def pack_lines(lines: list[str], max_sections: int, more: str = "... and {n} more") -> list[Block]:
    """``lines`` packed into at most ``max_sections`` sections of at most 3,000 characters.

    Lines that do not fit are dropped and the last section ends with ``more`` (``{n}`` the number
    dropped). A single line longer than a section is cut.
    """
    if max_sections < 1 or not lines:
        return []
    reserve = len(more.format(n=len(lines))) + 1  # room for the "... and N more" line
    chunks: list[list[str]] = [[]]
    sizes = [0]
    shown = 0
    for line in lines:
        line = cut(line, SECTION_CHARS - reserve - 1)
        last = len(chunks) == max_sections
        room = SECTION_CHARS - sizes[-1] - (reserve if last else 0)
        if sizes[-1] and len(line) + 1 > room:
            if last:
                break
            chunks.append([])
            sizes.append(0)
        chunks[-1].append(line)
        sizes[-1] += len(line) + 1
        shown += 1
    if shown < len(lines):
        if len(chunks) == max_sections and sizes[-1] + reserve > SECTION_CHARS:
            shown -= 1  # make room for the "more" line in a full last section
            chunks[-1].pop()
        chunks[-1].append(more.format(n=len(lines) - shown))
    return [section("\n".join(chunk)) for chunk in chunks if chunk]
