"""How messages name things: a catalogue by its ``name``, else its file's stem (never a local
path); a list of jobs by its first few."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePath

__all__ = ["DEFAULT_NAME", "first_few", "shown_name"]

DEFAULT_NAME = "nightshift"  # a catalogue with neither a name nor a file


def shown_name(key: str) -> str:
    """A catalogue key as people read it: a key that is a file's path becomes the file's stem."""
    if "/" in key or "\\" in key:
        return PurePath(key.replace("\\", "/")).stem or DEFAULT_NAME
    return key or DEFAULT_NAME


def first_few(names: Sequence[str], named: int = 3) -> str:
    """``a, b, c and 3 more``: the first ``named``, then how many were left out."""
    shown = ", ".join(names[:named])
    more = len(names) - named
    return f"{shown} and {more} more" if more > 0 else shown
