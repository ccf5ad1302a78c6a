"""Atomic writes: all or nothing, readable like any other file."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from nightshift.files import write_atomic


def test_write_atomic_replaces_whole_files_with_normal_permissions(tmp_path: Path) -> None:
    path = tmp_path / "out" / "rows.jsonl"
    write_atomic(path, "a\n")
    write_atomic(path, "b\n")
    assert path.read_text() == "b\n"
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask
    assert [p.name for p in path.parent.iterdir()] == ["rows.jsonl"]  # no temp file left


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    write_atomic(path, "old\n")
    with pytest.raises(UnicodeEncodeError):
        write_atomic(path, "new \udcff\n")  # a lone surrogate cannot be encoded
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["rows.jsonl"]
