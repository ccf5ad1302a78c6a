"""``nightshift prune``: delete the history older than the window and say what went."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

__all__ = ["PRUNE_EXIT_CODES", "catalogue_scope", "run_prune"]

PRUNE_EXIT_CODES = """\
exit codes:
  0   pruned (or, with --dry-run, listed)
  4   invalid --catalogue
  6   the ledger database could not be opened (NIGHTSHIFT_DATABASE_URL)
  64  bad command line (usage), e.g. a bad --keep
"""


def catalogue_scope(path: str | None) -> tuple[str | None, list[Path] | None]:
    """The catalogue's key and its Gemini jobs' outputs; (None, None) without one.

    Raises CatalogueError for an invalid catalogue.
    """
    from nightshift.config.catalogue import load_catalogue
    from nightshift.engine.jobspec import job_spec

    if path is None:
        return None, None
    catalogue = load_catalogue(path)
    # the paths the backend writes beside (relative ones are next to the catalogue)
    specs = [job_spec(catalogue, job.label) for job in catalogue.jobs]
    outputs = [Path(s.options["output"]) for s in specs if s.backend == "gemini_batch"]
    return catalogue.key, outputs


def run_prune(
    url: str,
    state_dir: Path,
    keep_s: float,
    catalogue: str | None = None,
    outputs: list[Path] | None = None,
    *,
    dry_run: bool = False,
    now: datetime | None = None,
) -> int:
    """Prune, print one line per kind and return 0; database errors propagate."""
    from nightshift.store.retention import prune

    report = prune(
        url,
        state_dir,
        keep_s,
        catalogue=catalogue,
        outputs=outputs,
        dry_run=dry_run,
        now=now,
    )
    verb = "would remove" if dry_run else "removed"
    print(f"{verb} {report.transitions} ledger transitions before {report.cutoff.isoformat()}")
    print(f"{verb} {report.jobs} ledger job rows")
    if report.manifests is None:
        print("skipped Gemini submit manifests (give --catalogue to prune them)")
    else:
        print(f"{verb} {report.manifests} Gemini submit manifests ({report.manifest_bytes} bytes)")
    print(f"{verb} {report.folders} command-job folders ({report.folder_bytes} bytes)")
    return 0
