"""A command job's supervisor keeps its exit code until the disk has room to write it."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from nightshift.backends.command import supervisor


def test_an_exit_code_is_written_once_the_disk_has_room_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = supervisor.write_atomic
    full = {"left": 3}

    def write(path: Path, text: str) -> None:
        if full["left"]:
            full["left"] -= 1
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, text)

    monkeypatch.setattr(supervisor, "write_atomic", write)
    waited: list[float] = []
    assert supervisor.keep_writing(tmp_path / "exit_code", "0\n", sleep=waited.append)
    assert (tmp_path / "exit_code").read_text() == "0\n"
    assert waited == [supervisor.WRITE_RETRY_S] * 3


def test_another_error_or_a_day_of_full_disk_gives_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(path: Path, text: str) -> None:
        raise OSError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(supervisor, "write_atomic", refuse)
    assert not supervisor.keep_writing(tmp_path / "exit_code", "0\n", sleep=lambda _s: None)

    def full(path: Path, text: str) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(supervisor, "write_atomic", full)
    waited: list[float] = []
    assert not supervisor.keep_writing(
        tmp_path / "exit_code", "0\n", wait_s=10.0, give_up_s=30.0, sleep=waited.append
    )
    assert waited == [10.0, 10.0, 10.0]
