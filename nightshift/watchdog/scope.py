"""What a watchdog pass covers: a catalogue file's key and labels, or every catalogue."""

from __future__ import annotations

__all__ = ["catalogue_labels"]


def catalogue_labels(path: str | None) -> tuple[str | None, list[str] | None]:
    """The catalogue's key and its labels; (None, None) without a file.

    Raises CatalogueError for an invalid catalogue.
    """
    from nightshift.config.catalogue import load_catalogue

    if path is None:
        return None, None
    catalogue = load_catalogue(path)
    return catalogue.key, [job.label for job in catalogue.jobs]
