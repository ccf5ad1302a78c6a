"""``nightshift init``: a starter catalogue that validates, never written over an existing one."""

from __future__ import annotations

from pathlib import Path

import pytest

from nightshift.cli.exits import BAD_CATALOGUE as EXIT_BAD_CATALOGUE
from nightshift.cli.main import main
from nightshift.config.loader import load_catalogue


def test_init_writes_a_commented_starter_that_validates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "Team Batch"
    folder.mkdir()
    path = folder / "nightshift.yaml"
    assert main(["init", "--catalogue", str(path)]) == 0
    text = path.read_text()
    assert text.startswith("# A starter catalogue") and "# notify:" in text
    catalogue = load_catalogue(path)
    assert catalogue.name == "team-batch" and [j.label for j in catalogue.jobs] == ["hello"]
    assert main(["validate", "--catalogue", str(path)]) == 0
    assert "wrote" in capsys.readouterr().out


def test_init_over_an_existing_file_is_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "nightshift.yaml"
    path.write_text("mine\n")
    assert main(["init", "--catalogue", str(path), "--name", "x"]) == EXIT_BAD_CATALOGUE
    captured = capsys.readouterr()
    assert path.read_text() == "mine\n"
    assert captured.err.splitlines() == [f"nightshift init: {path} exists; nothing written"]
    assert captured.out == ""
