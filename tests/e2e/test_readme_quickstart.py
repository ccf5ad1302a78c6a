"""The README's quickstart, as written: its commands read out of the README and run in an empty
folder, each ending 0, the last two a plan and a report of that night."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from nightshift.cli.main import main

REPO = Path(__file__).resolve().parents[2]


def quickstart() -> list[list[str]]:
    """The commands of the README's quickstart block, comments dropped."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- quickstart.*?-->\n```sh\n(.*?)```\n<!-- /quickstart -->", text, re.S)
    assert block, "the README has no quickstart block"
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines()]
    return [shlex.split(c) for c in commands if c]


@pytest.mark.usefixtures("prefect_server")
def test_the_readme_quickstart_runs_as_written(
    sandbox: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = sandbox / "my-night"
    folder.mkdir()
    monkeypatch.chdir(folder)
    commands = quickstart()
    assert [c[:2] for c in commands[-2:]] == [["nightshift", "plan"], ["nightshift", "report"]]
    said = {}
    for argv in commands:
        assert argv[0] == "nightshift", argv
        code = main(argv[1:])
        out = capsys.readouterr()
        assert code == 0, (argv, out.out[-2000:], out.err[-2000:])
        said[argv[1]] = out.out
    assert "nightshift.yaml: ok" in said["validate"]
    assert "finish:" in said["plan"]
    assert said["report"].startswith("# Night ") and "hello" in said["report"]
