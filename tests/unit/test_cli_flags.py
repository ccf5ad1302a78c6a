"""The CLI spells it --catalogue, as the code does; --catalog still works and is not shown."""

from __future__ import annotations

import pytest

from nightshift.cli.main import build_parser


@pytest.mark.parametrize("command", ["run", "validate"])
@pytest.mark.parametrize("flag", ["--catalogue", "--catalog"])
def test_both_spellings_name_the_catalogue(command: str, flag: str) -> None:
    assert build_parser().parse_args([command, flag, "x.yaml"]).catalogue == "x.yaml"
    assert build_parser().parse_args([command]).catalogue == "nightshift.yaml"


@pytest.mark.parametrize("command", ["run", "validate"])
def test_help_says_it_once(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args([command, "--help"])
    out = capsys.readouterr().out
    assert out.count("--catalogue FILE") == 2  # usage line and options: one spelling
    assert "--catalog " not in out and "--catalog," not in out
