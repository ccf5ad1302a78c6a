"""Whether Prefect's settings may name an API, read without importing Prefect: when none can,
``nightshift run`` starts its temporary server first (``nightshift/cli/own_server.py``); in
doubt, Prefect decides as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from nightshift.cli.own_server import prefect_api_configured

LOCAL = 'PREFECT_API_URL = "http://127.0.0.1:4200/api"'


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "home").mkdir()
    (tmp_path / "cwd").mkdir()
    return tmp_path / "home"


def _configured(home: Path, **environ: str) -> bool:
    return prefect_api_configured({"PREFECT_HOME": str(home), **environ}, home.parent / "cwd")


def test_nothing_configured_anywhere(home: Path) -> None:
    assert not _configured(home)  # no profiles file: Prefect's default, its temporary server
    (home / "profiles.toml").write_text(
        'active = "ephemeral"\n[profiles.ephemeral]\nPREFECT_SERVER_ALLOW_EPHEMERAL_MODE = "true"\n'
        f"[profiles.local]\n{LOCAL}\n"
    )
    assert not _configured(home)  # a profile names a server, but not the active one


def test_the_variable_or_the_active_profile_names_an_api(home: Path) -> None:
    assert _configured(home, PREFECT_API_URL="http://team:4200/api")
    (home / "profiles.toml").write_text(f'active = "local"\n[profiles.local]\n{LOCAL}\n')
    assert _configured(home)
    assert not _configured(home, PREFECT_PROFILE="other")
    elsewhere = home.parent / "profiles.toml"
    elsewhere.write_text(f'active = "team"\n[profiles.team]\n{LOCAL}\n')
    (home / "profiles.toml").unlink()
    assert _configured(home, PREFECT_PROFILES_PATH=str(elsewhere))


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("prefect.toml", "[api]\nurl = 'http://team:4200/api'\n"),
        (".env", "PREFECT_API_URL=http://team:4200/api\n"),
        ("pyproject.toml", "[tool.prefect.api]\nurl = 'http://team:4200/api'\n"),
    ],
)
def test_a_settings_file_in_the_working_directory_may_name_one(
    home: Path, name: str, text: str
) -> None:
    (home.parent / "cwd" / name).write_text(text)
    assert _configured(home)


def test_in_doubt_prefect_decides(home: Path) -> None:
    (home / "profiles.toml").write_text("active = [unclosed\n")
    assert _configured(home)  # a profiles file Prefect would refuse: its error, not ours
    (home / "profiles.toml").unlink()
    assert _configured(home, PREFECT_SERVER_ALLOW_EPHEMERAL_MODE="false")
    (home.parent / "cwd" / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    assert not _configured(home)  # a project's pyproject without Prefect's table
