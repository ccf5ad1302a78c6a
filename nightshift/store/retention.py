"""Retention: delete the history older than a window (ledger rows, submit manifests, job folders).

Boundary: something whose time is *before* ``cutoff`` goes; at or after it, it stays (the same
side ``Ledger.history(since)`` reads). Without a catalogue every catalogue's ledger rows are
pruned (rows from before catalogues too) and manifests are skipped (only a catalogue knows where
its batch outputs are); with one, only its rows and its Gemini jobs' manifests.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy as sa

from nightshift.backends.command import supervisor as runner
from nightshift.store.ledger import Ledger, _jobs, _transitions

# the tables are the ledger's own; retention is the one other writer allowed to touch them
from nightshift.store.night_traces import NIGHT_TRACES_TABLE

__all__ = [
    "PruneReport",
    "prune",
    "prune_folders",
    "prune_ledger",
    "prune_manifests",
    "retention_scope",
]


@dataclass(frozen=True)
class PruneReport:
    """What was (or, on a dry run, would be) removed."""

    cutoff: datetime
    dry_run: bool
    transitions: int
    jobs: int
    manifests: int | None  # None: skipped (no catalogue given)
    manifest_bytes: int
    folders: int
    folder_bytes: int
    forecasts: int = 0  # the nights' forecasts (one a run), made before the cutoff
    missed_nights: int = 0  # the nights named missed before the cutoff


def retention_scope(path: str | None) -> tuple[str | None, list[Path] | None]:
    """What a prune of catalogue ``path`` covers: its key and its Gemini jobs' outputs.

    (None, None) without a catalogue: every catalogue's rows, and no manifests. Raises
    CatalogueError for an invalid catalogue.
    """
    from nightshift.config.catalogue import GeminiBatchJob
    from nightshift.config.loader import load_catalogue

    if path is None:
        return None, None
    catalogue = load_catalogue(path)
    # the manifests sit beside the outputs the backend writes (relative: next to the catalogue)
    jobs = [job for job in catalogue.jobs if isinstance(job, GeminiBatchJob)]
    return catalogue.key, [catalogue.home / job.output for job in jobs]


def prune_ledger(
    url: str, cutoff: datetime, *, catalogue: str | None = None, dry_run: bool = False
) -> tuple[int, int]:
    """Delete transitions (by ``at``) and job rows older than ``cutoff``; (transitions, jobs).

    A job row's time is its finish, else its submit; a row with neither (failed before its
    submit) has no time and is kept. ``catalogue`` None: every catalogue.
    """
    ledger = Ledger(url, catalogue or "default")  # brings the schema up to date
    t, j = _transitions, _jobs
    t_where: list[sa.ColumnElement[bool]] = [t.c.at < cutoff]
    j_where: list[sa.ColumnElement[bool]] = [
        sa.func.coalesce(j.c.finished_at, j.c.submitted_at) < cutoff
    ]
    if catalogue is not None:
        t_where.append(t.c.catalogue == catalogue)
        j_where.append(j.c.catalogue == catalogue)
    try:
        with ledger.engine.begin() as conn:
            if dry_run:
                count = sa.select(sa.func.count()).select_from
                n_t = conn.execute(count(t).where(*t_where)).scalar_one()
                n_j = conn.execute(count(j).where(*j_where)).scalar_one()
                return int(n_t), int(n_j)
            n_t = conn.execute(sa.delete(t).where(*t_where)).rowcount
            n_j = conn.execute(sa.delete(j).where(*j_where)).rowcount
            traces = NIGHT_TRACES_TABLE  # a traced run's row goes with its night's
            gone: list[sa.ColumnElement[bool]] = [traces.c.started_at < cutoff]
            if catalogue is not None:
                gone.append(traces.c.catalogue == catalogue)
            conn.execute(sa.delete(traces).where(*gone))
            return int(n_t), int(n_j)
    finally:
        ledger.close()


def _newest_mtime(path: Path) -> float:
    """The newest modification time of ``path`` and everything under it."""
    newest = path.stat().st_mtime
    for item in path.rglob("*"):
        try:
            newest = max(newest, item.lstat().st_mtime)
        except FileNotFoundError:
            continue  # removed while we looked
    return newest


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def _supervisor_alive(jobdir: Path) -> bool:
    """As CommandBackend._runner_alive; an unreadable pid file counts as alive (keep it)."""
    try:
        text = (jobdir / runner.RUNNER_PID).read_text(encoding="utf-8")
        ident = json.loads(text) if text else None
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        return True
    return isinstance(ident, dict) and bool(ident) and runner.identity_alive(ident)


def prune_folders(state_dir: Path, cutoff: datetime, *, dry_run: bool = False) -> tuple[int, int]:
    """Delete command-job folders (``state_dir/jobs/<id>``) whose newest file is older than
    ``cutoff`` and whose supervisor is not alive; (folders, bytes)."""
    jobs_dir = Path(state_dir) / "jobs"
    if not jobs_dir.is_dir():
        return 0, 0
    count = size = 0
    for jobdir in sorted(p for p in jobs_dir.iterdir() if p.is_dir() and not p.is_symlink()):
        if _newest_mtime(jobdir) >= cutoff.timestamp() or _supervisor_alive(jobdir):
            continue
        bytes_ = _size(jobdir)
        if not dry_run:
            shutil.rmtree(jobdir)
        count, size = count + 1, size + bytes_
    return count, size


def prune_manifests(
    outputs: Iterable[Path], cutoff: datetime, *, dry_run: bool = False
) -> tuple[int, int]:
    """Delete the Gemini submit manifests beside these outputs older than ``cutoff``."""
    count = size = 0
    for output in dict.fromkeys(Path(o) for o in outputs):
        if not output.parent.is_dir():
            continue
        # the pattern of nightshift.backends.gemini.results.manifest_path
        for path in sorted(output.parent.glob(f".{output.name}.*.manifest.json")):
            stat = path.stat()
            if stat.st_mtime >= cutoff.timestamp():
                continue
            if not dry_run:
                path.unlink(missing_ok=True)
            count, size = count + 1, size + stat.st_size
    return count, size


def prune(
    url: str,
    state_dir: Path,
    keep_s: float,
    *,
    catalogue: str | None = None,
    outputs: Iterable[Path] | None = None,
    dry_run: bool = False,
    now: datetime | None = None,
) -> PruneReport:
    """Prune everything older than ``keep_s`` seconds before ``now``; ``outputs`` None: skip
    manifests."""
    now = now or datetime.now(UTC)
    cutoff = datetime.fromtimestamp(now.timestamp() - keep_s, tz=UTC)
    n_t, n_j = prune_ledger(url, cutoff, catalogue=catalogue, dry_run=dry_run)
    n_f = _prune_forecasts(url, cutoff, catalogue, dry_run)
    n_m = _prune_missed(url, cutoff, catalogue, dry_run)
    manifests: int | None = None
    manifest_bytes = 0
    if outputs is not None:
        manifests, manifest_bytes = prune_manifests(outputs, cutoff, dry_run=dry_run)
    folders, folder_bytes = prune_folders(state_dir, cutoff, dry_run=dry_run)
    return PruneReport(
        cutoff, dry_run, n_t, n_j, manifests, manifest_bytes, folders, folder_bytes, n_f, n_m
    )


def _prune_forecasts(url: str, cutoff: datetime, catalogue: str | None, dry_run: bool) -> int:
    """The forecasts made before ``cutoff`` (``catalogue`` None: every catalogue's)."""
    from nightshift.store.forecasts import Forecasts

    ledger = Ledger(url, catalogue or "default")
    try:
        forecasts = Forecasts(ledger.engine, catalogue or "default")
        return forecasts.prune(cutoff, every_catalogue=catalogue is None, dry_run=dry_run)
    finally:
        ledger.close()


def _prune_missed(url: str, cutoff: datetime, catalogue: str | None, dry_run: bool) -> int:
    """The nights named missed before ``cutoff`` (``catalogue`` None: every catalogue's)."""
    from nightshift.store.missed_nights import MissedNights

    ledger = Ledger(url, catalogue or "default")
    try:
        missed = MissedNights(ledger.engine, catalogue or "default")
        return missed.prune(cutoff, every_catalogue=catalogue is None, dry_run=dry_run)
    finally:
        ledger.close()
