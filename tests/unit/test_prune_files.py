"""Retention of files: command-job folders by their newest file, never a live one; manifests."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

from nightshift.backends.command import supervisor as runner
from nightshift.backends.gemini.results import manifest_path
from nightshift.store.retention import prune_folders, prune_manifests

NOW = datetime(2026, 11, 29, 6, 0, tzinfo=UTC)
CUTOFF = NOW - timedelta(days=90)
OLD = (CUTOFF - timedelta(days=1)).timestamp()


def _folder(state_dir: Path, name: str, *, mtime: float | None, live: bool = False) -> Path:
    jobdir = state_dir / "jobs" / name
    jobdir.mkdir(parents=True)
    (jobdir / "exit_code").write_text("0")
    (jobdir / "log").write_text("x" * 100)
    if live:  # this test process stands in for a supervisor still running
        (jobdir / runner.RUNNER_PID).write_text(json.dumps(runner.process_identity(os.getpid())))
    if mtime is not None:
        for path in [*jobdir.iterdir(), jobdir]:
            os.utime(path, (mtime, mtime))
    return jobdir


def test_old_finished_folder_goes_live_and_new_ones_stay(tmp_path: Path) -> None:
    old = _folder(tmp_path, "old-1", mtime=OLD)
    live = _folder(tmp_path, "live-1", mtime=OLD, live=True)
    new = _folder(tmp_path, "new-1", mtime=None)
    assert prune_folders(tmp_path, CUTOFF, dry_run=True) == (1, 101)
    assert old.exists()
    assert prune_folders(tmp_path, CUTOFF) == (1, 101)
    assert not old.exists() and live.exists() and new.exists()


def test_a_folder_with_one_new_file_is_not_old(tmp_path: Path) -> None:
    jobdir = _folder(tmp_path, "mixed", mtime=OLD)
    (jobdir / "log").write_text("still written")
    assert prune_folders(tmp_path, CUTOFF) == (0, 0)
    assert jobdir.exists()


def test_no_jobs_folder_is_nothing_to_prune(tmp_path: Path) -> None:
    assert prune_folders(tmp_path / "missing", CUTOFF) == (0, 0)


def test_old_manifests_beside_the_output_go(tmp_path: Path) -> None:
    output = tmp_path / "out.jsonl"
    old = manifest_path(output, "batches/old")
    new = manifest_path(output, "batches/new")
    other = manifest_path(tmp_path / "other.jsonl", "batches/x")
    for path in (old, new, other):
        path.write_text("{}\n")
    os.utime(old, (OLD, OLD))
    os.utime(other, (OLD, OLD))
    assert prune_manifests([output], CUTOFF) == (1, 3)
    assert not old.exists() and new.exists() and other.exists()
