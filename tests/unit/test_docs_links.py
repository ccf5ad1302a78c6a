"""Every relative link of the README, CONTRIBUTING and docs/ leads to a file that exists; the
README stays short (its internals are in docs/architecture.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_leads_somewhere(page: Path) -> None:
    broken = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if target.startswith(("http://", "https://", "#", "mailto:", "data:", "<")):
            continue
        path = target.split("#")[0]
        if path and not (page.parent / path).exists():
            broken.append(target)
    assert broken == [], f"{page.name}: {broken}"


def test_the_readme_is_short_and_opens_with_its_two_commands() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < 200
    assert lines[2:6] == [
        "```sh",
        "sh tools/uv.sh run nightshift demo     # a sandboxed night on local emulators: no keys, "
        "no network",
        "sh tools/uv.sh run pytest              # the tests (real Prefect servers, subprocesses, "
        "PostgreSQL)",
        "```",
    ]
    prose = [line for line in lines if not line.startswith(("|", "    ", "nightshift", "sh "))]
    assert max(len(line) for line in prose) <= 100
