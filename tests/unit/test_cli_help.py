"""``nightshift --help`` and each subcommand's: a description, every option explained with its
default, no markup; ``--version`` prints the package's version."""

from __future__ import annotations

import argparse
from importlib.metadata import version

import pytest

from nightshift.cli.main import build_parser, main


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_the_top_help_has_no_markup_and_names_every_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "``" not in out and "Nightshift runs a team's nightly batch" in out
    assert all(name in out for name in _subcommands())
    assert max(len(line) for line in out.splitlines()[4:]) <= 100


def test_version_prints_the_packages(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"nightshift {version('nightshift')}"


@pytest.mark.parametrize("name", sorted(_subcommands()))
def test_each_command_says_what_it_does_and_every_option_its_default(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = _subcommands()[name]
    assert parser.description, name
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or not action.option_strings:
            continue
        assert action.help, (name, action.option_strings)  # every option explained
        meaningful = action.default not in (None, False, [], argparse.SUPPRESS)
        if meaningful:
            shown = parser.formatter_class(name)._get_help_string(action)  # type: ignore[attr-defined]
            assert "default" in shown.lower(), (name, action.option_strings, shown)
    with pytest.raises(SystemExit):
        main([name, "--help"])
    out = capsys.readouterr().out
    assert "``" not in out, out
    assert out.splitlines()[0].startswith(f"usage: nightshift {name}")
