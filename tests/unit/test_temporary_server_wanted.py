"""Whether Prefect would start its own temporary server, read as Prefect 3.9 reads its settings
but without importing it: where it would, ``nightshift run`` starts one first
(``nightshift/cli/own_server.py``); where it would not (an API named, its ephemeral mode off)
or in doubt, Prefect decides as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from nightshift.cli.own_server import temporary_server_wanted

LOCAL = 'PREFECT_API_URL = "http://127.0.0.1:4200/api"'
EPHEMERAL = 'PREFECT_SERVER_EPHEMERAL_ENABLED = "true"'


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "home").mkdir()
    (tmp_path / "cwd").mkdir()
    return tmp_path / "home"


def _wanted(home: Path, **environ: str) -> bool:
    return temporary_server_wanted({"PREFECT_HOME": str(home), **environ}, home.parent / "cwd")


def test_prefects_default_profiles_start_one(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _wanted(home)  # no profiles file: Prefect's own, whose active profile is ephemeral
    assert _wanted(home, PREFECT_PROFILE="local")  # PREFECT_HOME's file missing: that one still
    monkeypatch.setenv("HOME", str(home.parent))  # no PREFECT_HOME, no ~/.prefect/profiles.toml:
    assert not temporary_server_wanted({"PREFECT_PROFILE": "local"}, home)  # Prefect's file
    assert temporary_server_wanted({}, home)  # with its profiles: `local` names a server
    (home / "profiles.toml").write_text(
        f'active = "ephemeral"\n[profiles.ephemeral]\n{EPHEMERAL}\n[profiles.local]\n{LOCAL}\n'
    )
    assert _wanted(home)  # a profile names a server, but not the active one
    assert not _wanted(home, PREFECT_PROFILE="local")


def test_an_api_named_in_the_environment_or_the_active_profile(home: Path) -> None:
    assert not _wanted(home, PREFECT_API_URL="http://team:4200/api")
    assert not _wanted(home, prefect_api_url="http://team:4200/api")  # as Prefect: any case
    (home / "profiles.toml").write_text(f'active = "team"\n[profiles.team]\n{LOCAL}\n')
    assert not _wanted(home)
    elsewhere = home.parent / "profiles.toml"
    elsewhere.write_text(f'active = "mine"\n[profiles.mine]\n{EPHEMERAL}\n')
    assert _wanted(home, PREFECT_PROFILES_PATH=str(elsewhere))  # that file, not PREFECT_HOME's


def test_ephemeral_mode_off_is_prefects_to_refuse(home: Path) -> None:
    """A profile that does not turn it on (Prefect 3.9's default is off): Prefect says there is
    no API, as before, rather than a server it was told not to start."""
    (home / "profiles.toml").write_text('active = "default"\n[profiles.default]\n')
    assert not _wanted(home)
    assert _wanted(home, PREFECT_SERVER_EPHEMERAL_ENABLED="true")
    assert _wanted(home, PREFECT_SERVER_ALLOW_EPHEMERAL_MODE="1")  # its older name
    (home / "profiles.toml").unlink()
    assert not _wanted(home, PREFECT_SERVER_EPHEMERAL_ENABLED="false")  # over the profile's
    assert not _wanted(home, PREFECT_SERVER_ALLOW_EPHEMERAL_MODE="no")


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("prefect.toml", "[api]\nurl = 'http://team:4200/api'\n"),
        (".env", "PREFECT_PROFILES_PATH=/etc/prefect/profiles.toml\n"),
        ("pyproject.toml", "[tool.prefect.api]\nurl = 'http://team:4200/api'\n"),
    ],
)
def test_a_settings_file_in_the_working_directory_leaves_it_to_prefect(
    home: Path, name: str, text: str
) -> None:
    (home.parent / "cwd" / name).write_text(text)
    assert not _wanted(home)


def test_in_doubt_prefect_decides(home: Path) -> None:
    (home / "profiles.toml").write_text("active = [unclosed\n")
    assert not _wanted(home)  # a profiles file Prefect would refuse: its error, not ours
    (home / "profiles.toml").unlink()
    (home.parent / "cwd" / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    assert _wanted(home)  # a project's pyproject without Prefect's table
